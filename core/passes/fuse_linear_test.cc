// fuse-linear: the DRR rules (fuse_linear.cc) against the same rewrite written by hand (FuseLinearByHand,
// below), on programs where the fusion must fire and where it must not. The numbers of fused programs are
// checked in core/jit/fuse_linear_run_test.cc (the interpreter lives there).
#include <gtest/gtest.h>

#include "core/base/error.h"
#include "core/ir/text.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"

namespace oar::passes {
namespace {

// ---- the hand-written form (compare AddFuseLinearPatterns; line counts in docs/design/pir.md) ------------
// Rooted at op.add (no activation) or at op.relu / op.tanh (the activation absorbed); the conditions are
// CanFuseLinear, shared with the DRR rules.
class FuseLinearByHand : public RewritePattern {
 public:
  FuseLinearByHand(std::string root, Device device)
      : RewritePattern(std::move(root), 1, "fuse_linear_by_hand"), device_(device) {}
  bool MatchAndRewrite(ir::Operation* op, PatternRewriter& rewriter) const override {
    int64_t act = 0;
    ir::Operation* add = op;
    if (op->name() != "op.add") {
      act = op->name() == "op.relu" ? 1 : 3;
      add = op->operand(0).defining_op();
      if (add == nullptr || add->name() != "op.add" || !op->operand(0).HasOneUse()) return false;
    } else if (op->result(0).HasOneUse()) {
      const std::string_view user = op->result(0).first_use()->owner()->name();
      if (user == "op.relu" || user == "op.tanh") return false;  // left to the rule rooted at the activation
    }
    for (uint32_t side = 0; side < 2; ++side) {
      const ir::Value product = add->operand(side), bias = add->operand(1 - side);
      ir::Operation* mm = product.defining_op();
      if (mm == nullptr || mm->name() != "op.matmul" || mm->num_operands() != 2) continue;
      if (!CanFuseLinear(mm->operand(0), mm->operand(1), bias, product, add->result(0), device_)) continue;
      const std::vector<ir::Value> operands = {mm->operand(0), mm->operand(1), bias};
      rewriter.ReplaceOp(op, rewriter.Create1("op.fused_linear", operands,
                                              {rewriter.Attr("activation", rewriter.context().IntAttr(act))}));
      return true;
    }
    return false;
  }

