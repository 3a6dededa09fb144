// The generic passes (dce, cse, canonicalize) and their building blocks.
#ifndef OAR_CORE_PASSES_TRANSFORMS_H_
#define OAR_CORE_PASSES_TRANSFORMS_H_

#include <cstdint>

#include "core/ir/builder.h"
#include "core/passes/pattern.h"

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

/// Register dce, cse, canonicalize and kernel-select with the pass registry (idempotent; called by the
/// pass registry on first use).
void RegisterGenericPasses();
void RegisterKernelSelectPass();
void RegisterConstantFoldPass();
void RegisterInplacePass();
void RegisterDecomposePass();
void RegisterShapeInferPass();

}  // namespace oar::passes

#endif  // OAR_CORE_PASSES_TRANSFORMS_H_
