// Conformance cases: a stable hierarchical id, the level and op family it belongs to, and a function that
// checks one behaviour of the device under test and says exactly what was expected and what was got.
#ifndef OAR_CONFORMANCE_RUNNER_CASE_H_
#define OAR_CONFORMANCE_RUNNER_CASE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/error.h"
#include "core/runtime/runtime.h"
#include "core/tensor/tensor.h"

namespace oar::conformance {

enum class Status { kPassed, kFailed, kSkipped, kNotSelected, kCrashed, kTimeout };
std::string_view StatusName(Status s);  // "PASSED", ...
/// Crashes and timeouts count as failures in every total and verdict.
inline bool IsFailure(Status s) { return s == Status::kFailed || s == Status::kCrashed || s == Status::kTimeout; }

/// What one case found.
struct CaseResult {
  Status status = Status::kPassed;
  std::string message;  // for FAILED/SKIPPED: what was expected, what was got, where
  std::string dtype;    // when the case is about one dtype
  std::string shape;    // when the case is about one shape
  bool numeric = false;  // compared against the reference: tolerance is {atol, rtol} in results.jsonl
  double atol = 0;
  double tolerance = 0;  // rtol for numeric cases
  double max_abs_error = 0;
  double max_rel_error = 0;
  double seconds = 0;
  /// Ops that ran on cpu instead of the device (model cases, where the counted fallback is allowed).
  std::map<std::string, uint64_t> fallbacks;
  /// What --replay prints besides the message: every kernel launched with its operands' dtypes, shapes,
  /// strides and offsets, and the first mismatching elements (not written to results.jsonl).
  std::string detail;
};

/// Thrown by checks inside a case: the case FAILS with this message.
struct CheckFailure {
  std::string message;
};
/// Thrown to SKIP a case with a reason (e.g. an optional slot the plugin does not have).
struct SkipCase {
  std::string reason;
};

/// What a case runs against.
struct CaseContext {
  Device device;
  runtime::DeviceContext& ctx;
  uint64_t seed;
};

struct Case {
  std::string id;      // "L0.copy.h2d_d2h.bytes=4096": stable across runs and versions
  int level = 0;       // 0..3
  std::string family;  // "memory", "copy", "stream", ...; ops use the op name
  std::function<CaseResult(CaseContext&)> run;
};

/// Every case of the suite, in a stable order.
const std::vector<Case>& AllCases();

// Case builders per level (one file each).
void AddLevel0Cases(std::vector<Case>& cases);
void AddLevel1Cases(std::vector<Case>& cases);
void AddLevel2Cases(std::vector<Case>& cases);
void AddLevel3Cases(std::vector<Case>& cases);

/// The tolerances.json every run uses, located from the runner's own path (op_check.cc): neither a
/// plugin nor an option or environment variable can substitute another.
const std::string& TolerancesPath();

/// True when the plugin under test registers a kernel for `op` with exactly these dtypes (inputs then
/// outputs), in any format.
bool Claims(CaseContext& c, const std::string& op, const std::vector<DType>& key);

/// "matmul(float32 [4, 6], float32 [6, 5]) -> (float32 [4, 5])".
std::string LaunchDescription(const std::string& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs);

/// Helpers for case bodies.
[[noreturn]] void Fail(std::string message);
void Expect(bool condition, const std::string& message);

}  // namespace oar::conformance

#endif  // OAR_CONFORMANCE_RUNNER_CASE_H_
