// Elementwise loops shared by the elementwise kernel sources: one functor applied to every element of
// one or two inputs (already broadcast to the output's shape), writing a contiguous output.
//
// `Op::Apply(C...)` receives the inputs in their compute type (ComputeT: float for the 16-bit floats)
// and returns a value convertible to the output type. After collapsing, the common cases (one dense
// run, or a run against a broadcast scalar) get unit-stride loops the compiler can vectorise. A unary
// Op may also offer `ApplyN(const T* x, T* y, int64_t n)` for a dense run of one dtype T (y may be x),
// for what the compiler cannot vectorise from Apply (exp: vec_exp.h); Apply still does the strided rest.
#ifndef OAR_PLUGINS_COMMON_ELEMENTWISE_H_
#define OAR_PLUGINS_COMMON_ELEMENTWISE_H_

#include <algorithm>
#include <type_traits>

#include "plugins/common/kernel_util.h"
#include "plugins/common/stream_store.h"
#include "plugins/common/strided.h"
#include "plugins/common/vec_lanes.h"

namespace oar::host {

/// `x != x` rather than std::isnan: it vectorises to a compare and blend (and is false for integers).
template <typename C>
bool IsNan(C x) {
  if constexpr (std::is_floating_point_v<C>) {
    return x != x;
  } else {
    return false;
  }
}

/// Whether an output of `numel` elements of `elem_size` bytes is written with non-temporal stores
/// (stream_store.h): only when it is larger than the last-level cache.
inline bool StreamOutput(int64_t numel, int64_t elem_size) {
  const int64_t threshold = StreamingThresholdBytes();
  return threshold > 0 && numel * elem_size > threshold;
}

/// The 16-byte vector of T, for the element types StreamRun streams (GCC drops vector_size from an alias
/// of a dependent type, hence one specialisation each).
template <typename T>
struct Vec16 {
  static constexpr bool kHas = false;
};
template <>
struct Vec16<float> {
  static constexpr bool kHas = true;
  using V = float __attribute__((vector_size(16)));
};
template <>
struct Vec16<double> {
  static constexpr bool kHas = true;
  using V = double __attribute__((vector_size(16)));
};
template <>
struct Vec16<int32_t> {
  static constexpr bool kHas = true;
  using V = int32_t __attribute__((vector_size(16)));
};
template <>
struct Vec16<int64_t> {
  static constexpr bool kHas = true;
  using V = int64_t __attribute__((vector_size(16)));
};

/// o[i] = f(i) for i in [0, n): plain stores up to the first 16-byte boundary, then 16 bytes at a time
/// built in a register (GCC turns the four or two f calls into one vector operation) and written with a
/// non-temporal store; the values are those of the plain loop. For float, double, int32 and int64
/// outputs; others take the plain loop.
template <typename Out, typename F>
void StreamRun(Out* o, int64_t n, F&& f) {
  int64_t i = 0;
#if defined(__SSE2__)
  if constexpr (Vec16<Out>::kHas) {
    using V = typename Vec16<Out>::V;
    constexpr int64_t kPer = 16 / sizeof(Out);
    for (; i < n && reinterpret_cast<uintptr_t>(o + i) % 16 != 0; ++i) o[i] = f(i);
    for (; i + 4 * kPer <= n;) {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q, i += kPer) {
        V v;
        if constexpr (kPer == 4) {
          v = V{f(i), f(i + 1), f(i + 2), f(i + 3)};
        } else {
          v = V{f(i), f(i + 1)};
        }
        _mm_stream_si128(reinterpret_cast<__m128i*>(o + i), reinterpret_cast<__m128i>(v));
      }
    }
  }
#endif
  for (; i < n; ++i) o[i] = f(i);
  StreamFence();  // before the parallel region's barrier hands the output on
}

/// out[i] = Out(Op::Apply(C(x[i]))) with input dtype In and output dtype Out; key {In, Out}.
template <typename Op, typename In, typename Out>
void MapUnary(const KernelCall& call) {
  using C = ComputeT<In>;
  constexpr int64_t kIn = sizeof(In), kOut = sizeof(Out);
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<In>, kDTypeOf<Out>});
  const TensorRef x = call.input(0);
  const TensorRef out = call.output(0);
  CheckSameShape(call, x, out, "input 0");
  if (const int64_t n = out.numel(); n < kParallelThreshold && out.is_contiguous() && x.is_contiguous()) {
    // Small and dense (most eager calls): the loop ForEach would reach, without collapsing the layout.
    Out* o = out.data<Out>();
    const In* v = x.data<const In>();
    if constexpr (std::is_same_v<In, Out> && requires { Op::ApplyN(v, o, n); }) {
      Op::ApplyN(v, o, n);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = Out(Op::Apply(C(v[i])));
    }
    return;
  }
  const auto layout = Collapse<2>(out.shape(), {out.strides(), x.strides()}, {kOut, kIn});
  ForEach<2>(layout, {out.data<char>(), x.data<char>()},
             [](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
               Out* o = reinterpret_cast<Out*>(p[0]);
               const In* v = reinterpret_cast<const In*>(p[1]);
               if (s[0] == kOut && s[1] == kIn) {
                 if constexpr (std::is_same_v<In, Out> && requires { Op::ApplyN(v, o, n); }) {
                   Op::ApplyN(v, o, n);
                   return;
                 }
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = Out(Op::Apply(C(v[i])));
               } else {
                 const int64_t so = s[0] / kOut, sv = s[1] / kIn;
                 for (int64_t i = 0; i < n; ++i) o[i * so] = Out(Op::Apply(C(v[i * sv])));
               }
             });
}

