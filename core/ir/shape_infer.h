// Symbolic shape inference through the op schemas' shape rules (core/ops/schema.h), which are written against
// int64 `Dims`.
//
// Broadcasting ops (binary, compare, where) broadcast their operands' extents symbolically (DimBroadcast:
// `bcast(S,T)`). For every other rule the distinct unknown extents of the operands (symbols, expressions,
// each `?`) are variables: the rule runs on a grid of two values per variable and on check points off the
// grid, and each result extent is fitted as floor(P(x)/D) for a multilinear polynomial P with integer
// coefficients and a small D, which the check points must confirm (including points with small values, so
// that a clamp such as a slice's end is never taken for a constant). Extents that fit are expressions
// (`B*S`, `S+1`, `(S+1)/2`); the others are `?`. When the rule rejects distinct values (matmul's inner
// extents), the finest merging of variables it accepts is the op's equality constraint; a rule that accepts
// no single finest merging falls back to one probe shared by all unknowns, as before.
#ifndef OAR_CORE_IR_SHAPE_INFER_H_
#define OAR_CORE_IR_SHAPE_INFER_H_

#include <span>
#include <utility>
#include <vector>

#include "core/ir/context.h"
#include "core/ir/operation.h"
#include "core/ops/schema.h"

namespace oar::ir {

/// What symbolic inference learns from one op.
struct SymbolicInference {
  /// The result types.
  std::vector<Type> types;
  /// Pairs of operand extents that the op's rule requires to be equal (a symbol or expression each).
  std::vector<std::pair<int64_t, int64_t>> equal;
};

/// Result types and constraints of schema op `s` for these operand types and attributes (the op's
/// attributes as stored, in any order). Throws oar::Error naming the op when the rule refuses them.
SymbolicInference InferSymbolic(IrContext& ctx, const ops::OpSchema& s, std::span<const Type> operand_types,
                                const std::vector<NamedAttribute>& attrs);

}  // namespace oar::ir

#endif  // OAR_CORE_IR_SHAPE_INFER_H_
