// Running one op on the device under test and judging it against the fp64 reference: inputs built
// as exact values of their dtype, outputs allocated inside guard regions, the plugin's declared
// support checked both ways, and the tolerance of the op's class from conformance/tolerances.json.
// Shared by the L1 (forward) and L2 (backward kernel) op matrices.
#ifndef OAR_CONFORMANCE_RUNNER_OP_CHECK_H_
#define OAR_CONFORMANCE_RUNNER_OP_CHECK_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "conformance/reference/reference.h"
#include "conformance/runner/case.h"
#include "conformance/runner/determinism.h"
#include "core/ops/ops.h"

namespace oar::conformance {

namespace ref = oar::reference;

ref::RefDType ToRef(DType t);
/// A cpu tensor's values as a reference Array (bool as 0/1, integers by value).
ref::Array ToArray(const Tensor& t);

/// Input values for one case, drawn from the case's seed.
class InputMaker {
 public:
  explicit InputMaker(uint64_t seed) : gen_(seed) {}
  /// A contiguous tensor of `dtype` on `device` holding random values: floats uniform in [lo, hi),
  /// signed integers in [-5, 5], uint8 in [0, 10], bool 0/1. `array` receives exactly the values the
  /// kernel sees (already values of the dtype).
  Tensor Random(const std::vector<int64_t>& shape, DType dtype, Device device, ref::Array* array, double lo = -2,
                double hi = 2);
  /// Given values (must be values of `dtype` after rounding; NaN/inf for floats only).
  Tensor Values(const ref::Array& values, DType dtype, Device device, ref::Array* array);
  Generator& gen() { return gen_; }

 private:
  Generator gen_;
};

/// One expected output: the reference result and how to compare with it.
struct Expected {
  ref::Array value;
  std::string op_class;  // tolerances.json class; "" = the op's own class
  int64_t k = 1;         // accumulation length for classes that scale with sqrt(K)
  /// `value` is already a value of the output dtype (a reference cast): compare it bit-exactly as it is.
  /// Integer and bool outputs of other ops compare exactly with RoundTo(value, dtype) (wrap-around).
  bool exact = false;
  /// tolerances.json's atol assumes inputs of magnitude about 1 and is scaled by the inputs' magnitude
  /// for other data (e.g. logits around 1000): that magnitude.
  double input_scale = 1;
};

/// What a case runs on the device: the op's outputs (already synchronised is not required).
using DeviceFn = std::function<std::vector<Tensor>()>;

/// Runs `fn` on the device with guarded outputs and judges the outputs against `want`:
///  * an out-of-bounds write into a guard region is FAILED naming op, dtype and shape;
///  * an error when the plugin claims `key` is FAILED; when it does not claim it, a clean
///    UNIMPLEMENTED/INVALID_ARGUMENT is SKIPPED and anything else is FAILED;
///  * a success the plugin does not claim is PASSED with a warning in the message;
///  * a kernel other than the op under test that the plugin does not claim makes the case SKIPPED
///    naming that prerequisite;
///  * the call is made a second time: results that differ bitwise FAIL where every kernel the case
///    launched is declared reproducible (DeterminismDeclarations: the device's kDeterministicAttribute
///    or a per-kernel list; a note otherwise), and growth of the device's bytes in use over
///    the second call (host caches emptied) is a leak, FAILED naming the op;
///  * float16/bfloat16 results whose mean rounding error is biased (MeasureRoundingBias) FAIL.
CaseResult CheckOp(CaseContext& c, const std::string& op, const std::vector<DType>& key, const std::string& shape,
                   const DeviceFn& fn, const std::function<std::vector<Expected>()>& want);


/// Rounding bias of a 16-bit output (float16, bfloat16) against the exact results, in ulps of each
/// result, over the elements whose exact result is not representable (others have no rounding to judge).
struct RoundingBias {
  int64_t samples = 0;
  double mean_signed_ulps = 0;   // mean of (got - exact) / ulp: ~0 for round-to-nearest, -0.5 rounding down
  double mean_outward_ulps = 0;  // the same, signed away from zero: -0.5 for truncation toward zero
};
RoundingBias MeasureRoundingBias(const ref::Array& got, const ref::Array& want, DType dtype);
/// The bias check applies from this many inexact results; a mean beyond kMaxBiasUlps fails the case.
inline constexpr int64_t kMinBiasSamples = 256;
inline constexpr double kMaxBiasUlps = 0.2;

}  // namespace oar::conformance

#endif  // OAR_CONFORMANCE_RUNNER_OP_CHECK_H_
