#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "core/ir/builder.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/ops/schema.h"

namespace oar::ir {
namespace {

std::string RoundTrip(IrContext& ctx, std::string_view text) {
  auto p = ParseProgram(ctx, text, "test.oir");
  Verify(*p);
  return Print(*p);
}

std::string ErrorOf(IrContext& ctx, std::string_view text) {
  try {
    auto p = ParseProgram(ctx, text, "bad.oir");
    Verify(*p);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(IrText, PrintedProgramsParseBackExactly) {
  IrContext ctx;
  const std::string text =
      "builtin.module() ({\n"
      "  %0 = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[B, 8], f32>\n"
      "  %1 = builtin.parameter() {name = \"w\\n\\\"q\\\"\"} : () -> tensor<[8, 4], f32>\n"
      "  %2 = op.matmul(%0, %1) : (tensor<[B, 8], f32>, tensor<[8, 4], f32>) -> tensor<[B, 4], f32>\n"
      "  %3 = builtin.constant() {value = [1.5, -0.0, inf, 1e-30]} : () -> tensor<[4], f32>\n"
      "  %4 = op.cast(%2) {dtype = bf16} : (tensor<[B, 4], f32>) -> tensor<[B, 4], bf16>\n"
      "  %5, %6 = op.topk(%2) {k = 2} : (tensor<[B, 4], f32>) -> "
      "(tensor<[B, 2], f32>, tensor<[B, 2], i64>)\n"
      "  %7 = builtin.data() {index = 1, name = \"c\"} : () -> tensor<[], i1>\n"
      "  %8 = cf.if(%7) ({\n"
      "    %9 = op.exp(%5) : (tensor<[B, 2], f32>) -> tensor<[B, 2], f32>\n"
      "    cf.yield(%9) : (tensor<[B, 2], f32>) -> ()\n"
      "  }, {\n"
      "    cf.yield(%5) : (tensor<[B, 2], f32>) -> ()\n"
      "  }) : (tensor<[], i1>) -> tensor<[B, 2], f32>\n"
      "  %10 = cf.while(%3) ({\n"
      "  ^bb(%11: tensor<[4], f32>):\n"
      "    %12 = op.sum(%11) : (tensor<[4], f32>) -> tensor<[], f32>\n"
      "    %13 = op.lt(%12, %12) : (tensor<[], f32>, tensor<[], f32>) -> tensor<[], i1>\n"
      "    cf.condition(%13, %11) : (tensor<[], i1>, tensor<[4], f32>) -> ()\n"
      "  }, {\n"
      "  ^bb(%14: tensor<[4], f32>):\n"
      "    %15 = op.add(%14, %14) : (tensor<[4], f32>, tensor<[4], f32>) -> tensor<[4], f32>\n"
      "    cf.yield(%15) : (tensor<[4], f32>) -> ()\n"
      "  }) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
      "  %16 = builtin.combine(%8, %10) : (tensor<[B, 2], f32>, tensor<[4], f32>) -> "
      "vec<tensor<[B, 2], f32>, tensor<[4], f32>>\n"
      "  builtin.output(%4, %6, %16) {names = [\"y\", \"idx\", \"pair\"]} : (tensor<[B, 4], bf16>, tensor<[B, 2], i64>, "
      "vec<tensor<[B, 2], f32>, tensor<[4], f32>>) -> ()\n"
      "}) : () -> ()\n";
  EXPECT_EQ(RoundTrip(ctx, text), text);
}

TEST(IrText, ParserAcceptsAnyValueNamesAndComments) {
  IrContext ctx;
  const std::string in =
      "// a comment\n"
      "builtin.module() ({\n"
      "  %x = builtin.data() {name = \"x\", index = 0} : () -> tensor<[?, 3], f32>  // trailing\n"
      "  %y = op.relu(%x) : (tensor<[?, 3], f32>) -> tensor<[?, 3], f32>\n"
      "  builtin.output(%y) : (tensor<[?, 3], f32>) -> ()\n"
      "}) : () -> ()\n";
  const std::string printed = RoundTrip(ctx, in);
  EXPECT_NE(printed.find("%1 = op.relu(%0)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("{index = 0, name = \"x\"}"), std::string::npos) << printed;  // sorted
  EXPECT_EQ(RoundTrip(ctx, printed), printed);
}

TEST(IrText, EveryOpRoundTrips) {
  // One op per schema on [2, 3, 4, 4] operands with its default attributes, except where the defaults do
  // not fit those shapes; every op must build, verify and round-trip.
  IrContext ctx;
  Program p(ctx);
  Builder b(ctx, p.block());
  auto ints = [&](std::vector<int64_t> v) { return ctx.IntArrayAttr(v); };
  const std::map<std::string, std::vector<NamedAttribute>> attrs = {
      {"view", {b.Attr("shape", ints({-1}))}},
      {"permute", {b.Attr("dims", ints({3, 2, 1, 0}))}},
      {"expand", {b.Attr("shape", ints({2, 2, 3, 4, 4}))}},
      {"layer_norm", {b.Attr("axis", ctx.IntAttr(3))}},
      {"pad", {b.Attr("pads", ints({0, 0, 0, 0, 1, 1, 2, 2}))}},
  };
  const std::map<std::pair<std::string, std::string>, Dims> shapes = {
      {{"layer_norm", "weight"}, {4}},
      {{"layer_norm", "bias"}, {4}},
      {{"index_select", "index"}, {3}},
      {{"fused_linear", "w"}, {4, 5}},
      {{"fused_linear", "bias"}, {5}},
      {{"fused_rotary", "cos"}, {4, 2}},
      {{"fused_rotary", "sin"}, {4, 2}},
      {{"fused_rms_scale", "mean_square"}, {2, 3, 4, 1}},
      {{"fused_rms_scale", "eps"}, {}},
      {{"fused_rms_scale", "weight"}, {4}},
      {{"fused_tanh_grad", "one"}, {}},
      {{"fused_sigmoid_grad", "one"}, {}},
      {{"batch_norm_train", "weight"}, {3}},
      {{"batch_norm_train", "bias"}, {3}},
      {{"batch_norm_train_grad", "weight"}, {3}},
      {{"fused_masked_softmax", "scale"}, {}},
      {{"fused_masked_softmax", "fill"}, {}},
      {{"fused_masked_softmax_grad", "zero"}, {}},
      {{"fused_masked_softmax_grad", "scale"}, {}},
      {{"fused_rotary_grad", "cos"}, {4, 2}},
      {{"fused_rotary_grad", "sin"}, {4, 2}}};
  // fused_adam's nine scalars are 0-d.
  auto shape_of = [&](const std::string& op, std::string_view input, size_t i) -> std::optional<Dims> {
    if (op == "fused_adam" && i >= 4) return Dims{};
    auto it = shapes.find({op, std::string(input)});
    return it != shapes.end() ? std::optional<Dims>(it->second) : std::nullopt;
  };
  int index = 0;
  for (const ops::OpSchema& s : ops::AllSchemas()) {
    const std::string name(s.name);
    std::vector<Value> operands;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      DType t = s.Accepts(DType::kFloat32) || s.dtypes == 0 ? DType::kFloat32 : DType::kBool;
      if (s.inputs[i] == "index" || s.inputs[i] == "target") t = DType::kInt64;
      if (s.inputs[i] == "cond" || s.inputs[i] == "mask") t = DType::kBool;
      const std::optional<Dims> shape = shape_of(name, s.inputs[i], i);
      const Type type = ctx.TensorType(t, shape ? *shape : Dims{2, 3, 4, 4});
      operands.push_back(b.Create1("builtin.data", {},
                                   {b.Attr("name", ctx.StringAttr("in" + std::to_string(index))),
                                    b.Attr("index", ctx.IntAttr(index))},
                                   std::span<const Type>(&type, 1)));
      ++index;
    }
    auto a = attrs.find(name);
    EXPECT_NO_THROW(b.Create("op." + name, operands, a != attrs.end() ? a->second : std::vector<NamedAttribute>{}))
        << name;
  }
  const std::string text = Print(p);
  EXPECT_EQ(RoundTrip(ctx, text), text);
  // Every op is in the program.
  for (const ops::OpSchema& s : ops::AllSchemas()) {
    EXPECT_NE(text.find("op." + std::string(s.name) + "("), std::string::npos) << s.name;
  }
}

TEST(IrText, ErrorsNameFileLineColumnAndWhatWasExpected) {
  IrContext ctx;
  EXPECT_EQ(ErrorOf(ctx, "builtin.module() ({\n  %0 = op.relu(%9) : () -> ()\n}) : () -> ()\n"),
            "bad.oir:2:16: error: use of undefined value %9");
  EXPECT_EQ(ErrorOf(ctx, "builtin.module() ({\n  %0 = op.frob() : () -> ()\n}) : () -> ()\n").substr(0, 60),
            "bad.oir:2:8: error: unknown op 'op.frob'; dialect 'op' has: ");
  EXPECT_EQ(ErrorOf(ctx, "builtin.module() ({\n  %0 = builtin.data() {name = \"x\", index = 0} : () -> tensor<[2], q32>\n}) : () -> ()"),
            "bad.oir:2:67: error: expected a dtype (f32, f64, f16, bf16, i8, u8, i32, i64, i1), got 'q32'");
  EXPECT_EQ(ErrorOf(ctx, "builtin.module() ({\n"), "bad.oir:2:1: error: unterminated region: expected '}'");
  const std::string not_module = ErrorOf(ctx, "builtin.output() : () -> ()");
  EXPECT_EQ(not_module, "bad.oir:1:1: error: expected a builtin.module at the top level");
  const std::string bad_attr = ErrorOf(
      ctx, "builtin.module() ({\n  %0 = builtin.data() {name = 3, index = 0} : () -> tensor<[2], f32>\n}) : () -> ()");
  EXPECT_EQ(bad_attr, "bad.oir:2:3: error: builtin.data: attribute 'name' must be string, got int");
  const std::string bad_type = ErrorOf(ctx,
      "builtin.module() ({\n"
      "  %0 = builtin.data() {name = \"x\", index = 0} : () -> tensor<[2], f32>\n"
      "  %1 = op.exp(%0) : (tensor<[2], f32>) -> tensor<[5], f32>\n"
      "}) : () -> ()");
  EXPECT_EQ(bad_type, "verifier: op.exp at 3:3 (op 1 of a block of builtin.module): result 0 has type "
                      "tensor<[5], f32> but the op's rule gives tensor<[2], f32>");
}

TEST(IrText, HostileInputGivesErrorsNotCrashes) {
  IrContext ctx;
  EXPECT_NE(ErrorOf(ctx, std::string(100000, '[')), "no error");
  EXPECT_NE(ErrorOf(ctx, "builtin.module() (" + std::string(100000, '{')), "no error");
  std::string deep_type = "builtin.module() ({\n %0 = builtin.data() {name = \"x\", index = 0} : () -> ";
  for (int i = 0; i < 100000; ++i) deep_type += "vec<";
  deep_type += "\n}) : () -> ()";
  EXPECT_NE(ErrorOf(ctx, deep_type).find("nesting deeper than"), std::string::npos);
  std::string deep_attr = "builtin.module() ({\n %0 = builtin.data() {name = ";
  deep_attr += std::string(100000, '[') + "} : () -> tensor<[2], f32>\n}) : () -> ()";
  const std::string msg = ErrorOf(ctx, deep_attr);
  EXPECT_NE(msg.find("nesting deeper than"), std::string::npos);
  EXPECT_LT(msg.size(), 200u);
  EXPECT_NE(ErrorOf(ctx, "builtin.module() ({\n %0 = builtin.data() {name = \"x\", index = 99999999999999999999}"
                         " : () -> tensor<[2], f32>\n}) : () -> ()"),
            "no error");
  EXPECT_NE(ErrorOf(ctx, std::string("builtin.module() ({\n %0 = builtin.data() {name = \"\xff\xfe") + "\n"), "no error");
}

TEST(IrText, TypesParseAndPrint) {
  IrContext ctx;
  for (const char* t : {"tensor<[], f32>", "tensor<[2, ?, B, seq_len], bf16>", "i64", "vec<>", "vec<tensor<[1], i1>, f64>"}) {
    EXPECT_EQ(PrintType(ctx, ParseType(ctx, t)), t);
  }
  EXPECT_THROW(ParseType(ctx, "tensor<[-3], f32>"), Error);
  EXPECT_THROW(ParseType(ctx, "tensor<[1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9], f32>"), Error);
}

}  // namespace
}  // namespace oar::ir
