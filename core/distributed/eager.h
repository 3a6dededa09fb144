// Eager execution on DistTensors: each call applies the op's SPMD rule (spmd.h), reshards the inputs to
// what the rule chose, runs the local kernel on every rank and wraps the results with the rule's output
// placements. Gradients come from the local tapes plus the collectives' adjoints (dist_tensor.h).
#ifndef OAR_CORE_DISTRIBUTED_EAGER_H_
#define OAR_CORE_DISTRIBUTED_EAGER_H_

#include <functional>
#include <span>
#include <vector>

#include "core/distributed/dist_tensor.h"
#include "core/distributed/spmd.h"
#include "core/ops/schema.h"

namespace oar::distributed {

/// Any op of the table on DistTensors (one mesh), attributes in schema order (defaults filled).
std::vector<DistTensor> Apply(ops::Op op, std::span<const DistTensor> inputs, ops::AttrValues attrs = {});

/// The driver behind Apply and the composites: decide with `rule`, reshard, call `local(rank, locals)` on
/// every rank, check the local results against `out_shapes` (global) and the chosen placements.
struct LocalCall {
  int64_t rank;
  std::span<const Tensor> locals;        // the resharded inputs of this rank (undefined where absent)
  const SpmdDecision& decision;          // the placements chosen
  const std::vector<Dims>& out_shapes;   // this rank's output shapes under them
};
using LocalFn = std::function<std::vector<Tensor>(const LocalCall& call)>;
std::vector<DistTensor> Execute(const SpmdRule& rule, std::span<const DistTensor> inputs,
                                const std::vector<Dims>& out_shapes, const LocalFn& local);

// ---- the functions models use ----
DistTensor add(const DistTensor& a, const DistTensor& b);
DistTensor sub(const DistTensor& a, const DistTensor& b);
DistTensor mul(const DistTensor& a, const DistTensor& b);
DistTensor div(const DistTensor& a, const DistTensor& b);
DistTensor matmul(const DistTensor& a, const DistTensor& b);
DistTensor sum(const DistTensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
DistTensor mean(const DistTensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
DistTensor amax(const DistTensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
DistTensor softmax(const DistTensor& x, int64_t axis = -1);
DistTensor reshape(const DistTensor& x, const Dims& shape);
DistTensor transpose(const DistTensor& x, int64_t d0, int64_t d1);
DistTensor slice(const DistTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
DistTensor concat(std::span<const DistTensor> xs, int64_t axis);
DistTensor relu(const DistTensor& x);
DistTensor silu(const DistTensor& x);
/// y = x w^T (+ b), w [out, in] as nn::Linear.
DistTensor linear(const DistTensor& x, const DistTensor& w, const DistTensor& bias = DistTensor());
DistTensor rms_norm(const DistTensor& x, int normalized_ndim, const DistTensor& weight = DistTensor(),
                    double eps = 1e-6);
DistTensor layer_norm(const DistTensor& x, int normalized_ndim, const DistTensor& weight, const DistTensor& bias,
                      double eps = 1e-5);
/// weight [vocab, dim] (vocab-sharded: each rank looks up its rows, the result is Partial(sum)).
DistTensor embedding(const DistTensor& weight, const DistTensor& indices);
/// Mean cross entropy of logits [N, C] and int64 target [N]; rows may be sharded (exact: per-rank sums
/// and counts are reduced in one all_reduce). Returns a replicated scalar.
DistTensor cross_entropy(const DistTensor& logits, const DistTensor& target);
DistTensor scaled_dot_product_attention(const DistTensor& q, const DistTensor& k, const DistTensor& v,
                                        bool causal = false);

/// Rotary position embedding of [..., T, D] (the last two dims stay whole).
DistTensor rotary_embedding(const DistTensor& x);

/// Megatron sequence parallel (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
/// Models"): between the tensor-parallel regions (norms, dropout, residual adds) the activations are
/// sharded on the sequence dim along the tp mesh dim instead of replicated. GatherSequence enters a region:
/// Shard(seq) -> Replicate on `mesh_dim` (one all_gather; its backward one reduce_scatter) before the
/// column-parallel Linear. ScatterSequence leaves one: Partial(sum) -> Shard(seq_dim) (one reduce_scatter in
/// place of the row-parallel Linear's all_reduce; its backward one all_gather), or Replicate ->
/// Shard(seq_dim), a local slice (the embedding's output). Other mesh dims keep their placements. Anything
/// else on `mesh_dim` is refused (kInvalidArgument) naming the placements.
DistTensor GatherSequence(const DistTensor& x, int mesh_dim);
DistTensor ScatterSequence(const DistTensor& x, int mesh_dim, int64_t seq_dim);

/// Backward from a scalar loss: a Replicate mesh dim seeds the rank at coordinate 0 only (the ranks'
/// copies are one value), a Partial(sum) dim seeds every rank, Partial(avg) 1/p each. Gradients
/// accumulate into the locals of the leaves (DistTensor::grad() gives them placed).
void Backward(const DistTensor& loss);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_EAGER_H_
