// Reverse-mode automatic differentiation: a tape of op nodes recorded by eager execution, backward(),
// grad() with higher-order derivatives (create_graph), NoGradGuard.
//
// Every differentiable op's VJP rule lives in its schema (core/ops/vjp.cc) and is written with eager ops,
// so running backward with create_graph=true records the gradient computation itself and a second
// grad() differentiates it (Hessian-vector products, Laplacians for physics-informed losses).
//
// Thread-safety: recording uses thread-local grad mode; one graph must not be backpropagated from two
// threads at once.
#ifndef OAR_CORE_AUTOGRAD_AUTOGRAD_H_
#define OAR_CORE_AUTOGRAD_AUTOGRAD_H_

#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/ops/ops.h"
#include "core/tensor/autograd_meta.h"

namespace oar {

/// Gradients of `outputs` with respect to `inputs` (which must require grad), seeded with
/// `grad_outputs` (default: ones for scalar outputs; required otherwise). Nothing is accumulated into
/// leaves' grad(). With create_graph the returned gradients carry history and can be differentiated
/// again; retain_graph (implied by create_graph) keeps the graph for another backward. An input the
/// outputs do not depend on gets an undefined gradient unless allow_unused is false (then an error).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool create_graph = false,
                         bool retain_graph = false, bool allow_unused = false);

/// Backward from several roots at once, root i seeded with grad_outputs[i] (required, the root's shape),
/// accumulating into the leaves' grad() as Tensor::backward does. The roots may live on different devices
/// (the local results of a distributed computation).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph = false);

namespace autograd {

/// The VJP of a node recorded with RecordCustom: one gradient per output (undefined where none arrived)
/// in, one per input (undefined for none) out. Written with eager ops (or other custom nodes), so it is
/// itself recorded under create_graph.
using CustomVjp = std::function<std::vector<Tensor>(std::span<const Tensor> grads)>;

/// Record a computation that is not one op of the table — a collective whose inputs and outputs live on
/// several devices — when grad mode is on and an input requires grad (otherwise nothing happens).
/// `name` appears in the engine's messages.
void RecordCustom(std::string_view name, std::span<const Tensor> inputs, std::span<Tensor> outputs, CustomVjp vjp);

}  // namespace autograd
}  // namespace oar

#endif  // OAR_CORE_AUTOGRAD_AUTOGRAD_H_
