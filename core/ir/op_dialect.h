// Helpers of the op dialect (op_dialect.cc): the bridge between IR attributes and the op schemas.
#ifndef OAR_CORE_IR_OP_DIALECT_H_
#define OAR_CORE_IR_OP_DIALECT_H_

#include <vector>

#include "core/ir/operation.h"
#include "core/ops/schema.h"

namespace oar::ir {

/// The schema's attribute values (schema order) of an op.* or kernel.* op's attributes.
ops::AttrValues SchemaAttrValues(const ops::OpSchema& s, const std::vector<NamedAttribute>& attrs);

}  // namespace oar::ir

#endif  // OAR_CORE_IR_OP_DIALECT_H_
