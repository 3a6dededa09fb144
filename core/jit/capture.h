// Dynamic-to-static: capture an eager function into a PIR program in the `op` dialect.
//
// Capture runs the function eagerly once (twice when an input has symbolic extents) with a tracer active on
// the thread: the eager dispatch reports every op, view, in-place copy, transfer and host read
// (core/ops/trace.h), and the program is built from those reports. The eager API stays the one entry
// point — there is no second way to write a model. What capture records:
//   - inputs as builtin.data ops typed by their InputSpec (static, symbolic `B` or dynamic `?` extents);
//   - state (parameters, buffers, optimiser state) as builtin.parameter ops named by their slot;
//   - tensors the function reads but neither received nor computed (made on the host, or captured from
//     outside) as builtin.constant ops (small) or as parameters named `const.N` (large);
//   - in-place copies functionally: after `t.copy_(v)` later reads of `t` see `v`; a state slot whose
//     tensor was replaced or written becomes an extra output (Captured::state_updates);
//   - the function's results as builtin.output.
//
// Symbolic extents: the function is traced at two extents per symbol; the two traces must run the same
// ops, and an attribute that differs between them is generalised (a view's extent becomes -1, a slice bound
// is taken from the end) or refused with an error naming the op. A function whose ops depend on an extent
// in any other way cannot be captured with that extent symbolic.
//
// Host reads: reading a value computed inside the function (ToVector, item, a C++ branch on it) is an
// error naming the read and the op that produced the value — no graph breaks. Move the read out of the
// function, or return the value as an output.
#ifndef OAR_CORE_JIT_CAPTURE_H_
#define OAR_CORE_JIT_CAPTURE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/ir/builder.h"
#include "core/tensor/tensor.h"

namespace oar::jit {

/// One extent of an input: static (>= 0), a named symbol shared by every input that uses it, or dynamic.
struct DimSpec {
  int64_t extent = -1;  // >= 0: static
  std::string symbol;   // non-empty: symbolic
  static DimSpec Static(int64_t e) { return {e, {}}; }
  static DimSpec Symbol(std::string name) { return {-1, std::move(name)}; }
  static DimSpec Dynamic() { return {-1, {}}; }
  bool is_static() const { return extent >= 0; }
};

/// A program input: its name, dtype and extents.
struct InputSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<DimSpec> dims;
  /// The spec of a concrete tensor (every extent static).
  static InputSpec Of(std::string name, const Tensor& t);
  /// "x: f32[B, 2]".
  std::string ToString() const;
};

/// A tensor the function reads and may replace or write in place, under a stable name.
struct StateSlot {
  std::string name;
  Tensor* tensor;
};

using Function = std::function<std::vector<Tensor>(std::span<const Tensor> inputs)>;

struct CaptureOptions {
  std::vector<StateSlot> state;
  /// Names of the function's results (default out0, out1, ...).
  std::vector<std::string> output_names;
  /// The two extents a symbolic or dynamic dimension takes in the two traces.
  int64_t probe_extents[2] = {3, 5};
  /// Captured tensors up to this many elements become builtin.constant; larger ones parameters `const.N`.
  int64_t max_constant_elements = 16;
};

struct Captured {
  std::unique_ptr<ir::Program> program;
  /// What the (first) capture run returned: the eager results.
  std::vector<Tensor> outputs;
  /// Slots whose tensor the function replaced or wrote; their new values are the program's last outputs,
  /// in this order, after the function's own.
  std::vector<std::string> state_updates;
};

/// Capture `fn` on `device`. `example_inputs` are used when every spec is static (they must match the
/// specs); otherwise, or when none are given, inputs are zeros of the specs' dtypes and extents. Throws
/// oar::Error (kInvalidArgument, kFailedPrecondition) naming the op, the read or the attribute that
/// prevents capture.
Captured Capture(ir::IrContext& ctx, const Function& fn, std::span<const InputSpec> specs,
                 std::span<const Tensor> example_inputs, Device device, const CaptureOptions& options = {});

/// The state slots a captured program updates: its last outputs, in order (module attribute jit.state_updates).
std::vector<std::string> StateUpdates(const ir::Program& program);

/// The program's input specs (from its builtin.data ops, in index order) and output names.
std::vector<InputSpec> ProgramInputs(const ir::Program& program);
std::vector<std::string> ProgramOutputNames(const ir::Program& program);

}  // namespace oar::jit

#endif  // OAR_CORE_JIT_CAPTURE_H_
