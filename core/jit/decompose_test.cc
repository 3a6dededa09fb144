// The decompositions of composite ops (core/ops/decompose.h): the `decompose` pass (core/passes) against
// the kernels on randomised shapes (run by the reference interpreter), the same rules run eagerly,
// symbolic extents, and gradients through the decomposed primitives against the composite ops' own VJPs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/ir/builder.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/jit/grad.h"
#include "core/jit/interpreter.h"
#include "core/ops/decompose.h"
#include "core/ops/ops.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"

namespace oar::passes {
namespace {

const Device kCpu("cpu:0");

// One call of a composite op: its inputs and attribute values.
struct Case {
  ops::Op op;
  std::vector<Tensor> inputs;
  ops::AttrValues attrs;
  std::string what;
};

// A program: data inputs (static shapes of `inputs`), the op, its results as outputs.
std::unique_ptr<ir::Program> BuildProgram(ir::IrContext& ctx, const Case& c) {
  auto p = std::make_unique<ir::Program>(ctx);
  ir::Builder b(ctx, p->block());
  std::vector<ir::Value> in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const ir::Type t = ctx.TensorType(c.inputs[i].dtype(), c.inputs[i].shape());
    in.push_back(b.Create1("builtin.data", {},
                           {b.Attr("name", ctx.StringAttr("in" + std::to_string(i))),
                            b.Attr("index", ctx.IntAttr(static_cast<int64_t>(i)))},
                           std::span<const ir::Type>(&t, 1)));
  }
  const ops::OpSchema& s = ops::Schema(c.op);
  ir::Operation* op = b.Create("op." + std::string(s.name), in, ir::SchemaAttributes(ctx, s, c.attrs));
  const std::vector<ir::Value> results = op->results();
  b.Create("builtin.output", results);
  return p;
}

// No op left that has a decomposition of its own; returns how many op.* ops remain.
int CheckOnlyPrimitives(ir::Program& p) {
  int n = 0;
  p.module()->Walk([&](ir::Operation* op) {
    const ops::OpSchema* s = op->info().schema;
    if (s == nullptr) return;
    ++n;
    EXPECT_EQ(s->decompose, nullptr) << op->name() << " is left after decompose";
  });
  return n;
}

void ExpectClose(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = cast(got.to(kCpu), DType::kFloat64).contiguous().ToVector<double>();
  const std::vector<double> w = cast(want.to(kCpu), DType::kFloat64).contiguous().ToVector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " element " << i;
  }
}

double Tolerance(DType t) { return t == DType::kFloat64 ? 1e-12 : t == DType::kFloat32 ? 2e-6 : 1e-2; }

