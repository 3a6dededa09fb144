// constant-fold{max-elements=N}: evaluate op.* ops whose operands are all constants (builtin.constant or
// op.fill) with the eager kernels on cpu:0, and replace them by builtin.constant. Results with more than N
// elements (default 4096) stay unfolded, so the program does not grow by a large literal. An op the
// kernels refuse stays as it is: the program reports the error when it runs.
#include <charconv>
#include <memory>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ops/ops.h"
#include "core/ops/schema.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"

namespace oar::passes {

namespace {

const Device kHost("cpu:0");

// The value of a constant-like op as a cpu tensor, or undefined when `v` is not a constant.
Tensor ConstantValue(ir::Value v) {
  const ir::Operation* def = v.defining_op();
  if (def == nullptr || !v.type().IsTensor() || !v.type().HasStaticShape()) return Tensor();
  const Dims& shape = v.type().dims();
  const DType dtype = v.type().dtype();
  if (def->name() == "op.fill") return full(shape, def->attr("value").AsFloat(), dtype, kHost);
  if (def->name() != "builtin.constant") return Tensor();
  const auto values = def->attr("value").AsArray();
  const bool integral = !IsFloating(dtype);
  Tensor t;
  if (integral) {
    std::vector<int64_t> ints;
    for (ir::Attribute a : values) {
      ints.push_back(a.kind() == ir::AttrKind::kInt ? a.AsInt()
                     : a.kind() == ir::AttrKind::kBool ? int64_t{a.AsBool()}
                                                       : static_cast<int64_t>(a.AsFloat()));
    }
    t = FromVector<int64_t>(ints, Dims{static_cast<int64_t>(ints.size())}, kHost);
  } else {
    std::vector<double> reals;
    for (ir::Attribute a : values) {
      reals.push_back(a.kind() == ir::AttrKind::kFloat ? a.AsFloat()
                      : a.kind() == ir::AttrKind::kInt ? static_cast<double>(a.AsInt())
                                                       : (a.AsBool() ? 1.0 : 0.0));
    }
    t = FromVector<double>(reals, Dims{static_cast<int64_t>(reals.size())}, kHost);
  }
  t = cast(t, dtype);
  if (values.size() == 1) return t.view(Dims{}).expand(shape).contiguous();
  return t.view(shape);
}

ir::Attribute ValueAttr(ir::IrContext& ctx, const Tensor& t) {
  std::vector<ir::Attribute> out;
  if (IsFloating(t.dtype())) {
    for (double d : cast(t.contiguous(), DType::kFloat64).ToVector<double>()) out.push_back(ctx.FloatAttr(d));
  } else if (t.dtype() == DType::kBool) {
    for (int64_t i : cast(t.contiguous(), DType::kInt64).ToVector<int64_t>()) out.push_back(ctx.BoolAttr(i != 0));
  } else {
    for (int64_t i : cast(t.contiguous(), DType::kInt64).ToVector<int64_t>()) out.push_back(ctx.IntAttr(i));
  }
  return ctx.ArrayAttr(out);
}

class ConstantFoldPass : public Pass {
 public:
  explicit ConstantFoldPass(int64_t max_elements) : max_elements_(max_elements) {}
  std::string_view name() const override { return "constant-fold"; }

  void Run(ir::Program& program) override {
    std::vector<ir::Operation*> ops;
    program.module()->Walk([&](ir::Operation* op) {
      if (op->info().schema != nullptr && op->info().dialect->name() == "op" && op->info().Has(ir::kPure) &&
          op->name() != "op.fill" && op->num_regions() == 0) {
        ops.push_back(op);
      }
    });
    for (ir::Operation* op : ops) Fold(program.context(), op);
  }

 private:
  void Fold(ir::IrContext& ctx, ir::Operation* op) {
    std::vector<Tensor> inputs;
    for (uint32_t i = 0; i < op->num_operands(); ++i) {
      inputs.push_back(ConstantValue(op->operand(i)));
      if (!inputs.back().defined()) return;
    }
    for (ir::Value r : op->results()) {
      if (!r.type().HasStaticShape() || r.type().dims().Product() > max_elements_) return;
    }
    const ops::OpSchema& s = *op->info().schema;
    std::vector<Tensor> results;
    try {
      results = s.kind == ops::OpKind::kView || s.kind == ops::OpKind::kComposite || s.kind == ops::OpKind::kCopy
                    ? std::vector<Tensor>{}
                    : ops::Run(s.op, inputs, ir::SchemaAttrValues(s, op->attributes()), kHost);
    } catch (const Error&) {
      return;  // left for run time, which reports it
    }
    if (results.size() != op->num_results()) return;
    ir::Builder b(ctx);
    b.SetInsertionPoint(op);
    for (uint32_t i = 0; i < op->num_results(); ++i) {
      const ir::Type t = op->result(i).type();
      const ir::Value c = b.Create1("builtin.constant", {}, {b.Attr("value", ValueAttr(ctx, results[i]))},
                                    std::span<const ir::Type>(&t, 1));
      op->result(i).ReplaceAllUsesWith(c);
    }
    op->Erase();
  }

  int64_t max_elements_;
};

}  // namespace

void RegisterConstantFoldPass() {
  RegisterPass("constant-fold",
               "evaluate ops whose operands are all constants with the cpu kernels {max-elements=4096}",
               [](const PassOptions& o) {
                 CheckPassOptions("constant-fold", o, {"max-elements"});
                 int64_t max = 4096;
                 if (auto it = o.find("max-elements"); it != o.end()) {
                   const std::string& v = it->second;
                   const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), max);
                   OAR_CHECK_ARG(ec == std::errc() && end == v.data() + v.size() && max >= 0,
                                 "constant-fold: max-elements must be an integer >= 0, got '{}'", v.substr(0, 32));
                 }
                 return std::make_unique<ConstantFoldPass>(max);
               });
}

}  // namespace oar::passes
