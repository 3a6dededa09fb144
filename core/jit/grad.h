// Autodiff on programs: the backward program is derived from the forward one through each op's VJP rule in
// its schema — the rules eager autograd runs, not a second set. The forward program is run by the
// reference interpreter with the chosen inputs requiring grad, autograd applies the rules (with
// create_graph, so they are recorded as ops), and the whole computation is captured (capture.h). The
// result is an ordinary program, so Grad applies to it again for higher-order derivatives.
#ifndef OAR_CORE_JIT_GRAD_H_
#define OAR_CORE_JIT_GRAD_H_

#include <memory>
#include <span>

#include "core/ir/builder.h"
#include "core/tensor/tensor.h"

namespace oar::jit {

/// A program with the outputs of `program` followed by d(sum of output `output`)/d(input i) for each i in
/// `wrt` (named "d<output name>/d<input name>"). Shapes are those of `example_inputs` (static: a VJP rule
/// broadcasts to its input's extents); parameters stay parameters (not differentiated). Throws oar::Error
/// for an index out of range or a non-floating output or input.
std::unique_ptr<ir::Program> Grad(ir::IrContext& ctx, const ir::Program& program, int output,
                                  std::span<const int> wrt, std::span<const Tensor> example_inputs, Device device);

}  // namespace oar::jit

#endif  // OAR_CORE_JIT_GRAD_H_