// Random cases of every op with a decomposition (the table says which), in the given dtype.
std::vector<Case> RandomCases(std::mt19937& rng, Generator& gen, DType dtype, int count) {
  std::vector<Case> cases;
  auto extent = [&] { return std::uniform_int_distribution<int64_t>(1, 6)(rng); };
  for (const ops::OpSchema& s : ops::AllSchemas()) {
    if (s.decompose == nullptr || !s.Accepts(dtype)) continue;
    for (int k = 0; k < count; ++k) {
      const int rank = std::uniform_int_distribution<int>(1, 4)(rng);
      Dims shape;
      for (int d = 0; d < rank; ++d) shape.push_back(extent());
      const double scale = k % 3 == 0 ? 30.0 : 2.0;  // large logits exercise the max subtraction
      Tensor x = randn(shape, gen, 0, scale, dtype, kCpu);
      Case c{s.op, {x}, {}, fmt::format("{} {}{} case {}", s.name, DTypeName(dtype), shape.ToString(), k)};
      if (s.op == ops::Op::kLayerNorm) {
        const int64_t axis = std::uniform_int_distribution<int64_t>(0, rank - 1)(rng);
        const Dims norm(std::span<const int64_t>(shape.data() + axis, static_cast<size_t>(rank - axis)));
        c.inputs.push_back(randn(norm, gen, 1, 0.5, dtype, kCpu));
        c.inputs.push_back(randn(norm, gen, 0, 0.5, dtype, kCpu));
        c.attrs = {axis, 1e-5};
      } else if (s.op == ops::Op::kFusedLinear) {
        if (rank == 1) c.inputs[0] = randn({2, shape[0]}, gen, 0, 2.0, dtype, kCpu);
        const int64_t k = c.inputs[0].dim(-1), n = extent();
        c.inputs.push_back(randn({k, n}, gen, 0, 0.5, dtype, kCpu));
        c.inputs.push_back(randn({n}, gen, 0, 0.5, dtype, kCpu));
        c.attrs = {int64_t{k % 4}};  // none, relu, gelu and tanh in turn
      } else if (s.op == ops::Op::kReluGrad) {  // x is the generated tensor: the gradient goes first
        c.inputs.insert(c.inputs.begin(), randn(shape, gen, 0, 1.0, dtype, kCpu));
      } else if (s.op == ops::Op::kBatchNormTrain || s.op == ops::Op::kBatchNormTrainGrad) {
        // x [N, C] or [N, C, H, W] and weight (and bias) [C]; batch_norm_train_grad's gradient goes first
        const Dims xs = rank <= 2 ? Dims{extent(), extent()} : Dims{extent(), extent(), extent(), extent()};
        c.inputs = {randn(xs, gen, 0, scale, dtype, kCpu), randn({xs[1]}, gen, 1, 0.5, dtype, kCpu)};
        const Tensor third = randn(s.op == ops::Op::kBatchNormTrain ? Dims{xs[1]} : xs, gen, 0, 0.5, dtype, kCpu);
        if (s.op == ops::Op::kBatchNormTrain) {
          c.inputs.push_back(third);
        } else {
          c.inputs.insert(c.inputs.begin(), third);
        }
        c.attrs = {1e-5};
        c.what = fmt::format("{} {}{} case {}", s.name, DTypeName(dtype), xs.ToString(), k);
      } else {
        EXPECT_TRUE(s.op == ops::Op::kSoftmax || s.op == ops::Op::kLogSoftmax) << s.name << ": add its inputs here";
        c.attrs = {std::uniform_int_distribution<int64_t>(-rank, rank - 1)(rng)};
      }
      if (!c.attrs.empty() && std::holds_alternative<int64_t>(c.attrs[0])) {
        c.what += fmt::format(" attrs[0]={}", std::get<int64_t>(c.attrs[0]));
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

TEST(Decompose, EveryDecompositionMatchesItsKernelOnRandomShapes) {
  std::mt19937 rng(15);
  Generator gen(15);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    for (const Case& c : RandomCases(rng, gen, dtype, 12)) {
      SCOPED_TRACE(c.what);
      ir::IrContext ctx;
      auto original = BuildProgram(ctx, c);
      auto decomposed = BuildProgram(ctx, c);
      PassManager pm;
      pm.AddPipeline("decompose");
      pm.Run(*decomposed);  // verifies after the pass
      EXPECT_GT(CheckOnlyPrimitives(*decomposed), 1);
      const std::vector<Tensor> want = jit::Interpret(*original, c.inputs, kCpu);
      const std::vector<Tensor> got = jit::Interpret(*decomposed, c.inputs, kCpu);
      ASSERT_EQ(got.size(), want.size());
      // 16-bit outputs are rounded once from float32 in both; a 1-ulp difference is allowed.
      for (size_t i = 0; i < got.size(); ++i) ExpectClose(got[i], want[i], Tolerance(want[i].dtype()), c.what);
      // The same rule, eagerly.
      const std::vector<Tensor> eager = ops::RunDecomposition(c.op, c.inputs, c.attrs);
      for (size_t i = 0; i < eager.size(); ++i) ExpectClose(eager[i], want[i], Tolerance(want[i].dtype()), c.what);
    }
  }
}

TEST(Decompose, GradientsThroughThePrimitivesMatchTheCompositeVjp) {
  std::mt19937 rng(7);
  Generator gen(7);
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    for (const Case& c : RandomCases(rng, gen, dtype, 4)) {
      if (ops::Schema(c.op).vjp == nullptr) continue;  // batch_norm_train_grad: not differentiated again
      SCOPED_TRACE(c.what);
      ir::IrContext ctx;
      auto original = BuildProgram(ctx, c);
      auto decomposed = BuildProgram(ctx, c);
      DecomposeCompositeOps(*decomposed);
      std::vector<int> wrt;
      for (size_t i = 0; i < c.inputs.size(); ++i) wrt.push_back(static_cast<int>(i));
      // d(sum y)/dx (for softmax identically 0; the eager check below weights the sum).
      auto gw = jit::Grad(ctx, *original, 0, wrt, c.inputs, kCpu);
      auto gd = jit::Grad(ctx, *decomposed, 0, wrt, c.inputs, kCpu);
      const std::vector<Tensor> want = jit::Interpret(*gw, c.inputs, kCpu);
      const std::vector<Tensor> got = jit::Interpret(*gd, c.inputs, kCpu);
      ASSERT_EQ(got.size(), want.size());
      const double tol = dtype == DType::kFloat64 ? 1e-9 : 1e-4;
      for (size_t i = 0; i < got.size(); ++i) ExpectClose(got[i], want[i], tol, c.what + " output " + std::to_string(i));
      // Eagerly with autograd: d(sum(y * r))/dx through the primitives' VJPs against the op's own VJP.
      std::vector<Tensor> a, b;
      for (const Tensor& t : c.inputs) {
        a.push_back(t.detach().clone().set_requires_grad(true));
        b.push_back(t.detach().clone().set_requires_grad(true));
      }
      const Tensor y_kernel = ops::Run(c.op, a, c.attrs)[0];
      const Tensor r = randn(y_kernel.shape(), gen, 0, 1, dtype, kCpu);
      sum(y_kernel * r).backward();
      sum(ops::RunDecomposition(c.op, b, c.attrs)[0] * r).backward();
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].grad().defined()) {  // relu_grad's x: no gradient through the mask either way
          EXPECT_FALSE(b[i].grad().defined()) << c.what << " input " << i;
          continue;
        }
        ExpectClose(b[i].grad(), a[i].grad(), tol, c.what + " eager grad");
      }
    }
  }
}