/// out[i] = Out(Op::Apply(C(a[i]), C(b[i]))) with inputs of dtype In; key {In, In, Out}.
/// Whether MapBinary<Op, In, Out> runs its unit-stride loops through BinaryRun (vec_lanes.h): float32
/// ops that name their VecBinary as `kVec` (add, sub, mul, div).
template <typename Op, typename In, typename Out>
inline constexpr bool kVecBinary = std::is_same_v<In, float> && std::is_same_v<Out, float> &&
                                   requires { Op::kVec; };

template <typename Op, typename In, typename Out>
void MapBinary(const KernelCall& call) {
  using C = ComputeT<In>;
  constexpr int64_t kIn = sizeof(In), kOut = sizeof(Out);
  CheckArity(call, 2, 1);
  CheckDTypes(call, {kDTypeOf<In>, kDTypeOf<In>, kDTypeOf<Out>});
  const TensorRef a = call.input(0);
  const TensorRef b = call.input(1);
  const TensorRef out = call.output(0);
  CheckSameShape(call, a, out, "input 0");
  CheckSameShape(call, b, out, "input 1");
  if (const int64_t n = out.numel();
      n < kParallelThreshold && out.is_contiguous() && a.is_contiguous() && b.is_contiguous()) {
    // Small and dense (most eager calls): the loop ForEach would reach, without collapsing the layout.
    Out* o = out.data<Out>();
    const In* x = a.data<const In>();
    const In* y = b.data<const In>();
    if constexpr (kVecBinary<Op, In, Out>) {
      if (n >= 32) {  // below, the call through the ISA table costs more than it saves
        BinaryRun(Op::kVec, x, 1, y, 1, o, n);
        return;
      }
    }
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = Out(Op::Apply(C(x[i]), C(y[i])));
    return;
  }
  const auto layout = Collapse<3>(out.shape(), {out.strides(), a.strides(), b.strides()}, {kOut, kIn, kIn});
  const bool stream = StreamOutput(out.numel(), kOut);
  ForEach<3>(layout, {out.data<char>(), a.data<char>(), b.data<char>()},
             [stream](const std::array<char*, 3>& p, int64_t n, const std::array<int64_t, 3>& s) {
               Out* o = reinterpret_cast<Out*>(p[0]);
               const In* x = reinterpret_cast<const In*>(p[1]);
               const In* y = reinterpret_cast<const In*>(p[2]);
               if (s[0] == kOut && s[1] == kIn && s[2] == kIn) {
                 if (stream) {
                   StreamRun(o, n, [x, y](int64_t i) { return Out(Op::Apply(C(x[i]), C(y[i]))); });
                   return;
                 }
                 if constexpr (kVecBinary<Op, In, Out>) {
                   BinaryRun(Op::kVec, x, 1, y, 1, o, n);
                   return;
                 }
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = Out(Op::Apply(C(x[i]), C(y[i])));
               } else if (s[0] == kOut && s[1] == 0 && s[2] == kIn) {
                 if constexpr (kVecBinary<Op, In, Out>) {
                   BinaryRun(Op::kVec, x, 0, y, 1, o, n);
                   return;
                 }
                 const C xv = C(x[0]);
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = Out(Op::Apply(xv, C(y[i])));
               } else if (s[0] == kOut && s[1] == kIn && s[2] == 0) {
                 if constexpr (kVecBinary<Op, In, Out>) {
                   BinaryRun(Op::kVec, x, 1, y, 0, o, n);
                   return;
                 }
                 const C yv = C(y[0]);
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = Out(Op::Apply(C(x[i]), yv));
               } else {
                 const int64_t so = s[0] / kOut, sx = s[1] / kIn, sy = s[2] / kIn;
                 for (int64_t i = 0; i < n; ++i) o[i * so] = Out(Op::Apply(C(x[i * sx]), C(y[i * sy])));
               }
             });
}

/// Register MapUnary<Op, T, Out> for every T of the list; Out = T when `Out` is void.
template <typename Op, typename Out = void, typename... Ts>
void AddMapUnary(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, Op::kName, {kDTypeOf<Ts>, kDTypeOf<std::conditional_t<std::is_void_v<Out>, Ts, Out>>},
             &GuardedKernel<&MapUnary<Op, Ts, std::conditional_t<std::is_void_v<Out>, Ts, Out>>>),
   ...);
}

/// Register MapBinary<Op, T, Out> for every T of the list; Out = T when `Out` is void.
template <typename Op, typename Out = void, typename... Ts>
void AddMapBinary(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, Op::kName,
             {kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<std::conditional_t<std::is_void_v<Out>, Ts, Out>>},
             &GuardedKernel<&MapBinary<Op, Ts, std::conditional_t<std::is_void_v<Out>, Ts, Out>>>),
   ...);
}

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_ELEMENTWISE_H_
