// How programs run the ops that are not a kernel call: the Tensor-method ops (views, clone, slice_scatter),
// parameters and constants, shared by jit::Interpret and the Executor so both run them bit for bit the
// same; and ops that a layer
// above compiles (cinn.group from core/compiler), made runnable once per (op, device) through a registered
// OpCompiler when a program is compiled, then run like a kernel.
#ifndef OAR_CORE_SCHEDULER_OP_RUNNER_H_
#define OAR_CORE_SCHEDULER_OP_RUNNER_H_

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/ir/operation.h"
#include "core/ir/builder.h"
#include "core/ops/schema.h"
#include "core/tensor/tensor.h"

namespace oar::scheduler {

/// Views, clone/copy and slice_scatter: ops run as Tensor methods rather than through ops::Run.
bool IsTensorMethodOp(ops::Op op);
/// Run one of them (IsTensorMethodOp) on `in`; throws kInternal for any other op.
std::vector<Tensor> RunTensorMethodOp(const ops::OpSchema& s, std::span<const Tensor> in, const ops::AttrValues& a);

/// The value of `builtin.parameter` op `op` of `program` on `device`; kInvalidArgument, prefixed with `who`,
/// when the program holds no value of that name or one of another dtype or shape than the op declares.
Tensor ParameterValue(const ir::Program& program, const ir::Operation& op, Device device, std::string_view who);
/// The value of `builtin.constant` op `op` on `device` (one value broadcast to the result's shape, or all of them).
Tensor ConstantValue(const ir::Operation& op, Device device);

/// An op made runnable for one device. Run is called with the op's operands on that device (contiguity
/// not guaranteed), on the stream the caller made current (runtime::ScopedStream), from any number of
/// threads at once; it allocates its results through ops::AllocateOutput (so the executor's memory plan
/// places them) and enqueues its work on the current stream.
class CompiledOp {
 public:
  virtual ~CompiledOp() = default;
  virtual std::vector<Tensor> Run(std::span<const Tensor> inputs) const = 0;
};

/// Makes `op` runnable on `device`; throws oar::Error naming the op when it cannot.
using OpCompiler = std::shared_ptr<const CompiledOp> (*)(const ir::Operation& op, Device device);

/// Register the compiler of ops named `op_name` ("cinn.group"). Registering the same name again replaces it.
void RegisterOpCompiler(std::string_view op_name, OpCompiler compiler);
/// The compiler registered for `op_name`, or nullptr.
OpCompiler FindOpCompiler(std::string_view op_name);

}  // namespace oar::scheduler

#endif  // OAR_CORE_SCHEDULER_OP_RUNNER_H_
