// Comparison, logical and selection host kernels: eq, ne, lt, le, gt, ge, logical_and, logical_or
// and where (docs/ops.md).
//
// Comparisons run in the compute type (16-bit floats exactly through float) and write BOOL; every
// comparison with NaN is false except `ne`, which is true. `where` only moves bytes, so it copies the
// chosen element's bits (one instantiation per element size serves every dtype).
#include <cstdint>
#include <vector>

#include "plugins/common/elementwise.h"
#include "oar/plugin/ops.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/strided.h"

namespace oar::host {
namespace {

struct EqOp {
  static constexpr const char* kName = OAR_OP_EQ;
  template <typename C>
  static bool Apply(C a, C b) {
    return a == b;
  }
};

struct NeOp {
  static constexpr const char* kName = OAR_OP_NE;
  template <typename C>
  static bool Apply(C a, C b) {
    return a != b;
  }
};

struct LtOp {
  static constexpr const char* kName = OAR_OP_LT;
  template <typename C>
  static bool Apply(C a, C b) {
    return a < b;
  }
};

struct LeOp {
  static constexpr const char* kName = OAR_OP_LE;
  template <typename C>
  static bool Apply(C a, C b) {
    return a <= b;
  }
};

struct GtOp {
  static constexpr const char* kName = OAR_OP_GT;
  template <typename C>
  static bool Apply(C a, C b) {
    return a > b;
  }
};

struct GeOp {
  static constexpr const char* kName = OAR_OP_GE;
  template <typename C>
  static bool Apply(C a, C b) {
    return a >= b;
  }
};

// BOOL elements are 0 or 1, so & and | are the logical operations (and vectorise without branches).
struct LogicalAndOp {
  static constexpr const char* kName = OAR_OP_LOGICAL_AND;
  static bool Apply(bool a, bool b) { return a & b; }
};

struct LogicalOrOp {
  static constexpr const char* kName = OAR_OP_LOGICAL_OR;
  static bool Apply(bool a, bool b) { return a | b; }
};

/// out = cond ? a : b, with cond BOOL and a, b, out of dtype T (moved as bits).
template <typename T>
void Where(const KernelCall& call) {
  using U = BitsOf<sizeof(T)>;
  constexpr int64_t kSize = sizeof(T);
  CheckArity(call, 3, 1);
  CheckDTypes(call, {OAR_DTYPE_BOOL, kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef cond = call.input(0);
  const TensorRef a = call.input(1);
  const TensorRef b = call.input(2);
  const TensorRef out = call.output(0);
  CheckSameShape(call, cond, out, "input 0 (cond)");
  CheckSameShape(call, a, out, "input 1 (a)");
  CheckSameShape(call, b, out, "input 2 (b)");
  const auto layout =
      Collapse<4>(out.shape(), {out.strides(), cond.strides(), a.strides(), b.strides()}, {kSize, 1, kSize, kSize});
  ForEach<4>(layout, {out.data<char>(), cond.data<char>(), a.data<char>(), b.data<char>()},
             [](const std::array<char*, 4>& p, int64_t n, const std::array<int64_t, 4>& s) {
               U* o = reinterpret_cast<U*>(p[0]);
               const bool* c = reinterpret_cast<const bool*>(p[1]);
               const U* x = reinterpret_cast<const U*>(p[2]);
               const U* y = reinterpret_cast<const U*>(p[3]);
               if (s[0] == kSize && s[1] == 1) {
                 if (s[2] == kSize && s[3] == kSize) {
#pragma omp simd
                   for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
                   return;
                 }
                 if (s[2] == kSize && s[3] == 0) {
                   const U yv = y[0];
#pragma omp simd
                   for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : yv;
                   return;
                 }
                 if (s[2] == 0 && s[3] == kSize) {
                   const U xv = x[0];
#pragma omp simd
                   for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? xv : y[i];
                   return;
                 }
               }
               const int64_t so = s[0] / kSize, sc = s[1], sx = s[2] / kSize, sy = s[3] / kSize;
               for (int64_t i = 0; i < n; ++i) o[i * so] = c[i * sc] ? x[i * sx] : y[i * sy];
             });
}

template <typename... Ts>
void AddWhere(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, "where", {OAR_DTYPE_BOOL, kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>}, &GuardedKernel<&Where<Ts>>),
   ...);
}

}  // namespace

void AppendCompareLogicalKernels(std::vector<HostKernel>* kernels) {
  AddMapBinary<EqOp, bool>(kernels, AllTypes{});
  AddMapBinary<NeOp, bool>(kernels, AllTypes{});
  AddMapBinary<LtOp, bool>(kernels, NumericTypes{});
  AddMapBinary<LeOp, bool>(kernels, NumericTypes{});
  AddMapBinary<GtOp, bool>(kernels, NumericTypes{});
  AddMapBinary<GeOp, bool>(kernels, NumericTypes{});
  AddMapBinary<LogicalAndOp>(kernels, TypeList<bool>{});
  AddMapBinary<LogicalOrOp>(kernels, TypeList<bool>{});
  AddWhere(kernels, AllTypes{});
}

}  // namespace oar::host
