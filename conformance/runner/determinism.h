// What a plugin declares about the bitwise reproducibility of its kernels, read from its device
// attributes: the device-wide BOOL `deterministic`, and per kernel key the STRING lists
// `deterministic_kernels` and `nondeterministic_kernels` (docs/conformance.md, "Determinism"). The op
// cases require two runs of the same call to be bitwise equal exactly where every kernel they launched
// is declared reproducible.
#ifndef OAR_CONFORMANCE_RUNNER_DETERMINISM_H_
#define OAR_CONFORMANCE_RUNNER_DETERMINISM_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/runtime/runtime.h"
#include "core/tensor/dtype.h"

namespace oar::conformance {

/// The BOOL device attribute by which a plugin declares every kernel bitwise reproducible (identical
/// inputs, attributes and shapes give identical bits: no atomics- or timing-dependent accumulation
/// order). With it, a difference between the two runs of an op case FAILS; without it, it is a note.
inline constexpr const char* kDeterministicAttribute = "deterministic";
/// STRING device attributes naming kernels, `op(dtype,...)` (the full key: inputs, then outputs) or
/// `op` alone (every key of the op), separated by ';'. They take precedence over kDeterministicAttribute
/// for the kernels they name: a vendor whose device is reproducible except for, say, an atomics-based
/// scatter_add lists that one as nondeterministic, and a device that is not reproducible as a whole
/// can still promise it for the kernels it lists as deterministic.
inline constexpr const char* kDeterministicKernelsAttribute = "deterministic_kernels";
inline constexpr const char* kNondeterministicKernelsAttribute = "nondeterministic_kernels";

/// One entry of a kernel list: an op and, unless the entry is the op alone, its full dtype key.
struct KernelPattern {
  std::string op;
  std::optional<std::vector<DType>> key;
  std::string text;  // as written, for messages

  bool Matches(std::string_view op_name, std::span<const DType> dtypes) const;
};

/// Parses "sum(float32,float32); matmul" (spaces ignored; an empty list is valid). Throws oar::Error
/// (INVALID_ARGUMENT) naming the attribute and the malformed entry.
std::vector<KernelPattern> ParseKernelList(std::string_view text, std::string_view attribute);

/// The declarations of one device.
struct DeterminismDeclarations {
  bool device_wide = false;  ///< kDeterministicAttribute is BOOL true
  std::vector<KernelPattern> deterministic, nondeterministic;

  /// Reads the three attributes; throws oar::Error (INVALID_ARGUMENT) for a malformed list or a list
  /// attribute that is not a STRING.
  static DeterminismDeclarations Read(const runtime::DeviceContext& ctx);

  /// Whether the kernel (op, full dtype key) is declared bitwise reproducible; `why` says by which
  /// declaration ("the device declares 'deterministic'", "'nondeterministic_kernels' lists sum", ...).
  bool Reproducible(std::string_view op, std::span<const DType> key, std::string* why) const;
};

}  // namespace oar::conformance

#endif  // OAR_CONFORMANCE_RUNNER_DETERMINISM_H_
