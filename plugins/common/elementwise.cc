// Elementwise host kernels: add, sub, mul, div, maximum, minimum, neg, exp, relu, relu_grad.
//
// Inputs arrive already broadcast to the output's shape (stride 0 on broadcast dimensions), so after
// collapsing, the common cases are one contiguous run, or a run against a broadcast scalar; both get a
// vectorisable loop. 16-bit floats are computed in float; integer add/sub/mul/neg wrap around (they are
// computed in the unsigned type, where overflow is defined).
#include "plugins/common/elementwise.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "oar/plugin/ops.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/vec_exp.h"

namespace oar::host {
namespace {

template <typename C, typename F>
C Wrapping(C a, C b, F f) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(f(static_cast<U>(a), static_cast<U>(b)));
}

struct AddOp {
  static constexpr const char* kName = OAR_OP_ADD;
  static constexpr VecBinary kVec = VecBinary::kAdd;  // float32 runs: BinaryRun (vec_lanes.h)
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
  static constexpr const char* kName = OAR_OP_SUB;
  static constexpr VecBinary kVec = VecBinary::kSub;  // float32 runs: BinaryRun (vec_lanes.h)
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
  static constexpr const char* kName = OAR_OP_MUL;
  static constexpr VecBinary kVec = VecBinary::kMul;  // float32 runs: BinaryRun (vec_lanes.h)
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
  static constexpr const char* kName = OAR_OP_DIV;
  static constexpr VecBinary kVec = VecBinary::kDiv;  // float32 runs: BinaryRun (vec_lanes.h)
  template <typename C>
  static C Apply(C a, C b) {
    return a / b;
  }
};

// maximum/minimum propagate NaN from either side, as numpy and torch do.
struct MaximumOp {
  static constexpr const char* kName = OAR_OP_MAXIMUM;
  template <typename C>
  static C Apply(C a, C b) {
    return (a > b || IsNan(a)) ? a : b;
  }
};

struct MinimumOp {
  static constexpr const char* kName = OAR_OP_MINIMUM;
  template <typename C>
  static C Apply(C a, C b) {
    return (a < b || IsNan(a)) ? a : b;
  }
};

struct NegOp {
  static constexpr const char* kName = OAR_OP_NEG;
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
  static constexpr const char* kName = OAR_OP_EXP;
  template <typename C>
  static C Apply(C x) {
    return std::exp(x);
  }
  template <typename T>
    requires std::is_same_v<T, float>
  static void ApplyN(const T* x, T* y, int64_t n) {
    ExpN(x, y, n);
  }
};

// relu keeps NaN (x < 0 is false for NaN), as torch does.
struct ReluOp {
  static constexpr const char* kName = OAR_OP_RELU;
  template <typename C>
  static C Apply(C x) {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < C(0) ? C(0) : x;
    }
  }
  /// Dense float32 runs: the same select with the CPU's widest vectors (vec_lanes.h).
  template <typename T>
    requires std::is_same_v<T, float>
  static void ApplyN(const T* x, T* y, int64_t n) {
    if (n >= 32) {
      ReluRun(x, y, n);
      return;
    }
    for (int64_t i = 0; i < n; ++i) y[i] = Apply(x[i]);
  }
};

// relu's gradient: g * (x > 0 ? 1 : 0), the product that relu's composed VJP (mul of g and cast(gt(x, 0)))
// rounded: a NaN x gives g * 0, a negative g where x <= 0 gives -0, an infinite or NaN g where x <= 0 gives NaN.
// Inputs: a = grad, b = x (same shape; strided views as any binary kernel).
struct ReluGradOp {
  static constexpr const char* kName = OAR_OP_RELU_GRAD;
  static constexpr VecBinary kVec = VecBinary::kReluGrad;  // float32 runs: BinaryRun (vec_lanes.h)
  template <typename C>
  static C Apply(C g, C x) {
    return g * (x > C(0) ? C(1) : C(0));
  }
};

}  // namespace

void AppendElementwiseKernels(std::vector<HostKernel>* kernels) {
  AddMapBinary<AddOp>(kernels, NumericTypes{});
  AddMapBinary<SubOp>(kernels, NumericTypes{});
  AddMapBinary<MulOp>(kernels, NumericTypes{});
  AddMapBinary<DivOp>(kernels, FloatTypes{});
  AddMapBinary<MaximumOp>(kernels, NumericTypes{});
  AddMapBinary<MinimumOp>(kernels, NumericTypes{});
  AddMapUnary<NegOp>(kernels, SignedTypes{});
  AddMapUnary<ExpOp>(kernels, FloatTypes{});
  AddMapUnary<ReluOp>(kernels, NumericTypes{});
  AddMapBinary<ReluGradOp>(kernels, FloatTypes{});
}

}  // namespace oar::host
