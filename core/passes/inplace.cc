// inplace: mark elementwise ops whose result may reuse the buffer of an operand that dies there, with the
// discardable attribute `oar.inplace = <operand index>`. The operand must have this op as its only use,
// the same type as the result (no broadcasting, same dtype), and be a buffer the program owns: not a
// program input (builtin.data), a parameter, a literal (builtin.constant), a block argument, or a view of
// another buffer. The scheduler's memory planner reads the mark; kernels of elementwise ops accept an
// output that is their input (docs/ops.md).
#include <memory>

#include "core/ir/dialect.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"

namespace oar::passes {
namespace {

bool OwnedBuffer(ir::Value v) {
  const ir::Operation* def = v.defining_op();
  if (def == nullptr) return false;
  const std::string_view n = def->name();
  if (n == "builtin.data" || n == "builtin.parameter" || n == "builtin.constant" || n == "builtin.split") return false;
  return !def->info().Has(ir::kView) && def->num_regions() == 0;
}

class InplacePass : public Pass {
 public:
  std::string_view name() const override { return "inplace"; }
  void Run(ir::Program& program) override {
    ir::IrContext& ctx = program.context();
    program.module()->Walk([&](ir::Operation* op) {
      if (!op->info().Has(ir::kElementwise) || op->num_results() != 1 || op->attr("oar.inplace")) return;
      for (uint32_t i = 0; i < op->num_operands(); ++i) {
        const ir::Value v = op->operand(i);
        if (v.HasOneUse() && v.type() == op->result(0).type() && OwnedBuffer(v)) {
          op->SetAttr("oar.inplace", ctx.IntAttr(i));
          return;
        }
      }
    });
  }
};

}  // namespace

void RegisterInplacePass() {
  RegisterPass("inplace", "mark elementwise ops that may write their result over a dying operand (oar.inplace)",
               [](const PassOptions& o) {
                 CheckPassOptions("inplace", o, {});
                 return std::make_unique<InplacePass>();
               });
}

}  // namespace oar::passes
