#include <gtest/gtest.h>

#include <map>

#include "core/ir/builder.h"
#include "core/ir/dim_expr.h"
#include "core/ir/shape_infer.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"

namespace oar::ir {
namespace {

class DimExprTest : public ::testing::Test {
 protected:
  int64_t S(std::string_view name) { return ctx.Symbol(name); }
  std::string Text(int64_t d) { return DimText(ctx, d); }
  Type T(std::string_view text) { return ParseType(ctx, text); }
  std::string Error(std::string_view text) {
    try {
      ParseType(ctx, text);
    } catch (const oar::Error& e) {
      return e.what();
    }
    return "no error";
  }
  Value Data(Builder& b, int64_t index, Type t) {
    return b.Create1("builtin.data", {},
                     {b.Attr("name", ctx.StringAttr("x" + std::to_string(index))), b.Attr("index", ctx.IntAttr(index))},
                     std::span<const Type>(&t, 1));
  }
  IrContext ctx;
};

TEST_F(DimExprTest, SimplifiesAndUniques) {
  const int64_t b = S("B"), s = S("S"), t = S("T");
  EXPECT_EQ(DimMul(ctx, b, s), DimMul(ctx, s, b));
  EXPECT_EQ(Text(DimMul(ctx, s, b)), "B*S");
  EXPECT_EQ(DimSub(ctx, DimAdd(ctx, s, 1), 1), s);
  EXPECT_EQ(DimMul(ctx, s, 1), s);
  EXPECT_EQ(DimAdd(ctx, s, 0), s);
  EXPECT_EQ(DimMul(ctx, s, 0), 0);
  EXPECT_EQ(DimFloorDiv(ctx, DimMul(ctx, s, 2), 2), s);
  EXPECT_EQ(DimFloorDiv(ctx, DimMul(ctx, b, s), s), b);
  EXPECT_EQ(Text(DimFloorDiv(ctx, DimAdd(ctx, s, 3), 2)), "(S+1)/2+1");
  EXPECT_EQ(DimFloorDiv(ctx, DimFloorDiv(ctx, s, 2), 3), DimFloorDiv(ctx, s, 6));
  EXPECT_EQ(DimFloorDiv(ctx, 7, 2), 3);
  EXPECT_EQ(DimMin(ctx, s, s), s);
  EXPECT_EQ(DimMin(ctx, s, DimAdd(ctx, s, 1)), s);
  EXPECT_EQ(DimMax(ctx, s, DimAdd(ctx, s, 1)), DimAdd(ctx, s, 1));
  EXPECT_EQ(DimMin(ctx, s, t), DimMin(ctx, t, s));
  EXPECT_EQ(Text(DimMax(ctx, t, s)), "max(S,T)");
  EXPECT_EQ(DimBroadcast(ctx, s, 1), s);
  EXPECT_EQ(DimBroadcast(ctx, 1, s), s);
  EXPECT_EQ(DimBroadcast(ctx, s, s), s);
  EXPECT_EQ(DimBroadcast(ctx, s, 4), 4);
  EXPECT_EQ(Text(DimBroadcast(ctx, t, s)), "bcast(S,T)");
  EXPECT_EQ(DimBroadcast(ctx, DimBroadcast(ctx, s, t), s), DimBroadcast(ctx, s, t));
  EXPECT_THROW(DimBroadcast(ctx, 2, 3), oar::Error);
  EXPECT_THROW(DimFloorDiv(ctx, s, 0), oar::Error);
  EXPECT_THROW(DimExactDiv(ctx, 7, 2), oar::Error);
  EXPECT_THROW(DimSub(ctx, 2, 3), oar::Error);  // a negative static extent
  EXPECT_EQ(DimAdd(ctx, SymDim::kDynamic, s), SymDim::kDynamic);
  // A whole polynomial: (B+1)*(S-1) = B*S - B + S - 1.
  EXPECT_EQ(Text(DimMul(ctx, DimAdd(ctx, b, 1), DimSub(ctx, s, 1))), "B*S-B+S-1");
}

TEST_F(DimExprTest, EvaluatesAndSubstitutes) {
  const int64_t b = S("B"), s = S("S");
  const int64_t e = DimAdd(ctx, DimMul(ctx, b, s), DimFloorDiv(ctx, s, 2));
  std::map<int64_t, int64_t> v = {{b, 3}, {s, 5}};
  auto value = [&](int64_t x) -> std::optional<int64_t> {
    auto it = v.find(x);
    return it == v.end() ? std::nullopt : std::optional<int64_t>(it->second);
  };
  EXPECT_EQ(DimEvaluate(ctx, e, value), 17);
  EXPECT_EQ(DimEvaluate(ctx, DimBroadcast(ctx, b, s), value), std::nullopt);  // 3 against 5
  v.erase(s);
  EXPECT_EQ(DimEvaluate(ctx, e, value), std::nullopt);
  EXPECT_EQ(DimSymbols(ctx, e), (std::vector<int64_t>{std::min(b, s), std::max(b, s)}));
  // S := B: B*B + B/2.
  EXPECT_EQ(Text(DimSubstitute(ctx, e, [&](int64_t x) { return x == s ? b : x; })), "B*B+B/2");
  EXPECT_EQ(DimSubstitute(ctx, DimBroadcast(ctx, b, s), [&](int64_t x) { return x == s ? b : x; }), b);
}

TEST_F(DimExprTest, TextRoundTripsInCanonicalForm) {
  const char* canonical = "tensor<[B*S, S+1, (S+1)/2, min(A,B), bcast(S,T), 10-S, 2*B*S-1, S*(T/2)], f32>";
  // 10-S prints with the symbol first.
  const std::string printed = PrintType(ctx, T(canonical));
  EXPECT_EQ(printed, "tensor<[B*S, S+1, (S+1)/2, min(A,B), bcast(S,T), -S+10, 2*B*S-1, (T/2)*S], f32>");
  EXPECT_EQ(PrintType(ctx, T(printed)), printed);
  EXPECT_EQ(T(printed), T(canonical));
  // Another spelling of the same extents is the same type.
  EXPECT_EQ(T("tensor<[S * B, 1 + S, (S + 1) / 2, min(B, A), bcast(T, S), 10 - S, B*S*2 - 1, (T/2)*S], f32>"),
            T(canonical));
  // A fresh context reads the printed text back to the same text.
  IrContext other;
  EXPECT_EQ(PrintType(other, ParseType(other, printed)), printed);
  // Shape attributes take expressions too; a symbol may be named min when it is not called.
  EXPECT_EQ(PrintAttribute(ctx, ctx.ShapeAttr(T("tensor<[min*2], f32>").dims())), "shape<[2*min]>");
}

TEST_F(DimExprTest, ParseErrorsSayWhereAndWhat) {
  EXPECT_NE(Error("tensor<[S/0], f32>").find("1:10: error: symbolic extent: division of S by zero"), std::string::npos)
      << Error("tensor<[S/0], f32>");
  EXPECT_NE(Error("tensor<[3-5], f32>").find("extent -2 is negative"), std::string::npos) << Error("tensor<[3-5], f32>");
  EXPECT_NE(Error("tensor<[min(S], f32>").find("expected ','"), std::string::npos) << Error("tensor<[min(S], f32>");
  EXPECT_NE(Error("tensor<[S+], f32>").find("expected an extent"), std::string::npos) << Error("tensor<[S+], f32>");
  EXPECT_NE(Error("tensor<[S*?], f32>").find("expected an extent"), std::string::npos) << Error("tensor<[S*?], f32>");
  EXPECT_NE(Error("tensor<[(S], f32>").find("expected ')'"), std::string::npos) << Error("tensor<[(S], f32>");
  EXPECT_NE(Error("tensor<[bcast(2,3)], f32>").find("cannot be broadcast"), std::string::npos);
  EXPECT_NE(Error("tensor<[9223372036854775807*2*S], f32>").find("overflows"), std::string::npos);
  const std::string wide = "tensor<[(A+B+C+D+E+F+G+H)*(A+B+C+D+E+F+G+H)*(A+B+C+D+E+F+G+H)], f32>";
  EXPECT_NE(Error(wide).find("more than 64 terms"), std::string::npos) << Error(wide);
  std::string deep = "tensor<[" + std::string(500, '(') + "S" + std::string(500, ')') + "], f32>";
  EXPECT_NE(Error(deep).find("nesting deeper"), std::string::npos);
}

TEST_F(DimExprTest, SchemaRulesGiveExpressions) {
  Program p(ctx);
  Builder b(ctx, p.block());
  auto ints = [&](std::vector<int64_t> v) { return ctx.IntArrayAttr(v); };
  // A reshape [B, S, 64] -> [-1, 64] is [B*S, 64]; and back.
  Value x = Data(b, 0, T("tensor<[B, S, 64], f32>"));
  Value flat = b.Create1("op.view", {x}, {b.Attr("shape", ints({-1, 64}))});
  EXPECT_EQ(flat.type(), T("tensor<[B*S, 64], f32>"));
  // concat of S and 1 along the axis is S+1.
  Value one = Data(b, 1, T("tensor<[B, 1, 64], f32>"));
  Value cat = b.Create1("op.concat", {x, one}, {b.Attr("axis", ctx.IntAttr(1))});
  EXPECT_EQ(cat.type(), T("tensor<[B, S+1, 64], f32>"));
  // Pooling halves (floor).
  Value img = Data(b, 2, T("tensor<[N, 3, H, W], f32>"));
  Operation* pool = b.Create("op.max_pool2d", std::vector<Value>{img});
  EXPECT_EQ(pool->result(0).type(), T("tensor<[N, 3, H/2, W/2], f32>"));
  // A 3x3 convolution with stride 2 and padding 1: (H+1)/2.
  Value w = Data(b, 3, T("tensor<[8, 3, 3, 3], f32>"));
  Value conv = b.Create1("op.conv2d", {img, w},
                         {b.Attr("stride", ints({2, 2})), b.Attr("padding", ints({1, 1}))});
  EXPECT_EQ(conv.type(), T("tensor<[N, 8, (H+1)/2, (W+1)/2], f32>"));
  // A slice clamps: its extent is not a polynomial of S, so it stays unknown rather than a wrong 10.
  Value sl = b.Create1("op.slice", {x}, {b.Attr("dim", ctx.IntAttr(1)), b.Attr("start", ctx.IntAttr(0)),
                                         b.Attr("end", ctx.IntAttr(10)), b.Attr("step", ctx.IntAttr(1))});
  EXPECT_EQ(sl.type(), T("tensor<[B, ?, 64], f32>"));
  // Broadcasting two symbols.
  Value u = Data(b, 4, T("tensor<[T, 1], f32>"));
  Value v = Data(b, 5, T("tensor<[S, 64], f32>"));
  EXPECT_EQ(b.Create1("op.add", {u, v}).type(), T("tensor<[bcast(S,T), 64], f32>"));
  // matmul requires the inner extents equal: the constraint is reported.
  Value m1 = Data(b, 6, T("tensor<[M, K], f32>"));
  Value m2 = Data(b, 7, T("tensor<[J, N], f32>"));
  Value mm = b.Create1("op.matmul", {m1, m2});
  EXPECT_EQ(mm.type(), T("tensor<[M, N], f32>"));
  const std::vector<Type> types = {m1.type(), m2.type()};
  const SymbolicInference r = InferSymbolic(ctx, ops::SchemaByName("matmul"), types, mm.defining_op()->attributes());
  ASSERT_EQ(r.equal.size(), 1u);
  EXPECT_EQ(r.equal[0], std::make_pair(S("J"), S("K")));
  // A sum over a derived extent keeps the rest.
  Value sum = b.Create1("op.sum", {flat}, {b.Attr("axes", ints({1}))});
  EXPECT_EQ(sum.type(), T("tensor<[B*S], f32>"));
  EXPECT_NO_THROW(Verify(p));
}

TEST_F(DimExprTest, VerifierChecksDerivedExtents) {
  const char* ok =
      "builtin.module() ({\n"
      "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[B, S, 4], f32>\n"
      "  %a = op.view(%x) {shape = [-1, 4]} : (tensor<[B, S, 4], f32>) -> tensor<[B*S, 4], f32>\n"
      "  %b = op.view(%x) {shape = [-1, 4]} : (tensor<[B, S, 4], f32>) -> tensor<[?, 4], f32>\n"
      "  builtin.output(%a, %b) : (tensor<[B*S, 4], f32>, tensor<[?, 4], f32>) -> ()\n"
      "}) : () -> ()\n";
  auto p = ParseProgram(ctx, ok, "ok.oir");
  EXPECT_NO_THROW(Verify(*p));
  const char* bad =
      "builtin.module() ({\n"
      "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[B, S, 4], f32>\n"
      "  %a = op.view(%x) {shape = [-1, 4]} : (tensor<[B, S, 4], f32>) -> tensor<[S+B, 4], f32>\n"
      "  builtin.output(%a) : (tensor<[B+S, 4], f32>) -> ()\n"
      "}) : () -> ()\n";
  auto q = ParseProgram(ctx, bad, "bad.oir");
  try {
    Verify(*q);
    FAIL() << "a view of [B, S, 4] as [S+B, 4] verified";
  } catch (const oar::Error& e) {
    EXPECT_NE(std::string(e.what()).find("but the op's rule gives tensor<[B*S, 4], f32>"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oar::ir