 private:
  Device device_;
};

constexpr std::string_view kHead = "builtin.module() ({\n";
constexpr std::string_view kTail = "}) : () -> ()\n";
std::string Module(std::string_view body) { return std::string(kHead) + std::string(body) + std::string(kTail); }

std::string ByDrr(ir::IrContext& ctx, std::string_view body, std::string_view device = "cpu:0") {
  auto p = ir::ParseProgram(ctx, Module(body), "test.oir");
  PassManager pm;
  pm.AddPipeline("fuse-linear{device=" + std::string(device) + "},dce");
  pm.Run(*p);
  return ir::Print(*p);
}

std::string ByHand(ir::IrContext& ctx, std::string_view body, std::string_view device = "cpu:0") {
  auto p = ir::ParseProgram(ctx, Module(body), "test.oir");
  PatternList hand;
  for (const char* root : {"op.add", "op.relu", "op.tanh"}) hand.push_back(std::make_unique<FuseLinearByHand>(root, Device(device)));
  EXPECT_TRUE(ApplyPatternsGreedily(*p, hand).converged);
  EraseDeadOps(*p);
  return ir::Print(*p);
}

int Count(const std::string& text, std::string_view what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const std::string kData =
    "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[4, 8], f32>\n"
    "  %w = builtin.data() {index = 1, name = \"w\"} : () -> tensor<[8, 16], f32>\n"
    "  %b = builtin.data() {index = 2, name = \"b\"} : () -> tensor<[16], f32>\n"
    "  %mm = op.matmul(%x, %w) : (tensor<[4, 8], f32>, tensor<[8, 16], f32>) -> tensor<[4, 16], f32>\n";
const std::string kT = "tensor<[4, 16], f32>";

struct Program {
  std::string what, body;
  int fused;             // op.fused_linear ops after the pass
  std::string expected;  // a line the result must hold (empty: none)
};

std::vector<Program> Programs() {
  const std::string add = "  %z = op.add(%mm, %b) : (" + kT + ", tensor<[16], f32>) -> " + kT + "\n";
  return {
      {"matmul + add", kData + add + "  builtin.output(%z) : (" + kT + ") -> ()\n", 1, "op.fused_linear(%0, %1, %2) : ("},
      {"matmul + add + relu",
       kData + add + "  %r = op.relu(%z) : (" + kT + ") -> " + kT + "\n  builtin.output(%r) : (" + kT + ") -> ()\n", 1,
       "{activation = 1}"},
      {"bias first, tanh",
       kData + "  %z = op.add(%b, %mm) : (tensor<[16], f32>, " + kT + ") -> " + kT + "\n  %t = op.tanh(%z) : (" + kT +
           ") -> " + kT + "\n  builtin.output(%t) : (" + kT + ") -> ()\n",
       1, "{activation = 3}"},
      {"3-D x",
       "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[2, 3, 8], f64>\n"
       "  %w = builtin.data() {index = 1, name = \"w\"} : () -> tensor<[8, 5], f64>\n"
       "  %b = builtin.data() {index = 2, name = \"b\"} : () -> tensor<[5], f64>\n"
       "  %mm = op.matmul(%x, %w) : (tensor<[2, 3, 8], f64>, tensor<[8, 5], f64>) -> tensor<[2, 3, 5], f64>\n"
       "  %z = op.add(%mm, %b) : (tensor<[2, 3, 5], f64>, tensor<[5], f64>) -> tensor<[2, 3, 5], f64>\n"
       "  %r = op.relu(%z) : (tensor<[2, 3, 5], f64>) -> tensor<[2, 3, 5], f64>\n"
       "  builtin.output(%r) : (tensor<[2, 3, 5], f64>) -> ()\n",
       1, "(tensor<[2, 3, 8], f64>, tensor<[8, 5], f64>, tensor<[5], f64>) -> tensor<[2, 3, 5], f64>"},
      {"the product has two uses",
       kData + add + "  builtin.output(%z, %mm) : (" + kT + ", " + kT + ") -> ()\n", 0, ""},
      {"the sum has two uses: the add fuses, the relu stays",
       kData + add + "  %r = op.relu(%z) : (" + kT + ") -> " + kT + "\n  builtin.output(%r, %z) : (" + kT + ", " + kT +
           ") -> ()\n",
       1, "op.relu("},
      {"a bias of shape [4, 16] is not per column",
       kData + "  %c = builtin.data() {index = 3, name = \"c\"} : () -> " + kT + "\n  %z = op.add(%mm, %c) : (" + kT +
           ", " + kT + ") -> " + kT + "\n  builtin.output(%z) : (" + kT + ") -> ()\n",
       0, ""},
      {"a bias of shape [1] broadcasts but is not one per column",
       kData + "  %c = builtin.data() {index = 3, name = \"c\"} : () -> tensor<[1], f32>\n  %z = op.add(%mm, %c) : (" +
           kT + ", tensor<[1], f32>) -> " + kT + "\n  builtin.output(%z) : (" + kT + ") -> ()\n",
       0, ""},
      {"a vector x",
       "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[8], f32>\n"
       "  %w = builtin.data() {index = 1, name = \"w\"} : () -> tensor<[8, 16], f32>\n"
       "  %b = builtin.data() {index = 2, name = \"b\"} : () -> tensor<[16], f32>\n"
       "  %mm = op.matmul(%x, %w) : (tensor<[8], f32>, tensor<[8, 16], f32>) -> tensor<[16], f32>\n"
       "  %z = op.add(%mm, %b) : (tensor<[16], f32>, tensor<[16], f32>) -> tensor<[16], f32>\n"
       "  builtin.output(%z) : (tensor<[16], f32>) -> ()\n",
       0, ""},
      {"float16 has no fused_linear kernel",
       "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[4, 8], f16>\n"
       "  %w = builtin.data() {index = 1, name = \"w\"} : () -> tensor<[8, 16], f16>\n"
       "  %b = builtin.data() {index = 2, name = \"b\"} : () -> tensor<[16], f16>\n"
       "  %mm = op.matmul(%x, %w) : (tensor<[4, 8], f16>, tensor<[8, 16], f16>) -> tensor<[4, 16], f16>\n"
       "  %z = op.add(%mm, %b) : (tensor<[4, 16], f16>, tensor<[16], f16>) -> tensor<[4, 16], f16>\n"
       "  builtin.output(%z) : (tensor<[4, 16], f16>) -> ()\n",
       0, ""},
  };
}

TEST(FuseLinear, DrrRulesAndTheHandWrittenPatternGiveIdenticalIr) {
  for (const Program& p : Programs()) {
    SCOPED_TRACE(p.what);
    ir::IrContext ctx;
    const std::string drr = ByDrr(ctx, p.body);
    EXPECT_EQ(drr, ByHand(ctx, p.body));
    EXPECT_EQ(Count(drr, "op.fused_linear("), p.fused) << drr;
    if (p.fused > 0) {
      EXPECT_EQ(Count(drr, "op.matmul("), 0) << drr;
      EXPECT_NE(drr.find(p.expected), std::string::npos) << drr;
    } else {
      EXPECT_EQ(drr, ir::Print(*ir::ParseProgram(ctx, Module(p.body), "test.oir")));  // untouched
    }
  }
}

TEST(FuseLinear, NeedsAKnownDevice) {
  ir::IrContext ctx;
  const std::string body = Programs()[0].body;
  EXPECT_THROW(ByDrr(ctx, body, "nosuch:0"), Error);
  PassManager pm;
  try {
    pm.AddPipeline("fuse-linear");
    ADD_FAILURE() << "fuse-linear without a device was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fuse-linear{device=NAME}"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oar::passes
