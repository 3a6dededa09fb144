// Builder: creates operations at an insertion point; Program: a module plus its parameters.
#ifndef OAR_CORE_IR_BUILDER_H_
#define OAR_CORE_IR_BUILDER_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/context.h"
#include "core/ir/dialect.h"
#include "core/ir/operation.h"
#include "core/tensor/tensor.h"

namespace oar::ir {

class Builder {
 public:
  explicit Builder(IrContext& ctx) : ctx_(ctx) {}
  Builder(IrContext& ctx, Block& block) : ctx_(ctx) { SetInsertionPointToEnd(block); }
  IrContext& context() const { return ctx_; }

  /// New ops go at the end of `block`.
  void SetInsertionPointToEnd(Block& block) {
    block_ = &block;
    before_ = nullptr;
  }
  /// New ops go right before `op`.
  void SetInsertionPoint(Operation* op) {
    block_ = op->parent_block();
    before_ = op;
  }
  /// New ops go right after `op`.
  void SetInsertionPointAfter(Operation* op) {
    block_ = op->parent_block();
    before_ = op->next();
  }
  Block* block() const { return block_; }

  /// Create `name` (e.g. "op.add") at the insertion point. Attributes are completed with the op's defaults
  /// and checked; result types are inferred when `result_types` is empty and the op can infer them (and
  /// checked against the inference otherwise). Regions are created empty. Throws oar::Error naming the op.
  Operation* Create(std::string_view name, std::span<const Value> operands, std::vector<NamedAttribute> attrs = {},
                    std::span<const Type> result_types = {});
  /// Create and return the single result.
  Value Create1(std::string_view name, std::span<const Value> operands, std::vector<NamedAttribute> attrs = {},
                std::span<const Type> result_types = {});
  Value Create1(std::string_view name, std::initializer_list<Value> operands, std::vector<NamedAttribute> attrs = {}) {
    return Create1(name, std::span<const Value>(operands.begin(), operands.size()), std::move(attrs));
  }

  /// An attribute for Create's list.
  NamedAttribute Attr(std::string_view name, Attribute value) { return {ctx_.Intern(name), value}; }

 private:
  IrContext& ctx_;
  Block* block_ = nullptr;
  Operation* before_ = nullptr;
};

/// A program: a builtin.module op whose one block holds the ops, plus the values of its parameters.
class Program {
 public:
  explicit Program(IrContext& ctx);
  /// Adopt `module` (a detached builtin.module).
  Program(IrContext& ctx, Operation* module);
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  IrContext& context() const { return ctx_; }
  Operation* module() const { return module_; }
  Block& block() const { return module_->region(0).front(); }

  /// Parameter values by name (what builtin.parameter ops refer to).
  std::map<std::string, Tensor> parameters;

 private:
  IrContext& ctx_;
  Operation* module_;
};

}  // namespace oar::ir

#endif  // OAR_CORE_IR_BUILDER_H_
