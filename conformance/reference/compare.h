// Comparing a kernel's output against the reference, and the tolerances it is compared with.
//
// The rule, per element (see conformance/tolerances.json):
//   ref NaN         -> got must be NaN;
//   ref ±inf        -> got must be the same infinity;
//   ref finite      -> got must be finite and |got - ref| <= atol + rtol · |ref|.
// A mismatch in NaN/inf position or sign is counted separately from a numeric excess.
#ifndef OAR_CONFORMANCE_REFERENCE_COMPARE_H_
#define OAR_CONFORMANCE_REFERENCE_COMPARE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "conformance/reference/array.h"
#include "conformance/reference/dtype.h"

namespace oar::reference {

struct CompareResult {
  bool ok = true;
  bool shape_mismatch = false;
  /// Largest |got - ref| over elements where both are finite.
  double max_abs_error = 0.0;
  /// Largest |got - ref| / |ref| over elements where both are finite and ref != 0.
  double max_rel_error = 0.0;
  /// Flat index of the first failing element (either kind), -1 when none.
  int64_t first_failure = -1;
  /// Elements failing the numeric bound (both finite).
  int64_t numeric_failures = 0;
  /// Elements where NaN/inf position or sign differ (ref non-finite, or got non-finite where ref is not).
  int64_t nonfinite_mismatches = 0;
  /// One paragraph for a test log: empty when ok; else the first failure with its multi-index, got,
  /// expected and bound, the failure counts and the maximum errors.
  std::string message;
};

/// Compares `got` with `ref` element by element (see the rule above). Different shapes give ok = false
/// with shape_mismatch set (a kernel bug, not misuse). Throws INVALID_ARGUMENT for a malformed Array or a
/// negative/NaN tolerance.
CompareResult Compare(const Array& got, const Array& ref, double atol, double rtol);

/// One (op class, dtype) entry of tolerances.json.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  /// The class accumulates K terms and lists this dtype under "scale_with_sqrt_k".
  bool scales_with_k = false;

  /// The tolerance for an accumulation length K: atol and rtol times max(1, sqrt(K)) when
  /// scales_with_k, else unchanged.
  Tolerance ForLength(int64_t k) const;
};

/// Compare with a Tolerance.
inline CompareResult Compare(const Array& got, const Array& ref, const Tolerance& tol) {
  return Compare(got, ref, tol.atol, tol.rtol);
}

/// Reads tolerances.json (version 1): classes.<op_class>.<dtype name> = {"atol": .., "rtol": ..}, and
/// whether the class's "scale_with_sqrt_k" lists the dtype. `dtype` is a DTypeName ("float32").
/// Throws NOT_FOUND for a missing file, class or dtype; DATA_LOSS for malformed JSON or an unsupported
/// version.
Tolerance LoadTolerance(const std::string& path, std::string_view op_class, std::string_view dtype);
Tolerance LoadTolerance(const std::string& path, std::string_view op_class, RefDType dtype);

/// The op class whose "ops" list in tolerances.json names `op` ("matmul" -> "matmul", "add" ->
/// "elementwise_exact"). Throws NOT_FOUND when no class lists it; errors of the file as LoadTolerance.
std::string ToleranceClassOf(const std::string& path, std::string_view op);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_COMPARE_H_
