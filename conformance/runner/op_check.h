// Running one op on the device under test and judging it against the fp64 reference: inputs built
// as exact values of their dtype, outputs allocated inside guard regions, the plugin's declared
// support checked both ways, and the tolerance of the op's class from conformance/tolerances.json.
// Shared by the L1 (forward) and L2 (backward kernel) op matrices.
#ifndef OAR_CONFORMANCE_RUNNER_OP_CHECK_H_
#define OAR_CONFORMANCE_RUNNER_OP_CHECK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "conformance/reference/reference.h"
#include "conformance/runner/case.h"
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
///  * a success the plugin does not claim is PASSED with a warning in the message.
CaseResult CheckOp(CaseContext& c, const std::string& op, const std::vector<DType>& key, const std::string& shape,
                   const DeviceFn& fn, const std::function<std::vector<Expected>()>& want);

/// True when the plugin under test registers a kernel for `op` with exactly these dtypes (inputs then
/// outputs), in any format.
bool Claims(CaseContext& c, const std::string& op, const std::vector<DType>& key);

}  // namespace oar::conformance

#endif  // OAR_CONFORMANCE_RUNNER_OP_CHECK_H_
