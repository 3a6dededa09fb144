// Elementwise math host kernels: abs, sign, log, log1p, expm1, sqrt, rsqrt, sin, cos, tanh, sigmoid, erf,
// reciprocal, isnan, isinf, logical_not and pow (docs/ops.md).
//
// Every op is a functor over the compute type (float for the 16-bit floats, rounded once per result)
// run by the shared loops of elementwise.h. Results are the C library's (IEEE special values
// included), except that dense float32 sigmoid takes its exponentials from ExpN (vec_exp.h, within 2 ulp)
// and dense float32 tanh is TanhN (vec_exp.h, within 4 ulp); sigmoid is written so that no intermediate overflows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "plugins/common/elementwise.h"
#include "oar/plugin/ops.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/vec_exp.h"
#include "plugins/common/vec_lanes.h"

namespace oar::host {
namespace {

// |x|; integer abs of the minimum value wraps to itself (computed in the unsigned type).
struct AbsOp {
  static constexpr const char* kName = OAR_OP_ABS;
  template <typename C>
  static C Apply(C x) {
    if constexpr (std::is_integral_v<C>) {
      using U = std::make_unsigned_t<C>;
      return x < C(0) ? static_cast<C>(static_cast<U>(U(0) - static_cast<U>(x))) : x;
    } else {
      return std::fabs(x);
    }
  }
};

// -1, 0 or 1; a floating zero keeps its sign and NaN stays NaN (both are returned as they are).
struct SignOp {
  static constexpr const char* kName = OAR_OP_SIGN;
  template <typename C>
  static C Apply(C x) {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>((x > C(0)) - (x < C(0)));
    } else {
      return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);
    }
  }
};

struct LogOp {
  static constexpr const char* kName = OAR_OP_LOG;
  template <typename C>
  static C Apply(C x) {
    return std::log(x);
  }
};

struct Log1pOp {
  static constexpr const char* kName = OAR_OP_LOG1P;
  template <typename C>
  static C Apply(C x) {
    return std::log1p(x);
  }
};

struct Expm1Op {
  static constexpr const char* kName = OAR_OP_EXPM1;
  template <typename C>
  static C Apply(C x) {
    return std::expm1(x);
  }
};

struct SqrtOp {
  static constexpr const char* kName = OAR_OP_SQRT;
  template <typename C>
  static C Apply(C x) {
    return std::sqrt(x);
  }
};

// 1 / sqrt(x): rsqrt(+0) = +inf, rsqrt(-0) = -inf, negative -> NaN.
struct RsqrtOp {
  static constexpr const char* kName = OAR_OP_RSQRT;
  template <typename C>
  static C Apply(C x) {
    return C(1) / std::sqrt(x);
  }
};

struct SinOp {
  static constexpr const char* kName = OAR_OP_SIN;
  template <typename C>
  static C Apply(C x) {
    return std::sin(x);
  }
};

struct CosOp {
  static constexpr const char* kName = OAR_OP_COS;
  template <typename C>
  static C Apply(C x) {
    return std::cos(x);
  }
};

struct TanhOp {
  static constexpr const char* kName = OAR_OP_TANH;
  template <typename C>
  static C Apply(C x) {
    return std::tanh(x);
  }
  // float32 at the CPU's vector width (glibc's tanhf is a scalar call, 8x libtorch's vectorised tanh).
  template <typename T>
    requires std::is_same_v<T, float>
  static void ApplyN(const T* x, T* y, int64_t n) {
    TanhN(x, y, n);
  }
};

// 1 / (1 + e^-x) through e = e^-|x| <= 1: r = 1 / (1 + e) is sigmoid(|x|) and e * r is sigmoid(-|x|),
// so nothing overflows for large |x| and small results keep their relative precision.
struct SigmoidOp {
  static constexpr const char* kName = OAR_OP_SIGMOID;
  template <typename C>
  static C Apply(C x) {
    const C e = std::exp(-std::fabs(x));
    const C r = C(1) / (C(1) + e);
    return x >= C(0) ? r : e * r;
  }
  // The same operations on the CPU's widest vectors, in one pass (vec_exp.h; y may be x).
  template <typename T>
    requires std::is_same_v<T, float>
  static void ApplyN(const T* x, T* y, int64_t n) {
    SigmoidN(x, y, n);
  }
};

struct ErfOp {
  static constexpr const char* kName = OAR_OP_ERF;
  template <typename C>
  static C Apply(C x) {
    return std::erf(x);
  }
};

struct ReciprocalOp {
  static constexpr const char* kName = OAR_OP_RECIPROCAL;
  template <typename C>
  static C Apply(C x) {
    return C(1) / x;
  }
};

struct IsNanOp {
  static constexpr const char* kName = OAR_OP_ISNAN;
  template <typename C>
  static bool Apply(C x) {
    return IsNan(x);
  }
};

struct IsInfOp {
  static constexpr const char* kName = OAR_OP_ISINF;
  template <typename C>
  static bool Apply(C x) {
    return std::fabs(x) == std::numeric_limits<C>::infinity();
  }
};

struct LogicalNotOp {
  static constexpr const char* kName = OAR_OP_LOGICAL_NOT;
  static bool Apply(bool x) { return !x; }
};

struct PowOp {
  static constexpr const char* kName = OAR_OP_POW;
  template <typename C>
  static C Apply(C a, C b) {
    return std::pow(a, b);
  }
};

}  // namespace

void AppendElementwiseMathKernels(std::vector<HostKernel>* kernels) {
  AddMapUnary<AbsOp>(kernels, SignedTypes{});
  AddMapUnary<SignOp>(kernels, SignedTypes{});
  AddMapUnary<LogOp>(kernels, FloatTypes{});
  AddMapUnary<Log1pOp>(kernels, FloatTypes{});
  AddMapUnary<Expm1Op>(kernels, FloatTypes{});
  AddMapUnary<SqrtOp>(kernels, FloatTypes{});
  AddMapUnary<RsqrtOp>(kernels, FloatTypes{});
  AddMapUnary<SinOp>(kernels, FloatTypes{});
  AddMapUnary<CosOp>(kernels, FloatTypes{});
  AddMapUnary<TanhOp>(kernels, FloatTypes{});
  AddMapUnary<SigmoidOp>(kernels, FloatTypes{});
  AddMapUnary<ErfOp>(kernels, FloatTypes{});
  AddMapUnary<ReciprocalOp>(kernels, FloatTypes{});
  AddMapUnary<IsNanOp, bool>(kernels, FloatTypes{});
  AddMapUnary<IsInfOp, bool>(kernels, FloatTypes{});
  AddMapUnary<LogicalNotOp>(kernels, TypeList<bool>{});
  AddMapBinary<PowOp>(kernels, FloatTypes{});
}

}  // namespace oar::host
