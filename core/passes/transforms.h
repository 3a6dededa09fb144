// The generic passes (dce, cse, canonicalize) and their building blocks.
#ifndef OAR_CORE_PASSES_TRANSFORMS_H_
#define OAR_CORE_PASSES_TRANSFORMS_H_

#include <cstdint>

#include "core/ir/builder.h"
#include "core/ops/schema.h"
#include "core/passes/pattern.h"
#include "core/tensor/device.h"

namespace oar::passes {

/// Erase side-effect-free ops whose results are unused (repeatedly); returns how many.
int64_t EraseDeadOps(ir::Program& program);
/// Merge identical side-effect-free ops, scoped by region nesting; returns how many were removed.
int64_t EliminateCommonSubexpressions(ir::Program& program);
/// The canonicalisation patterns (hand-written and DRR).
void AddCanonicalizationPatterns(PatternList& patterns);

/// Rewrite every op.* op whose schema has a decomposition (OpSchema::decompose) into primitive op.* ops, in
/// place (nested regions included); returns how many were rewritten. The `decompose` pass.
int64_t DecomposeCompositeOps(ir::Program& program);

/// The fuse-linear rules (DRR, fuse_linear.cc): matmul -> add(bias over rows) [-> relu | tanh] into
/// op.fused_linear, only where `device`'s kernel registry has fused_linear for the dtype.
void AddFuseLinearPatterns(PatternList& patterns, Device device);
/// Whether `device`'s kernel registry has a PLAIN fused_linear kernel for `dtype` (inputs and output).
bool FusedLinearKernelOn(Device device, DType dtype);
/// The conditions of one fuse-linear rewrite of sum = matmul(x, w) + bias (either operand order): x rank >= 2,
/// w 2-D, bias 1-D with w's (static) column count and the product's dtype, sum of the product's type (the
/// bias broadcasts over rows only), the product used once, and a kernel on `device`.
bool CanFuseLinear(ir::Value x, ir::Value w, ir::Value bias, ir::Value mm, ir::Value sum, Device device);

/// The device has a kernel for the fused op `op` (fused_adam, fused_rotary) with every operand of `dtype`
/// (fuse-adam and fuse-rotary rewrite only there).
bool FusedKernelOn(ops::Op op, Device device, DType dtype);

/// The `remat` pass (remat.cc): recompute elementwise results before their late uses while that lowers the
/// most bytes the program's own buffers hold at once; returns how many ops were recomputed.
int64_t RecomputeAtPeak(ir::Program& program);

/// Register dce, cse, canonicalize and kernel-select with the pass registry (idempotent; called by the
/// pass registry on first use).
void RegisterGenericPasses();
void RegisterKernelSelectPass();
void RegisterConstantFoldPass();
void RegisterInplacePass();
void RegisterDecomposePass();
void RegisterShapeInferPass();
void RegisterFuseLinearPass();
/// fuse-adam, fuse-rotary, fuse-rms-scale, fuse-act-grad, fuse-log-softmax (fuse_elementwise.cc).
void RegisterFuseElementwisePasses();
void RegisterRematPass();

}  // namespace oar::passes

#endif  // OAR_CORE_PASSES_TRANSFORMS_H_
