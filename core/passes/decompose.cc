// decompose: rewrite op.* ops whose schema record carries a decomposition (softmax, log_softmax,
// layer_norm, ...) into the primitive op.* ops the rule emits, in place, inside regions too. The rules are
// the schema's (core/ops/decompose.h), the same that RunDecomposition runs eagerly; the primitives'
// result types come from their own schemas' inference, and the decomposed results must have the original
// results' types (an internal error otherwise, naming the op). Ops a rule declines stay as they are.
#include <memory>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/ops/decompose.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"

namespace oar::passes {
namespace {

// IR: values are op-dialect values, created before the op being decomposed.
class IrEmitter : public ops::Emitter {
 public:
  explicit IrEmitter(ir::Builder& b) : b_(b) {}
  Value Add(ir::Value v) {
    values_.push_back(v);
    return static_cast<Value>(values_.size() - 1);
  }
  ir::Value Get(Value v) const { return values_.at(static_cast<size_t>(v)); }

  std::vector<Value> Emit(ops::Op op, std::span<const Value> inputs, ops::AttrValues attrs) override {
    const ops::OpSchema& s = ops::Schema(op);
    std::vector<ir::Value> operands;
    for (Value v : inputs) operands.push_back(Get(v));
    ir::Operation* created =
        b_.Create("op." + std::string(s.name), operands, ir::SchemaAttributes(b_.context(), s, attrs));
    std::vector<Value> out;
    for (ir::Value r : created->results()) out.push_back(Add(r));
    return out;
  }
  Value Constant(double value, DType dtype) override {
    ir::IrContext& ctx = b_.context();
    const std::vector<int64_t> scalar;  // shape []
    return Add(b_.Create1("op.fill", {},
                          {b_.Attr("value", ctx.FloatAttr(value)), b_.Attr("shape", ctx.IntArrayAttr(scalar)),
                           b_.Attr("dtype", ctx.DTypeAttr(dtype))}));
  }
  ops::TensorMeta Meta(Value v) const override {
    const ir::Type t = Get(v).type();
    return {t.dtype(), Dims(t.dims())};
  }

 private:
  ir::Builder& b_;
  std::vector<ir::Value> values_;
};

bool Decomposable(const ir::Operation* op) {
  const ops::OpSchema* s = op->info().schema;
  return s != nullptr && s->decompose != nullptr && op->info().dialect->name() == "op";
}

// Decomposes `op`; false when its rule declines.
bool DecomposeOp(ir::IrContext& ctx, ir::Operation* op) {
  const ops::OpSchema& s = *op->info().schema;
  for (uint32_t i = 0; i < op->num_operands(); ++i) {
    if (!op->operand(i).type().IsTensor()) return false;
  }
  ir::Builder b(ctx);
  b.SetInsertionPoint(op);
  IrEmitter e(b);
  std::vector<ops::Emitter::Value> in;
  for (uint32_t i = 0; i < op->num_operands(); ++i) in.push_back(e.Add(op->operand(i)));
  std::vector<ops::Emitter::Value> out;
  try {
    out = s.decompose(e, in, ir::SchemaAttrValues(s, op->attributes()));
  } catch (const Error& err) {
    Throw(err.code(), "{}: its decomposition failed: {}", ir::DescribeOp(*op), err.what());
  }
  if (out.empty()) return false;  // declined (a rule declines before it emits anything)
  OAR_CHECK(out.size() == op->num_results(), kInternal, "{}: the decomposition gave {} results for {}",
            ir::DescribeOp(*op), out.size(), op->num_results());
  for (uint32_t i = 0; i < op->num_results(); ++i) {
    const ir::Value r = e.Get(out[i]);
    OAR_CHECK(r.type() == op->result(i).type(), kInternal,
              "{}: result {} of its decomposition has type {}, but the op's result is {}", ir::DescribeOp(*op), i,
              ir::PrintType(ctx, r.type()), ir::PrintType(ctx, op->result(i).type()));
  }
  for (uint32_t i = 0; i < op->num_results(); ++i) op->result(i).ReplaceAllUsesWith(e.Get(out[i]));
  op->Erase();
  return true;
}

class DecomposePass : public Pass {
 public:
  std::string_view name() const override { return "decompose"; }
  void Run(ir::Program& program) override { DecomposeCompositeOps(program); }
};

}  // namespace

int64_t DecomposeCompositeOps(ir::Program& program) {
  std::vector<ir::Operation*> ops;
  program.module()->Walk([&](ir::Operation* op) {
    if (Decomposable(op)) ops.push_back(op);
  });
  int64_t rewritten = 0;
  for (ir::Operation* op : ops) rewritten += DecomposeOp(program.context(), op) ? 1 : 0;
  return rewritten;
}

void RegisterDecomposePass() {
  RegisterPass("decompose",
               "rewrite composite ops (softmax, log_softmax, layer_norm) into the primitive ops of their schema's "
               "decomposition",
               [](const PassOptions& o) {
                 CheckPassOptions("decompose", o, {});
                 return std::make_unique<DecomposePass>();
               });
}

}  // namespace oar::passes