constexpr std::string_view kSymbolic = R"(builtin.module() ({
  %x = builtin.data() {name = "x", index = 0} : () -> tensor<[B, T, 8], f32>
  %w = builtin.data() {name = "w", index = 1} : () -> tensor<[8], f32>
  %b = builtin.data() {name = "b", index = 2} : () -> tensor<[8], f32>
  %y, %m, %r = op.layer_norm(%x, %w, %b) {axis = 2, eps = 1e-05} : (tensor<[B, T, 8], f32>, tensor<[8], f32>, tensor<[8], f32>) -> (tensor<[B, T, 8], f32>, tensor<[B, T, 1], f32>, tensor<[B, T, 1], f32>)
  %s = op.softmax(%y) {axis = 1} : (tensor<[B, T, 8], f32>) -> tensor<[B, T, 8], f32>
  %l = op.log_softmax(%s) {axis = -1} : (tensor<[B, T, 8], f32>) -> tensor<[B, T, 8], f32>
  builtin.output(%l, %m, %r) : (tensor<[B, T, 8], f32>, tensor<[B, T, 1], f32>, tensor<[B, T, 1], f32>) -> ()
}) : () -> ()
)";

TEST(Decompose, SymbolicExtentsKeepTheirTypesAndRunAtAnySize) {
  ir::IrContext ctx;
  auto original = ir::ParseProgram(ctx, kSymbolic, "symbolic.oir");
  auto decomposed = ir::ParseProgram(ctx, kSymbolic, "symbolic.oir");
  EXPECT_EQ(DecomposeCompositeOps(*decomposed), 3);
  ir::Verify(*decomposed);
  CheckOnlyPrimitives(*decomposed);
  Generator gen(3);
  for (auto [bsz, t] : {std::pair<int64_t, int64_t>{1, 1}, {2, 5}, {3, 7}}) {
    const std::vector<Tensor> in = {randn({bsz, t, 8}, gen), randn({8}, gen), randn({8}, gen)};
    const std::vector<Tensor> want = jit::Interpret(*original, in, kCpu);
    const std::vector<Tensor> got = jit::Interpret(*decomposed, in, kCpu);
    for (size_t i = 0; i < want.size(); ++i) ExpectClose(got[i], want[i], 2e-6, fmt::format("B={} T={}", bsz, t));
  }
}

TEST(Decompose, InsideRegionsAndOnlyTheOpDialect) {
  ir::IrContext ctx;
  auto p = ir::ParseProgram(ctx, R"(builtin.module() ({
  %x = builtin.data() {name = "x", index = 0} : () -> tensor<[2, 3], f32>
  %c = builtin.data() {name = "c", index = 1} : () -> tensor<[], i1>
  %r = cf.if(%c) ({
    %s = op.softmax(%x) {axis = -1} : (tensor<[2, 3], f32>) -> tensor<[2, 3], f32>
    cf.yield(%s) : (tensor<[2, 3], f32>) -> ()
  }, {
    %k = kernel.softmax(%x) {axis = -1, device = device<"cpu:0">, format = "plain"} : (tensor<[2, 3], f32>) -> tensor<[2, 3], f32>
    cf.yield(%k) : (tensor<[2, 3], f32>) -> ()
  }) : (tensor<[], i1>) -> tensor<[2, 3], f32>
  builtin.output(%r) : (tensor<[2, 3], f32>) -> ()
}) : () -> ()
)", "regions.oir");
  EXPECT_EQ(DecomposeCompositeOps(*p), 1);  // the kernel-bound softmax stays bound
  ir::Verify(*p);
  const std::string text = ir::Print(*p);
  EXPECT_EQ(text.find("op.softmax"), std::string::npos) << text;
  EXPECT_NE(text.find("kernel.softmax"), std::string::npos) << text;
  EXPECT_NE(text.find("op.max"), std::string::npos) << text;
}

TEST(Decompose, EagerDecompositionRejectsPrimitivesAndBadInputs) {
  const Tensor x = ones({2, 3});
  try {
    ops::RunDecomposition(ops::Op::kExp, {&x, 1});
    FAIL() << "exp has no decomposition";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exp: has no decomposition"), std::string::npos) << e.what();
  }
  try {
    ops::RunDecomposition(ops::Op::kSoftmax, {&x, 1}, {int64_t{5}});
    FAIL() << "axis 5 of a 2-D tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax"), std::string::npos) << e.what();
  }
  try {
    ops::RunDecomposition(ops::Op::kSoftmax, {&x, 1}, {1.5});
    FAIL() << "a float axis";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attribute 'axis' has the wrong type"), std::string::npos) << e.what();
  }
}

TEST(Decompose, IsARegisteredPass) {
  bool found = false;
  for (const PassInfo& p : RegisteredPasses()) found = found || p.name == "decompose";
  EXPECT_TRUE(found);
  EXPECT_THROW(CreatePass("decompose", {{"ops", "softmax"}}), Error);
}

}  // namespace
}  // namespace oar::passes
