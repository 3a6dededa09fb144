// Helpers of the op dialect (op_dialect.cc): the bridge between IR attributes and the op schemas.
#ifndef OAR_CORE_IR_OP_DIALECT_H_
#define OAR_CORE_IR_OP_DIALECT_H_

#include <vector>

#include "core/ir/context.h"
#include "core/ir/operation.h"
#include "core/ops/schema.h"

namespace oar::ir {

/// The schema's attribute values (schema order) of an op.* or kernel.* op's attributes.
ops::AttrValues SchemaAttrValues(const ops::OpSchema& s, const std::vector<NamedAttribute>& attrs);

/// The inverse: IR attributes (schema order, every attribute present) for schema attribute values, as
/// Builder::Create takes them.
std::vector<NamedAttribute> SchemaAttributes(IrContext& ctx, const ops::OpSchema& s, const ops::AttrValues& values);

}  // namespace oar::ir

#endif  // OAR_CORE_IR_OP_DIALECT_H_
