// Elementwise host kernels: add, sub, mul, div, maximum, minimum, neg, exp, relu.
//
// Inputs arrive already broadcast to the output's shape (stride 0 on broadcast dimensions), so after
// collapsing, the common cases are one contiguous run, or a run against a broadcast scalar; both get a
// vectorisable loop. 16-bit floats are computed in float; integer add/sub/mul/neg wrap around (they are
// computed in the unsigned type, where overflow is defined).
#include <cmath>
#include <type_traits>
#include <vector>

#include "plugins/common/kernel_util.h"
#include "plugins/common/strided.h"

namespace oar::host {
namespace {

template <typename C, typename F>
C Wrapping(C a, C b, F f) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(f(static_cast<U>(a), static_cast<U>(b)));
}

struct AddOp {
  static constexpr const char* kName = "add";
  template <typename C>
  static C Apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return Wrapping(a, b, [](auto x, auto y) { return x + y; });
    } else {
      return a + b;
    }
  }
};

struct SubOp {
  static constexpr const char* kName = "sub";
  template <typename C>
  static C Apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return Wrapping(a, b, [](auto x, auto y) { return x - y; });
    } else {
      return a - b;
    }
  }
};

struct MulOp {
  static constexpr const char* kName = "mul";
  template <typename C>
  static C Apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return Wrapping(a, b, [](auto x, auto y) { return x * y; });
    } else {
      return a * b;
    }
  }
};

struct DivOp {
  static constexpr const char* kName = "div";
  template <typename C>
  static C Apply(C a, C b) {
    return a / b;
  }
};

// `x != x` rather than std::isnan: it vectorises to a compare and blend.
template <typename C>
bool IsNan(C x) {
  if constexpr (std::is_floating_point_v<C>) {
    return x != x;
  } else {
    return false;
  }
}

// maximum/minimum propagate NaN from either side, as numpy and torch do.
struct MaximumOp {
  static constexpr const char* kName = "maximum";
  template <typename C>
  static C Apply(C a, C b) {
    return (a > b || IsNan(a)) ? a : b;
  }
};

struct MinimumOp {
  static constexpr const char* kName = "minimum";
  template <typename C>
  static C Apply(C a, C b) {
    return (a < b || IsNan(a)) ? a : b;
  }
};

struct NegOp {
  static constexpr const char* kName = "neg";
  template <typename C>
  static C Apply(C x) {
    if constexpr (std::is_integral_v<C>) {
      return Wrapping(C(0), x, [](auto z, auto y) { return z - y; });
    } else {
      return -x;
    }
  }
};

struct ExpOp {
  static constexpr const char* kName = "exp";
  template <typename C>
  static C Apply(C x) {
    return std::exp(x);
  }
};

// relu keeps NaN (x < 0 is false for NaN), as torch does.
struct ReluOp {
  static constexpr const char* kName = "relu";
  template <typename C>
  static C Apply(C x) {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < C(0) ? C(0) : x;
    }
  }
};

template <typename Op, typename T>
void Binary(const KernelCall& call) {
  using C = ComputeT<T>;
  constexpr int64_t kSize = sizeof(T);
  CheckArity(call, 2, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef a = call.input(0);
  const TensorRef b = call.input(1);
  const TensorRef out = call.output(0);
  CheckSameShape(call, a, out, "input 0");
  CheckSameShape(call, b, out, "input 1");
  const auto layout = Collapse<3>(out.shape(), {out.strides(), a.strides(), b.strides()}, {kSize, kSize, kSize});
  ForEach<3>(layout, {out.data<char>(), a.data<char>(), b.data<char>()},
             [](const std::array<char*, 3>& p, int64_t n, const std::array<int64_t, 3>& s) {
               T* o = reinterpret_cast<T*>(p[0]);
               const T* x = reinterpret_cast<const T*>(p[1]);
               const T* y = reinterpret_cast<const T*>(p[2]);
               if (s[0] == kSize && s[1] == kSize && s[2] == kSize) {
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = T(Op::Apply(C(x[i]), C(y[i])));
               } else if (s[0] == kSize && s[1] == 0 && s[2] == kSize) {
                 const C xv = C(x[0]);
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = T(Op::Apply(xv, C(y[i])));
               } else if (s[0] == kSize && s[1] == kSize && s[2] == 0) {
                 const C yv = C(y[0]);
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = T(Op::Apply(C(x[i]), yv));
               } else {
                 const int64_t so = s[0] / kSize, sx = s[1] / kSize, sy = s[2] / kSize;
                 for (int64_t i = 0; i < n; ++i) o[i * so] = T(Op::Apply(C(x[i * sx]), C(y[i * sy])));
               }
             });
}

template <typename Op, typename T>
void Unary(const KernelCall& call) {
  using C = ComputeT<T>;
  constexpr int64_t kSize = sizeof(T);
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef out = call.output(0);
  CheckSameShape(call, x, out, "input 0");
  const auto layout = Collapse<2>(out.shape(), {out.strides(), x.strides()}, {kSize, kSize});
  ForEach<2>(layout, {out.data<char>(), x.data<char>()},
             [](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
               T* o = reinterpret_cast<T*>(p[0]);
               const T* v = reinterpret_cast<const T*>(p[1]);
               if (s[0] == kSize && s[1] == kSize) {
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = T(Op::Apply(C(v[i])));
               } else {
                 const int64_t so = s[0] / kSize, sv = s[1] / kSize;
                 for (int64_t i = 0; i < n; ++i) o[i * so] = T(Op::Apply(C(v[i * sv])));
               }
             });
}

template <typename Op, typename... Ts>
void AddBinary(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (kernels->push_back({Op::kName, {kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>}, 3, &GuardedKernel<&Binary<Op, Ts>>}),
   ...);
}

template <typename Op, typename... Ts>
void AddUnary(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (kernels->push_back({Op::kName, {kDTypeOf<Ts>, kDTypeOf<Ts>, 0}, 2, &GuardedKernel<&Unary<Op, Ts>>}), ...);
}

using ArithmeticTypes = TypeList<float, double, Half, BFloat16, int8_t, uint8_t, int32_t, int64_t>;

}  // namespace

void AppendElementwiseKernels(std::vector<HostKernel>* kernels) {
  AddBinary<AddOp>(kernels, ArithmeticTypes{});
  AddBinary<SubOp>(kernels, ArithmeticTypes{});
  AddBinary<MulOp>(kernels, ArithmeticTypes{});
  AddBinary<DivOp>(kernels, FloatTypes{});
  AddBinary<MaximumOp>(kernels, ArithmeticTypes{});
  AddBinary<MinimumOp>(kernels, ArithmeticTypes{});
  AddUnary<NegOp>(kernels, TypeList<float, double, Half, BFloat16, int8_t, int32_t, int64_t>{});
  AddUnary<ExpOp>(kernels, FloatTypes{});
  AddUnary<ReluOp>(kernels, TypeList<float, double, Half, BFloat16, int8_t, uint8_t, int32_t, int64_t>{});
}

}  // namespace oar::host
