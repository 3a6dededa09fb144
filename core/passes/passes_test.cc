#include <gtest/gtest.h>

#include <cstdlib>

#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/passes/drr.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"

namespace oar::passes {
namespace {

constexpr std::string_view kHead = "builtin.module() ({\n";
constexpr std::string_view kTail = "}) : () -> ()\n";

std::string Module(std::string_view body) { return std::string(kHead) + std::string(body) + std::string(kTail); }

std::string RunPipeline(ir::IrContext& ctx, std::string_view pipeline, std::string_view body) {
  auto p = ir::ParseProgram(ctx, Module(body), "test.oir");
  PassManager pm;
  pm.AddPipeline(pipeline);
  pm.Run(*p);
  return ir::Print(*p);
}

TEST(Passes, DceErasesDeadChainsButKeepsEffects) {
  ir::IrContext ctx;
  const std::string out = RunPipeline(ctx, "dce",
      "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[4], f32>\n"
      "  %a = op.exp(%x) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "  %b = op.neg(%a) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "  %c = op.relu(%x) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "  builtin.output(%c) : (tensor<[4], f32>) -> ()\n");
  EXPECT_EQ(out, Module("  %0 = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[4], f32>\n"
                        "  %1 = op.relu(%0) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
                        "  builtin.output(%1) : (tensor<[4], f32>) -> ()\n"));
}

TEST(Passes, CseMergesIdenticalOpsOnlyWhereTheyAreVisible) {
  ir::IrContext ctx;
  const std::string out = RunPipeline(ctx, "cse",
      "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[4], f32>\n"
      "  %c = builtin.data() {index = 1, name = \"c\"} : () -> tensor<[], i1>\n"
      "  %a = op.exp(%x) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "  %b = op.exp(%x) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "  %s1 = op.sum(%a) {axes = [0], keepdim = false} : (tensor<[4], f32>) -> tensor<[], f32>\n"
      "  %s2 = op.sum(%b) {axes = [0], keepdim = true} : (tensor<[4], f32>) -> tensor<[1], f32>\n"
      "  %r = cf.if(%c) ({\n"
      "    %e = op.exp(%x) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "    %n = op.neg(%e) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "    cf.yield(%n) : (tensor<[4], f32>) -> ()\n"
      "  }, {\n"
      "    %n2 = op.neg(%x) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "    cf.yield(%n2) : (tensor<[4], f32>) -> ()\n"
      "  }) : (tensor<[], i1>) -> tensor<[4], f32>\n"
      "  %n3 = op.neg(%a) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "  builtin.output(%s1, %s2, %r, %n3) : (tensor<[], f32>, tensor<[1], f32>, tensor<[4], f32>, tensor<[4], f32>) -> ()\n");
  // The second exp and the exp inside the then-region merge with the first; the sums differ in an
  // attribute; the neg after the if must not reuse a neg from inside a region.
  EXPECT_EQ(out, Module(
      "  %0 = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[4], f32>\n"
      "  %1 = builtin.data() {index = 1, name = \"c\"} : () -> tensor<[], i1>\n"
      "  %2 = op.exp(%0) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "  %3 = op.sum(%2) {axes = [0]} : (tensor<[4], f32>) -> tensor<[], f32>\n"
      "  %4 = op.sum(%2) {axes = [0], keepdim = true} : (tensor<[4], f32>) -> tensor<[1], f32>\n"
      "  %5 = cf.if(%1) ({\n"
      "    %6 = op.neg(%2) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "    cf.yield(%6) : (tensor<[4], f32>) -> ()\n"
      "  }, {\n"
      "    %7 = op.neg(%0) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "    cf.yield(%7) : (tensor<[4], f32>) -> ()\n"
      "  }) : (tensor<[], i1>) -> tensor<[4], f32>\n"
      "  %8 = op.neg(%2) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "  builtin.output(%3, %4, %5, %8) : (tensor<[], f32>, tensor<[1], f32>, tensor<[4], f32>, tensor<[4], f32>) -> ()\n"));
}

TEST(Passes, CanonicalizeAppliesIdentitiesAndChains) {
  ir::IrContext ctx;
  const std::string out = RunPipeline(ctx, "canonicalize",
      "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[2, 3], f32>\n"
      "  %h = builtin.data() {index = 1, name = \"h\"} : () -> tensor<[2, 3], f16>\n"
      "  %one = op.fill() {dtype = f32, shape = [], value = 1.0} : () -> tensor<[], f32>\n"
      "  %zero = builtin.constant() {value = [0.0]} : () -> tensor<[2, 3], f32>\n"
      "  %a = op.mul(%one, %x) : (tensor<[], f32>, tensor<[2, 3], f32>) -> tensor<[2, 3], f32>\n"
      "  %b = op.add(%a, %zero) : (tensor<[2, 3], f32>, tensor<[2, 3], f32>) -> tensor<[2, 3], f32>\n"
      "  %p = op.permute(%b) {dims = [1, 0]} : (tensor<[2, 3], f32>) -> tensor<[3, 2], f32>\n"
      "  %q = op.permute(%p) {dims = [1, 0]} : (tensor<[3, 2], f32>) -> tensor<[2, 3], f32>\n"
      "  %n = op.neg(%q) : (tensor<[2, 3], f32>) -> tensor<[2, 3], f32>\n"
      "  %m = op.neg(%n) : (tensor<[2, 3], f32>) -> tensor<[2, 3], f32>\n"
      "  %w = op.cast(%h) {dtype = f32} : (tensor<[2, 3], f16>) -> tensor<[2, 3], f32>\n"
      "  %d = op.cast(%w) {dtype = f64} : (tensor<[2, 3], f32>) -> tensor<[2, 3], f64>\n"
      "  %l = op.cast(%x) {dtype = f16} : (tensor<[2, 3], f32>) -> tensor<[2, 3], f16>\n"
      "  %k = op.cast(%l) {dtype = f32} : (tensor<[2, 3], f16>) -> tensor<[2, 3], f32>\n"
      "  builtin.output(%m, %d, %k) : (tensor<[2, 3], f32>, tensor<[2, 3], f64>, tensor<[2, 3], f32>) -> ()\n");
  // 1*x, +0, the double permute and the double neg vanish; f16->f32->f64 becomes one cast; f32->f16->f32
  // loses precision and stays.
  EXPECT_EQ(out, Module(
      "  %0 = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[2, 3], f32>\n"
      "  %1 = builtin.data() {index = 1, name = \"h\"} : () -> tensor<[2, 3], f16>\n"
      "  %2 = op.cast(%1) {dtype = f64} : (tensor<[2, 3], f16>) -> tensor<[2, 3], f64>\n"
      "  %3 = op.cast(%0) {dtype = f16} : (tensor<[2, 3], f32>) -> tensor<[2, 3], f16>\n"
      "  %4 = op.cast(%3) : (tensor<[2, 3], f16>) -> tensor<[2, 3], f32>\n"
      "  builtin.output(%0, %2, %4) : (tensor<[2, 3], f32>, tensor<[2, 3], f64>, tensor<[2, 3], f32>) -> ()\n"));
}

TEST(Passes, CanonicalizeKeepsBroadcastingIdentities) {
  // x + 0 where 0 broadcasts x to a larger shape is not x.
  ir::IrContext ctx;
  const std::string body =
      "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[3], f32>\n"
      "  %zero = builtin.constant() {value = [0.0]} : () -> tensor<[2, 3], f32>\n"
      "  %b = op.add(%x, %zero) : (tensor<[3], f32>, tensor<[2, 3], f32>) -> tensor<[2, 3], f32>\n"
      "  builtin.output(%b) : (tensor<[2, 3], f32>) -> ()\n";
  const std::string out = RunPipeline(ctx, "canonicalize", body);
  EXPECT_NE(out.find("op.add"), std::string::npos) << out;
}

// The cast-of-widening-cast rewrite written by hand, to compare with its DRR form in transforms.cc.
class CastOfWideningCastByHand : public RewritePattern {
 public:
  CastOfWideningCastByHand() : RewritePattern("op.cast", 2, "cast_of_widening_cast_by_hand") {}
  bool MatchAndRewrite(ir::Operation* op, PatternRewriter& rewriter) const override {
    ir::Operation* inner = op->operand(0).defining_op();
    if (inner == nullptr || inner->name() != "op.cast") return false;
    const ir::Value x = inner->operand(0);
    const DType from = x.type().dtype(), mid = inner->result(0).type().dtype();
    const bool widening = from == mid || (from == DType::kFloat16 && (mid == DType::kFloat32 || mid == DType::kFloat64)) ||
                          (from == DType::kFloat32 && mid == DType::kFloat64);
    if (!widening) return false;
    rewriter.ReplaceOp(op, rewriter.Create1("op.cast", std::vector<ir::Value>{x}, {rewriter.Attr("dtype", op->attr("dtype"))}));
    return true;
  }
};

TEST(Passes, HandWrittenPatternAndDrrRuleAgree) {
  const std::string body =
      "  %h = builtin.data() {index = 0, name = \"h\"} : () -> tensor<[5], f16>\n"
      "  %w = op.cast(%h) {dtype = f32} : (tensor<[5], f16>) -> tensor<[5], f32>\n"
      "  %d = op.cast(%w) {dtype = f64} : (tensor<[5], f32>) -> tensor<[5], f64>\n"
      "  builtin.output(%d) : (tensor<[5], f64>) -> ()\n";
  ir::IrContext ctx;
  auto by_hand = ir::ParseProgram(ctx, Module(body));
  PatternList hand;
  hand.push_back(std::make_unique<CastOfWideningCastByHand>());
  const GreedyResult r = ApplyPatternsGreedily(*by_hand, hand);
  EXPECT_TRUE(r.converged);
  EXPECT_EQ(r.rewrites, 1);
  EXPECT_EQ(ir::Print(*by_hand), RunPipeline(ctx, "canonicalize", body));
}

TEST(Passes, DrrRulesAreCheckedWhenBuilt) {
  drr::Rule unbound("bad");
  unbound.Source().Op("op.neg", {"x"}, {"out"});
  unbound.Result().Op("op.exp", {"nope"}, {"out"});
  EXPECT_THROW(unbound.Build(), Error);
  drr::Rule missing("bad2");
  missing.Source().Op("op.neg", {"x"}, {"out"});
  EXPECT_THROW(missing.Build(), Error);
  drr::Rule attr("bad3");
  attr.Source().Op("op.neg", {"x"}, {"out"});
  attr.Result().Op("op.sum", {"x"}, {"out"}, {{"axes", drr::FromMatch{"unbound"}}});
  EXPECT_THROW(attr.Build(), Error);
}

TEST(Passes, GreedyDriverStopsAtTheIterationCap) {
  // A pattern that always rewrites (swap the operands of a commutative op) never converges.
  class Swap : public RewritePattern {
   public:
    Swap() : RewritePattern("op.add", 1, "swap") {}
    bool MatchAndRewrite(ir::Operation* op, PatternRewriter& rewriter) const override {
      rewriter.ReplaceOp(op, rewriter.Create1("op.add", std::vector<ir::Value>{op->operand(1), op->operand(0)}));
      return true;
    }
  };
  ir::IrContext ctx;
  auto p = ir::ParseProgram(ctx, Module(
      "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[2], f32>\n"
      "  %y = builtin.data() {index = 1, name = \"y\"} : () -> tensor<[2], f32>\n"
      "  %a = op.add(%x, %y) : (tensor<[2], f32>, tensor<[2], f32>) -> tensor<[2], f32>\n"
      "  builtin.output(%a) : (tensor<[2], f32>) -> ()\n"));
  PatternList patterns;
  patterns.push_back(std::make_unique<Swap>());
  GreedyConfig config;
  config.max_iterations = 3;
  config.max_rewrites = 50;
  const GreedyResult r = ApplyPatternsGreedily(*p, patterns, config);
  EXPECT_FALSE(r.converged);
  EXPECT_EQ(r.rewrites, 50);
  EXPECT_NO_THROW(ir::Verify(*p));
}

TEST(Passes, PipelineErrorsNameThePassAndPosition) {
  PassManager pm;
  try {
    pm.AddPipeline("dce, cse,frobnicate");
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("position 9"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown pass 'frobnicate'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("canonicalize, constant-fold, cse, dce, decompose, fuse-act-grad, fuse-adam, fuse-linear, "
                       "fuse-log-softmax, fuse-masked-softmax, fuse-masked-softmax-grad, fuse-rms-scale, fuse-rotary, "
                       "fuse-rotary-grad, inplace, kernel-select"),
              std::string::npos)
        << msg;
  }
  EXPECT_THROW(PassManager().AddPipeline("dce,,cse"), Error);
  PassManager empty;
  empty.AddPipeline("  ");
  EXPECT_EQ(empty.size(), 0u);
}

TEST(Passes, PassManagerPrintsTimesAndBlamesTheBreakingPass) {
  class Breaker : public Pass {
   public:
    std::string_view name() const override { return "breaker"; }
    void Run(ir::Program& program) override {
      // Drop the output op's operand: a null operand does not verify.
      program.block().back()->SetOperand(0, ir::Value());
    }
  };
  ir::IrContext ctx;
  auto p = ir::ParseProgram(ctx, Module(
      "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[2], f32>\n"
      "  %e = op.exp(%x) : (tensor<[2], f32>) -> tensor<[2], f32>\n"
      "  builtin.output(%e) : (tensor<[2], f32>) -> ()\n"));
  PassManager pm;
  std::vector<std::string> printed;
  pm.options().print_after_all = true;
  pm.options().print = [&](std::string_view header, std::string_view) { printed.emplace_back(header); };
  pm.AddPipeline("cse,dce");
  pm.Run(*p);
  ASSERT_EQ(printed.size(), 2u);
  EXPECT_EQ(printed[0], "// -----// IR after cse //----- //");
  EXPECT_EQ(pm.timings().size(), 2u);
  EXPECT_NE(pm.TimingReport().find("total"), std::string::npos);

  PassManager bad;
  bad.AddPass(std::make_unique<Breaker>());
  try {
    bad.Run(*p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass 'breaker' produced a program that does not verify"), std::string::npos)
        << e.what();
  }
}

TEST(Passes, IrPrintEnvironmentIsParsedStrictly) {
  setenv("OAR_IR_PRINT", "cse,nosuch", 1);
  PassManager pm;
  EXPECT_THROW(pm.ConfigureFromEnvironment(), Error);
  setenv("OAR_IR_PRINT", "cse", 1);
  PassManager ok;
  ok.ConfigureFromEnvironment();
  EXPECT_TRUE(ok.options().print_after.contains("cse"));
  unsetenv("OAR_IR_PRINT");
}

}  // namespace
}  // namespace oar::passes
