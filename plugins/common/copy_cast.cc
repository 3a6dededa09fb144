// Data movement host kernels: copy (strided to strided), cast (every dtype pair) and fill.
#include <cstring>
#include <string>
#include <vector>

#include "plugins/common/kernel_util.h"
#include "plugins/common/strided.h"

namespace oar::host {
namespace {

// Copy only moves bytes, so one instantiation per element size serves every dtype.
template <typename T>
void Copy(const KernelCall& call) {
  using U = BitsOf<sizeof(T)>;
  constexpr int64_t kSize = sizeof(T);
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef in = call.input(0);
  const TensorRef out = call.output(0);
  CheckSameShape(call, in, out, "input 0");
  const int64_t numel = out.numel();
  if (numel == 0) return;
  if (in.is_contiguous() && out.is_contiguous()) {
    const char* src = in.data<const char>();
    char* dst = out.data<char>();
    // Split on 4 KiB boundaries: each thread streams whole pages.
    ParallelFor(
        numel * kSize, [&](int64_t begin, int64_t end) { std::memcpy(dst + begin, src + begin, end - begin); }, numel,
        4096);
    return;
  }
  const auto layout = Collapse<2>(out.shape(), {out.strides(), in.strides()}, {kSize, kSize});
  ForEach<2>(layout, {out.data<char>(), in.data<char>()},
             [](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
               if (s[0] == kSize && s[1] == kSize) {
                 std::memcpy(p[0], p[1], n * kSize);
                 return;
               }
               U* o = reinterpret_cast<U*>(p[0]);
               const U* v = reinterpret_cast<const U*>(p[1]);
               const int64_t so = s[0] / kSize, sv = s[1] / kSize;
               if (so == 1 && sv == 0) {
                 const U value = v[0];
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = value;
               } else {
                 for (int64_t i = 0; i < n; ++i) o[i * so] = v[i * sv];
               }
             });
}

template <typename From, typename To>
void Cast(const KernelCall& call) {
  constexpr int64_t kIn = sizeof(From), kOut = sizeof(To);
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<From>, kDTypeOf<To>});
  const TensorRef in = call.input(0);
  const TensorRef out = call.output(0);
  CheckSameShape(call, in, out, "input 0");
  const auto layout = Collapse<2>(out.shape(), {out.strides(), in.strides()}, {kOut, kIn});
  ForEach<2>(layout, {out.data<char>(), in.data<char>()},
             [](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
               To* o = reinterpret_cast<To*>(p[0]);
               const From* v = reinterpret_cast<const From*>(p[1]);
               if (s[0] == kOut && s[1] == kIn) {
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = Convert<To>(v[i]);
               } else {
                 const int64_t so = s[0] / kOut, sv = s[1] / kIn;
                 for (int64_t i = 0; i < n; ++i) o[i * so] = Convert<To>(v[i * sv]);
               }
             });
}

template <typename T>
void Fill(const KernelCall& call) {
  constexpr int64_t kSize = sizeof(T);
  CheckArity(call, 0, 1);
  CheckDTypes(call, {kDTypeOf<T>});
  const TensorRef out = call.output(0);
  const T value = NumberAttr<T>(call, "value");
  const auto layout = Collapse<1>(out.shape(), {out.strides()}, {kSize});
  ForEach<1>(layout, {out.data<char>()},
             [value](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
               T* o = reinterpret_cast<T*>(p[0]);
               if (s[0] == kSize) {
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = value;
               } else {
                 for (int64_t i = 0; i < n; ++i) o[i * (s[0] / kSize)] = value;
               }
             });
}

template <typename From, typename... Tos>
void AddCastsFrom(std::vector<HostKernel>* kernels, TypeList<Tos...>) {
  (kernels->push_back({"cast", {kDTypeOf<From>, kDTypeOf<Tos>, 0}, 2, &GuardedKernel<&Cast<From, Tos>>}), ...);
}

template <typename... Ts>
void AddAll(std::vector<HostKernel>* kernels, TypeList<Ts...> types) {
  (kernels->push_back({"copy", {kDTypeOf<Ts>, kDTypeOf<Ts>, 0}, 2, &GuardedKernel<&Copy<Ts>>}), ...);
  (AddCastsFrom<Ts>(kernels, types), ...);
  (kernels->push_back({"fill", {kDTypeOf<Ts>, 0, 0}, 1, &GuardedKernel<&Fill<Ts>>}), ...);
}

}  // namespace

void AppendCopyCastKernels(std::vector<HostKernel>* kernels) { AddAll(kernels, AllTypes{}); }

}  // namespace oar::host
