// The reference interpreter: runs a PIR program (op or kernel dialect) one op at a time with the eager
// kernels. It defines what a program means — the scheduler and the compiler are tested against it — and is
// deliberately simple: no planning, no streams beyond the eager ones, every value kept until the end.
#ifndef OAR_CORE_JIT_INTERPRETER_H_
#define OAR_CORE_JIT_INTERPRETER_H_

#include <span>
#include <vector>

#include "core/ir/builder.h"
#include "core/tensor/tensor.h"

namespace oar::jit {

/// Run `program` on `device`: builtin.data inputs are `inputs` by index (checked against the program's
/// input specs: dtype, rank, static extents, and one extent per symbol across all inputs), parameters come
/// from program.parameters (moved to `device`), op.* ops run on `device`, kernel.* ops on the device they
/// are bound to, kernel.transfer copies between devices. Returns the operands of builtin.output, on the
/// device they were computed on. Throws oar::Error naming the input, parameter or op (and its position).
std::vector<Tensor> Interpret(const ir::Program& program, std::span<const Tensor> inputs, Device device);

}  // namespace oar::jit

#endif  // OAR_CORE_JIT_INTERPRETER_H_
