// Decompositions of composite ops into primitive ops, written once against an Emitter so that the same
// rule runs eagerly (on tensors, RunDecomposition) and in the graph IR (on op-dialect values, the
// `decompose` pass in core/passes). Each schema record with a composite kernel binds its rule
// (OpSchema::decompose); the ops a rule emits are primitives (their records have no decomposition).
#ifndef OAR_CORE_OPS_DECOMPOSE_H_
#define OAR_CORE_OPS_DECOMPOSE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "core/ops/schema.h"

namespace oar::ops {

/// Where a decomposition's primitive ops go. Values are handles the emitter hands out (an index into its
/// own list of tensors or IR values).
class Emitter {
 public:
  using Value = int32_t;
  virtual ~Emitter() = default;
  /// Emit `op` (a primitive) on `inputs` with its attribute values in schema order, every one present;
  /// returns one value per output.
  virtual std::vector<Value> Emit(Op op, std::span<const Value> inputs, AttrValues attrs) = 0;
  /// A 0-d constant `value` of `dtype` (it broadcasts against anything).
  virtual Value Constant(double value, DType dtype) = 0;
  /// The dtype and extents of `v`. Extents may be symbolic (negative, the IR's encoding): rules read the
  /// rank and static extents only.
  virtual TensorMeta Meta(Value v) const = 0;
};

/// The rules the schema records bind (decompose.cc).
std::vector<Emitter::Value> DecomposeSoftmax(Emitter& e, std::span<const Emitter::Value> in, const AttrValues& attrs);
std::vector<Emitter::Value> DecomposeLogSoftmax(Emitter& e, std::span<const Emitter::Value> in, const AttrValues& attrs);
std::vector<Emitter::Value> DecomposeLayerNorm(Emitter& e, std::span<const Emitter::Value> in, const AttrValues& attrs);
std::vector<Emitter::Value> DecomposeReluGrad(Emitter& e, std::span<const Emitter::Value> in, const AttrValues& attrs);
std::vector<Emitter::Value> DecomposeBatchNormTrain(Emitter& e, std::span<const Emitter::Value> in,
                                                    const AttrValues& attrs);
std::vector<Emitter::Value> DecomposeBatchNormTrainGrad(Emitter& e, std::span<const Emitter::Value> in,
                                                        const AttrValues& attrs);
std::vector<Emitter::Value> DecomposeFusedLinear(Emitter& e, std::span<const Emitter::Value> in, const AttrValues& attrs);

/// Run `op`'s decomposition eagerly on `inputs` (the primitives' kernels on the inputs' device, recorded
/// for autograd as any eager op). Throws kInvalidArgument when `op` has no decomposition or its rule
/// declines for these inputs; bad inputs fail as the op itself would (the schema's inference runs first).
std::vector<Tensor> RunDecomposition(Op op, std::span<const Tensor> inputs, AttrValues attrs = {});

}  // namespace oar::ops

#endif  // OAR_CORE_OPS_DECOMPOSE_H_
