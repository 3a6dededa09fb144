#include "core/ir/builder.h"

#include "core/base/error.h"

namespace oar::ir {

Operation* Builder::Create(std::string_view name, std::span<const Value> operands, std::vector<NamedAttribute> attrs,
                           std::span<const Type> result_types) {
  const OpInfo& info = ctx_.GetOp(name);
  OAR_CHECK_ARG(info.num_operands < 0 || static_cast<size_t>(info.num_operands) == operands.size(),
                "{}: expected {} operands, got {}", info.name, info.num_operands, operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    OAR_CHECK_ARG(static_cast<bool>(operands[i]), "{}: operand {} is a null value", info.name, i);
  }
  attrs = CompleteAttributes(ctx_, info, std::move(attrs));
  std::vector<Type> types(result_types.begin(), result_types.end());
  if (types.empty() && info.infer != nullptr) {
    std::vector<Type> operand_types;
    for (Value v : operands) operand_types.push_back(v.type());
    types = info.infer(ctx_, info, OpSignature{operand_types, attrs});
  }
  OAR_CHECK_ARG(info.num_results < 0 || static_cast<size_t>(info.num_results) == types.size(),
                "{}: expected {} result types, got {}", info.name, info.num_results, types.size());
  Operation* op = Operation::Create(info, operands, types, std::move(attrs), info.num_regions);
  if (block_ != nullptr) block_->Insert(before_, op);
  return op;
}

Value Builder::Create1(std::string_view name, std::span<const Value> operands, std::vector<NamedAttribute> attrs,
                       std::span<const Type> result_types) {
  Operation* op = Create(name, operands, std::move(attrs), result_types);
  OAR_CHECK(op->num_results() == 1, kInternal, "{} has {} results, not 1", name, op->num_results());
  return op->result(0);
}

Program::Program(IrContext& ctx) : ctx_(ctx) {
  module_ = Operation::Create(ctx.GetOp("builtin.module"), {}, {}, {}, 1);
  module_->region(0).AddBlock();
}

Program::Program(IrContext& ctx, Operation* module) : ctx_(ctx), module_(module) {
  OAR_CHECK(module != nullptr && module->name() == "builtin.module" && module->region(0).size() == 1, kInvalidArgument,
            "a program is a builtin.module with one block");
}

Program::~Program() { module_->Erase(); }

}  // namespace oar::ir
