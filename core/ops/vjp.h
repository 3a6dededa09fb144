// The VJP rules (vjp.cc) that schema records bind (OpSchema::vjp). Private to core/ops: everyone else reads
// a rule through its op's record. The unary elementwise rules are written in their records (schema.cc).
#ifndef OAR_CORE_OPS_VJP_H_
#define OAR_CORE_OPS_VJP_H_

#include <vector>

#include "core/ops/schema.h"

namespace oar::ops::vjp {

using Grads = std::vector<Tensor>;

// binary elementwise and select
Grads Add(const VjpArgs& a);
Grads Sub(const VjpArgs& a);
Grads Mul(const VjpArgs& a);
Grads Div(const VjpArgs& a);
Grads Pow(const VjpArgs& a);
Grads Maximum(const VjpArgs& a);
Grads Minimum(const VjpArgs& a);
Grads Where(const VjpArgs& a);
// matmul, reductions, softmax, cast
Grads Matmul(const VjpArgs& a);
Grads Sum(const VjpArgs& a);
Grads Mean(const VjpArgs& a);
Grads Max(const VjpArgs& a);
Grads Min(const VjpArgs& a);
Grads Prod(const VjpArgs& a);
Grads Softmax(const VjpArgs& a);
Grads LogSoftmax(const VjpArgs& a);
Grads Cast(const VjpArgs& a);
// views (squeeze and unsqueeze share one: reshape back) and their helpers
Grads View(const VjpArgs& a);
Grads Permute(const VjpArgs& a);
Grads Slice(const VjpArgs& a);
Grads Expand(const VjpArgs& a);
Grads Squeeze(const VjpArgs& a);
Grads Identity(const VjpArgs& a);
Grads SliceScatterVjp(const VjpArgs& a);
// neural-network and indexing primitives (schema_nn.cc)
Grads Conv2d(const VjpArgs& a);
Grads Conv2dGradInput(const VjpArgs& a);
Grads Conv2dGradWeight(const VjpArgs& a);
Grads MaxPool2d(const VjpArgs& a);
Grads AvgPool2d(const VjpArgs& a);
Grads AvgPool2dGrad(const VjpArgs& a);
Grads AdaptiveAvgPool2d(const VjpArgs& a);
Grads AdaptiveAvgPool2dGrad(const VjpArgs& a);
Grads LayerNorm(const VjpArgs& a);
Grads Concat(const VjpArgs& a);
Grads Gather(const VjpArgs& a);
Grads IndexSelect(const VjpArgs& a);
Grads ScatterAdd(const VjpArgs& a);
Grads Topk(const VjpArgs& a);
Grads Pad(const VjpArgs& a);
// relu (its rule is the relu_grad op) and relu_grad (linear in the gradient)
Grads Relu(const VjpArgs& a);
Grads ReluGrad(const VjpArgs& a);
// batch_norm_train (its rule is the batch_norm_train_grad op, or the composed chain)
Grads BatchNormTrain(const VjpArgs& a);
/// Whether `device`'s plugin has `op`'s kernel for the dtypes `key` (inputs then outputs), plain format.
bool KernelOn(Op op, Device device, std::span<const int32_t> key);
// fused ops
Grads FusedLinear(const VjpArgs& a);

}  // namespace oar::ops::vjp

#endif  // OAR_CORE_OPS_VJP_H_
