#include <gtest/gtest.h>

#include "core/ir/builder.h"
#include "core/ir/context.h"
#include "core/ir/dialect.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/ops/schema.h"

namespace oar::ir {
namespace {

class IrTest : public ::testing::Test {
 protected:
  Type F32(std::initializer_list<int64_t> dims) { return ctx.TensorType(DType::kFloat32, Dims(dims)); }
  Value Data(Builder& b, std::string_view name, int64_t index, Type t) {
    return b.Create1("builtin.data", {}, {b.Attr("name", ctx.StringAttr(name)), b.Attr("index", ctx.IntAttr(index))},
                     std::span<const Type>(&t, 1));
  }
  IrContext ctx;
};

TEST_F(IrTest, TypesAndAttributesAreUniqued) {
  EXPECT_EQ(F32({2, 3}), F32({2, 3}));
  EXPECT_FALSE(F32({2, 3}) == F32({3, 2}));
  EXPECT_EQ(ctx.TensorType(DType::kFloat32, {ctx.Symbol("B"), 8}), ctx.TensorType(DType::kFloat32, {ctx.Symbol("B"), 8}));
  EXPECT_FALSE(ctx.TensorType(DType::kFloat32, {ctx.Symbol("B")}) == ctx.TensorType(DType::kFloat32, {ctx.Symbol("T")}));
  EXPECT_EQ(ctx.IntArrayAttr(std::vector<int64_t>{1, 2}), ctx.IntArrayAttr(std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ctx.FloatAttr(1.5), ctx.FloatAttr(1.5));
  EXPECT_FALSE(ctx.FloatAttr(0.0) == ctx.FloatAttr(-0.0));
  EXPECT_FALSE(ctx.IntAttr(1) == ctx.FloatAttr(1.0));
  EXPECT_THROW(ctx.Symbol("1x"), Error);
}

TEST_F(IrTest, EveryOpSchemaIsAnOpDialectOp) {
  for (const ops::OpSchema& s : ops::AllSchemas()) {
    const OpInfo* info = ctx.FindOp("op." + std::string(s.name));
    ASSERT_NE(info, nullptr) << s.name;
    EXPECT_EQ(info->schema, &s);
    EXPECT_EQ(info->attrs.size(), s.attrs.size()) << s.name;
    EXPECT_EQ(info->num_results, static_cast<int>(s.outputs.size())) << s.name;
  }
  const Dialect* op = ctx.FindDialect("op");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->ops().size(), ops::AllSchemas().size());
}

TEST_F(IrTest, BuilderInfersResultTypesThroughTheSchemas) {
  Program p(ctx);
  Builder b(ctx, p.block());
  const int64_t batch = ctx.Symbol("B");
  Value x = Data(b, "x", 0, ctx.TensorType(DType::kFloat32, {batch, 8}));
  Value w = b.Create1("builtin.parameter", {}, {b.Attr("name", ctx.StringAttr("w"))}, std::vector<Type>{F32({8, 4})});
  Value y = b.Create1("op.matmul", {x, w});
  EXPECT_EQ(y.type(), ctx.TensorType(DType::kFloat32, {batch, 4}));
  Value s = b.Create1("op.sum", {y}, {b.Attr("axes", ctx.IntArrayAttr(std::vector<int64_t>{1}))});
  EXPECT_EQ(s.type(), ctx.TensorType(DType::kFloat32, {batch}));
  // Broadcasting two dynamic extents keeps them unknown; against 1 the other side wins.
  Value d1 = Data(b, "d1", 1, ctx.TensorType(DType::kFloat32, {SymDim::kDynamic, 4}));
  Value d2 = Data(b, "d2", 2, ctx.TensorType(DType::kFloat32, {SymDim::kDynamic, 1}));
  EXPECT_EQ(b.Create1("op.add", {d1, d2}).type(), ctx.TensorType(DType::kFloat32, {SymDim::kDynamic, 4}));
  EXPECT_EQ(b.Create1("op.add", {y, y}).type(), y.type());
  // Views pass symbols through.
  Value t = b.Create1("op.permute", {y}, {b.Attr("dims", ctx.IntArrayAttr(std::vector<int64_t>{1, 0}))});
  EXPECT_EQ(t.type(), ctx.TensorType(DType::kFloat32, {4, batch}));
  b.Create("builtin.output", std::vector<Value>{s, t});
  EXPECT_NO_THROW(Verify(p));
}

TEST_F(IrTest, BuilderRefusesBadOpsWithTheRuleBroken) {
  Program p(ctx);
  Builder b(ctx, p.block());
  Value x = Data(b, "x", 0, F32({2, 3}));
  Value y = Data(b, "y", 1, F32({4, 5}));
  try {
    b.Create1("op.matmul", {x, y});
    FAIL() << "matmul of [2, 3] and [4, 5] was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not chain"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.Create1("op.add", {x}), Error);                                        // operand count
  EXPECT_THROW(b.Create1("op.sum", {x}, {b.Attr("axes", ctx.IntAttr(1))}), Error);      // attribute kind
  EXPECT_THROW(b.Create1("op.sum", {x}, {b.Attr("axis", ctx.IntAttr(1))}), Error);      // unknown attribute
  EXPECT_THROW(b.Create1("op.nosuchop", {x}), Error);
}

TEST_F(IrTest, ReplaceAllUsesAndEraseKeepUseListsExact) {
  Program p(ctx);
  Builder b(ctx, p.block());
  Value x = Data(b, "x", 0, F32({4}));
  Value y = Data(b, "y", 1, F32({4}));
  Value a = b.Create1("op.add", {x, x});
  Value m = b.Create1("op.mul", {a, x});
  EXPECT_EQ(x.use_count(), 3u);
  x.ReplaceAllUsesWith(y);
  EXPECT_TRUE(x.use_empty());
  EXPECT_EQ(y.use_count(), 3u);
  EXPECT_EQ(m.defining_op()->operand(1), y);
  m.defining_op()->Erase();
  EXPECT_EQ(y.use_count(), 2u);
  EXPECT_TRUE(a.use_empty());
  EXPECT_EQ(p.block().size(), 3u);
}

TEST_F(IrTest, CloneCopiesRegionsAndRemapsValues) {
  Program p(ctx);
  Builder b(ctx, p.block());
  const Type cond_type = ctx.TensorType(DType::kBool, {});
  Value c = Data(b, "c", 0, cond_type);
  Value x = Data(b, "x", 1, F32({2}));
  const Type t = F32({2});
  Operation* if_op = b.Create("cf.if", std::vector<Value>{c}, {}, std::span<const Type>(&t, 1));
  for (uint32_t r = 0; r < 2; ++r) {
    Builder inner(ctx, if_op->region(r).AddBlock());
    Value v = inner.Create1(r == 0 ? "op.exp" : "op.neg", {x});
    inner.Create("cf.yield", std::vector<Value>{v});
  }
  b.Create("builtin.output", std::vector<Value>{if_op->result(0)});
  ASSERT_NO_THROW(Verify(p));
  std::unordered_map<Value, Value, ValueHash> mapping;
  Operation* copy = p.module()->Clone(mapping);
  Program q(ctx, copy);
  EXPECT_EQ(Print(p), Print(q));
  EXPECT_NO_THROW(Verify(q));
}

TEST_F(IrTest, VerifierNamesTheOpAndTheRule) {
  Program p(ctx);
  Builder b(ctx, p.block());
  Value x = Data(b, "x", 0, F32({2}));
  const Type wrong = F32({3});
  // A result type the schema disagrees with.
  b.Create("op.exp", std::vector<Value>{x}, {}, std::span<const Type>(&wrong, 1));
  try {
    Verify(p);
    FAIL() << "a wrong result type verified";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("op.exp"), std::string::npos) << msg;
    EXPECT_NE(msg.find("op 1 of a block of builtin.module"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor<[3], f32> but the op's rule gives tensor<[2], f32>"), std::string::npos) << msg;
  }
}

TEST_F(IrTest, VerifierRefusesUseBeforeDefinition) {
  Program p(ctx);
  Builder b(ctx, p.block());
  Value x = Data(b, "x", 0, F32({2}));
  Value e = b.Create1("op.exp", {x});
  Operation* neg = b.Create("op.neg", std::vector<Value>{e});
  neg->RemoveFromParent();
  p.block().Insert(e.defining_op(), neg);  // now neg uses exp's result before exp runs
  try {
    Verify(p);
    FAIL() << "use before definition verified";
  } catch (const Error& e2) {
    EXPECT_NE(std::string(e2.what()).find("SSA dominance"), std::string::npos) << e2.what();
  }
}

TEST_F(IrTest, VerifierChecksControlFlowRegions) {
  Program p(ctx);
  Builder b(ctx, p.block());
  Value c = Data(b, "c", 0, ctx.TensorType(DType::kBool, {}));
  Value x = Data(b, "x", 1, F32({2}));
  const Type t = F32({2});
  Operation* if_op = b.Create("cf.if", std::vector<Value>{c}, {}, std::span<const Type>(&t, 1));
  Builder then_b(ctx, if_op->region(0).AddBlock());
  then_b.Create("cf.yield", std::vector<Value>{x});
  Builder else_b(ctx, if_op->region(1).AddBlock());
  else_b.Create1("op.neg", {x});  // no terminator
  EXPECT_THROW(Verify(p), Error);
  else_b.Create("cf.yield", std::vector<Value>{c});  // wrong type
  try {
    Verify(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("else-region's yield"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oar::ir
