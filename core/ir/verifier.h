// The IR verifier: structure (operand/result/region counts, terminators), attributes against the op's
// declaration, SSA dominance (a value is used only after its definition, in its block or a block nested in
// it, never across an op isolated from above), result types against the op's inference (the op schema for
// the `op` dialect), and each op's own rules. Throws oar::Error(kInvalidArgument) naming the op, its
// position and the rule broken.
#ifndef OAR_CORE_IR_VERIFIER_H_
#define OAR_CORE_IR_VERIFIER_H_

#include "core/ir/builder.h"

namespace oar::ir {

void Verify(const Operation& root);
inline void Verify(const Program& program) { Verify(*program.module()); }

/// "op.add at 3:5 (op 2 of the block of builtin.module)": where an op is, for messages.
std::string DescribeOp(const Operation& op);

}  // namespace oar::ir

#endif  // OAR_CORE_IR_VERIFIER_H_
