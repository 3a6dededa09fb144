// CINN: fusion groups on captured eager code, generated kernels against the loop-IR interpreter (the
// oracle) and against eager, on every built-in device, for odd and symbolic extents.
#include "core/compiler/compiler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <unistd.h>

#include "core/autograd/autograd.h"
#include "core/base/env.h"
#include "core/compiler/codegen.h"
#include "core/compiler/group.h"
#include "core/compiler/kernel.h"
#include "core/compiler/loop_interpreter.h"
#include "core/compiler/test_patterns.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/jit/capture.h"
#include "core/jit/interpreter.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/passes/pass.h"
#include "core/runtime/compiler.h"
#include "core/runtime/runtime.h"
#include "core/scheduler/executor.h"

namespace oar::compiler {
namespace {

const Device kCpu("cpu:0");
const Device kDevices[] = {Device("cpu:0"), Device("kunlun_sim:0"), Device("ascend_sim:0")};

using namespace patterns;  // NOLINT(build/namespaces): the shared test patterns

class CinnTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { RegisterCinn(); }
};

size_t CountOps(const ir::Program& p, std::string_view name) {
  size_t n = 0;
  for (ir::Operation* op : p.block()) n += op->name() == name;
  return n;
}

void ExpectClose(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to(kCpu).ToVector<float>(), e = want.to(kCpu).ToVector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], e[i], tol * (1 + std::fabs(e[i]))) << what << " at element " << i;
  }
}

TEST_F(CinnTest, EachPatternBecomesOneGroupOfItsTemplate) {
  for (const Case& c : kCases) {
    ir::IrContext ctx;
    Generator g(1);
    Tensor w = randn({16}, g);
    auto program = CaptureBody(ctx, c.body, 16, &w);
    const FusionReport r = Fuse(*program);
    ir::Verify(*program->module());
    EXPECT_EQ(r.groups, 1u) << c.name << "\n" << ir::Print(*program);
    EXPECT_EQ(CountOps(*program, "cinn.group"), 1u) << c.name;
    for (ir::Operation* op : program->block()) {  // nothing fusible is left outside
      if (op->name() == "cinn.group") {
        EXPECT_EQ(op->attr("template").AsString(), GroupTemplateName(c.kind)) << c.name;
        const std::optional<GroupAnalysis> a = Analyze(BodyView(*op), nullptr);
        ASSERT_TRUE(a.has_value()) << c.name;
        EXPECT_EQ(a->passes, c.passes) << c.name;
      } else {
        EXPECT_TRUE(op->name().starts_with("builtin.")) << c.name << ": " << op->name() << " left outside\n"
                                                        << ir::Print(*program);
      }
    }
    // The text form parses back (the cinn dialect is in every new context) to the same text.
    ir::IrContext ctx2;
    auto parsed = ir::ParseProgram(ctx2, ir::Print(*program));
    EXPECT_EQ(ir::Print(*parsed), ir::Print(*program)) << c.name;
  }
}

// Fused programs give eager's results on every device, for odd extents and several batch sizes; the batch
// is symbolic, so every batch size runs the kernel compiled for the first.
TEST_F(CinnTest, FusedProgramsMatchEagerOnEveryDeviceAndShape) {
  for (const Case& c : kCases) {
    for (int64_t h : {1, 7, 64, 301}) {
      ir::IrContext ctx;
      Generator g(static_cast<uint64_t>(h));
      Tensor w = randn({h}, g);
      auto program = CaptureBody(ctx, c.body, h, &w);
      Fuse(*program);
      for (const Device& d : kDevices) {
        const uint64_t before = Stats().kernels_compiled;
        for (int64_t b : {1, 2, 5}) {
          const Tensor x = randn({b, 3, h}, g);
          const std::vector<Tensor> in = {x.to(d)};
          const Tensor want = c.body(x, w);
          const std::vector<Tensor> got = jit::Interpret(*program, in, d);
          ExpectClose(got[0], want, 2e-5, fmt::format("{} h={} b={} on {}", c.name, h, b, d.str()));
        }
        EXPECT_LE(Stats().kernels_compiled - before, 1u) << c.name << " recompiled for another batch on " << d.str();
      }
    }
  }
}

// The last cinn.group of `program` (null when there is none).
ir::Operation* LastGroup(ir::Program& program) {
  ir::Operation* group = nullptr;
  for (ir::Operation* op : program.block()) {
    if (op->name() == "cinn.group") group = op;
  }
  return group;
}

// The group's operands (its operand order) for a pattern of kCases: x where a builtin.data defines it, else w.
std::vector<Tensor> GroupOperands(const ir::Operation& group, const Tensor& x, const Tensor& w) {
  std::vector<Tensor> operands;
  for (uint32_t i = 0; i < group.num_operands(); ++i) {
    operands.push_back(group.operand(i).defining_op()->name() == "builtin.data" ? x : w);
  }
  return operands;
}

// The oracle: the lowered kernel run by the loop interpreter on host copies of `operands`, over `domain`,
// into outputs shaped like `like`.
std::vector<Tensor> Interpreted(const LoweredGroup& lg, const std::vector<Tensor>& operands,
                                const std::vector<Tensor>& like, const Dims& domain) {
  std::vector<Tensor> host;
  std::vector<HostBuffer> hb;
  for (size_t k = 0; k < lg.buffer_values.size(); ++k) {
    host.push_back(k < lg.num_inputs ? operands[lg.buffer_values[k].index()].contiguous()
                                     : zeros(like[k - lg.num_inputs].shape(), like[k - lg.num_inputs].dtype()));
    hb.push_back({host.back().data_ptr(), host.back().numel()});
  }
  std::vector<Dims> shapes;
  for (const Tensor& t : host) shapes.push_back(t.shape());
  InterpretKernel(lg.kernel, hb, EvaluateParams(lg, domain, shapes));
  return std::vector<Tensor>(host.begin() + static_cast<std::ptrdiff_t>(lg.num_inputs), host.end());
}

// Generated C kernels against the loop-IR interpreter on the same inputs: randomised extents.
TEST_F(CinnTest, GeneratedKernelsMatchTheLoopInterpreter) {
  if (runtime::CompilerLanguages(kCpu).empty()) GTEST_SKIP() << "cpu has no usable C compiler here";
  Generator g(7);
  for (const Case& c : kCases) {
    ir::IrContext ctx;
    const int64_t h = 1 + static_cast<int64_t>(g.NextU64() % 200);
    Tensor w = randn({h}, g);
    auto program = CaptureBody(ctx, c.body, h, &w);
    Fuse(*program);
    ir::Operation* group = LastGroup(*program);
    ASSERT_NE(group, nullptr);
    const GroupPlan plan = PlanGroup(*group, kCpu);
    ASSERT_EQ(plan.language, "c");
    std::shared_ptr<const scheduler::CompiledOp> compiled = CompileGroupOp(*group, kCpu);
    for (int trial = 0; trial < 3; ++trial) {
      const int64_t b = 1 + static_cast<int64_t>(g.NextU64() % 9);
      const Tensor x = randn({b, 3, h}, g);
      const std::vector<Tensor> operands = GroupOperands(*group, x, w);
      const std::vector<Tensor> got = compiled->Run(operands);
      // The oracle: the same lowered kernel, interpreted on host buffers with the same parameters.
      const std::vector<Tensor> want = Interpreted(plan.lowered, operands, got, Dims{b, 3, h});
      for (size_t k = 0; k < got.size(); ++k) {
        ExpectClose(got[k], want[k], 1e-5, fmt::format("{} b={} h={} output {}", c.name, b, h, k));
      }
    }
  }
}

// Adjacent domain dimensions that every value indexes alike are one kernel dimension (lower.cc, Collapse):
// the per-row index arithmetic is paid per collapsed row. x: [B, 3, H], w: [H].
TEST_F(CinnTest, DimensionsIndexedAlikeAreOneKernelDimension) {
  struct Want {
    const char* name;
    std::vector<std::pair<int, int>> extents;  // each kernel dimension's domain dimensions [first, end)
  };
  const Want wants[] = {
      {"silu_plain", {{0, 3}}},                  // x only: one dimension of B * 3 * H
      {"silu", {{0, 2}, {2, 3}}},                // w runs along H alone: [B * 3, H]
      {"rms_norm", {{0, 2}, {2, 3}}},            // a row reduction: rows [B * 3], the reduced H
      {"column_sum", {{0, 1}, {1, 2}, {2, 3}}},  // column reductions keep their dimensions
  };
  for (const Want& want : wants) {
    const Case* c = nullptr;
    for (const Case& k : kCases) {
      if (std::string(k.name) == want.name) c = &k;
    }
    ASSERT_NE(c, nullptr) << want.name;
    ir::IrContext ctx;
    Generator g(3);
    Tensor w = randn({16}, g);
    auto program = CaptureBody(ctx, c->body, 16, &w);
    Fuse(*program);
    ir::Operation* group = nullptr;
    for (ir::Operation* op : program->block()) {
      if (op->name() == "cinn.group") group = op;
    }
    ASSERT_NE(group, nullptr) << want.name;
    const LoweredGroup lg = PlanGroup(*group, kCpu).lowered;
    std::vector<std::pair<int, int>> got;
    for (const IntParam& p : lg.params) {
      if (p.kind == IntParam::kExtent) got.emplace_back(p.dim, p.end);
    }
    EXPECT_EQ(got, want.extents) << want.name << "\n" << PrintKernel(lg.kernel);
    // The parameters of a run: the collapsed extents are the products.
    std::vector<Dims> shapes;
    for (size_t b = 0; b < lg.buffer_values.size(); ++b) {
      Dims d = lg.buffer_values[b].type().dims();
      for (int64_t& e : d) e = e < 0 ? 5 : e;  // the symbolic batch, at 5
      shapes.push_back(d);
    }
    const std::vector<int64_t> params = EvaluateParams(lg, Dims{5, 3, 16}, shapes);
    for (size_t i = 0; i < got.size(); ++i) {
      int64_t product = 1;
      for (int d = got[i].first; d < got[i].second; ++d)
        product *= std::vector<int64_t>{5, 3, 16}[static_cast<size_t>(d)];
      EXPECT_EQ(params[i], product) << want.name << " kernel dimension " << i;
    }
  }
}

// Distance in units in the last place between two floats (the bit patterns on one ordered line); 0 for
// two NaNs, a large number for NaN against a number.
int64_t UlpDistance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto line = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  return std::llabs(line(a) - line(b));
}

// Inputs over the whole float range: zeros, denormals, the edges of each function's range, +-FLT_MAX,
// infinities and NaN, a geometric sweep from 1e-40 to 1e38 of both signs, and a dense grid over [-20, 20].
std::vector<float> WideRangeInputs() {
  std::vector<float> v = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-40f, -1e-40f, 1.17549435e-38f, 0.5f, 1.0f, -1.0f,
                          -0.99999994f, -1.0000001f, 0.625f, -0.625f, 9.0f, -9.0f, 88.72f, 88.7228f, 88.7229f,
                          89.0f, -87.33f, -103.9f, -104.0f, -110.0f, 3.4028235e38f, -3.4028235e38f,
                          INFINITY, -INFINITY, NAN};
  for (int e = -40; e <= 38; ++e) {
    for (const float m : {1.0f, 2.5f, 7.25f}) {
      const float x = m * std::pow(10.0f, static_cast<float>(e));
      if (std::isfinite(x)) v.insert(v.end(), {x, -x});
    }
  }
  for (float x = -20.0f; x <= 20.0f; x += 0.0173f) v.push_back(x);
  // erf's edges (1, 3.92) and sin/cos: floats next to multiples of pi/2, the switch to the large-argument
  // reduction (2^28 pi/2, bit pattern 0x4dc90fdb), and large integers.
  for (const float x : {3.91f, 3.92f, 3.93f, 1.5707963f, 3.1415927f, 4.712389f, 6.2831855f, 1e4f * 3.1415927f,
                        4.2165e8f, 4.2166e8f, 16777216.0f, 1.6777216e7f * 3.0f, 1e20f, 6.5e31f, 1.7e38f}) {
    v.insert(v.end(), {x, -x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)});
  }
  for (uint32_t bits = 0x4dc90fdbu - 8; bits <= 0x4dc90fdbu + 8; ++bits) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    v.push_back(x);
  }
  return v;
}

// The C prelude's float32 math (codegen.cc: oar_expf, oar_logf, oar_log1pf, oar_tanhf, oar_erff, oar_sinf,
// oar_cosf; sigmoid through oar_expf) in generated kernels, over the whole float range: against the loop interpreter (double
// precision rounded to float) within each function's documented bound, and against eager on every
// device within that bound plus eager's own (its float32 exp within 2 ulp, tanh within 4).
TEST_F(CinnTest, GeneratedMathMatchesEagerOverEveryRange) {
  if (runtime::CompilerLanguages(kCpu).empty()) GTEST_SKIP() << "cpu has no usable C compiler here";
  const std::vector<float> xs = WideRangeInputs();
  const int64_t n = static_cast<int64_t>(xs.size());
  struct Fn {
    const char* name;
    Tensor (*f)(const Tensor&);
    int64_t ulp;  // vs the interpreter
    int64_t eager_ulp;
  };
  const Fn fns[] = {{"exp", [](const Tensor& x) { return exp(x); }, 1, 3},
                    {"log", [](const Tensor& x) { return log(x); }, 1, 2},
                    {"log1p", [](const Tensor& x) { return log1p(x); }, 2, 3},
                    {"tanh", [](const Tensor& x) { return tanh(x); }, 2, 6},
                    {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, 4, 6},
                    {"erf", [](const Tensor& x) { return erf(x); }, 2, 3},
                    {"sin", [](const Tensor& x) { return sin(x); }, 1, 2},
                    {"cos", [](const Tensor& x) { return cos(x); }, 1, 2}};
  const Tensor x = FromVector<float>(xs, Dims{n});
  for (const Fn& fn : fns) {
    // f(x) * 1: two computing ops, one elementwise group; the product is exact.
    ir::IrContext ctx;
    const std::vector<jit::InputSpec> specs = {{"x", DType::kFloat32, {jit::DimSpec::Static(n)}}};
    jit::Captured c = jit::Capture(
        ctx, [&](std::span<const Tensor> in) { return std::vector<Tensor>{fn.f(in[0]) * 1.0}; }, specs, {}, kCpu);
    Fuse(*c.program);
    ir::Operation* group = nullptr;
    for (ir::Operation* op : c.program->block()) {
      if (op->name() == "cinn.group") group = op;
    }
    ASSERT_NE(group, nullptr) << fn.name << "\n" << ir::Print(*c.program);
    // The oracle: the group's loop IR interpreted on host buffers.
    const LoweredGroup lg = PlanGroup(*group, kCpu).lowered;
    ASSERT_EQ(lg.num_inputs, 1u) << fn.name;
    Tensor in_copy = x.contiguous().clone(), oracle = zeros({n});
    const std::vector<HostBuffer> hb = {{in_copy.data_ptr(), n}, {oracle.data_ptr(), n}};
    const std::vector<int64_t> params = {n};
    ASSERT_EQ(lg.params.size(), 1u) << fn.name;
    InterpretKernel(lg.kernel, hb, params);
    const std::vector<float> want = oracle.ToVector<float>();
    for (const Device& d : kDevices) {
      const std::vector<Tensor> in = {x.to(d)};
      const std::vector<float> got = jit::Interpret(*c.program, in, d)[0].to(kCpu).ToVector<float>();
      const std::vector<float> eager = fn.f(x.to(d)).to(kCpu).ToVector<float>();
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        const std::string at = fmt::format("{}({:a}) on {}: generated {:a}, interpreter {:a}, eager {:a}", fn.name,
                                           xs[k], d.str(), got[k], want[k], eager[k]);
        ASSERT_LE(UlpDistance(got[k], want[k]), fn.ulp) << at;
        ASSERT_LE(UlpDistance(got[k], eager[k]), fn.eager_ulp) << at;
        if (want[k] == 0.0f) {
          ASSERT_EQ(std::signbit(got[k]), std::signbit(want[k])) << at << ": the sign of zero";
        }
      }
    }
  }
}

// A matmul (opaque) between elementwise chains: one group on each side, no cycle, eager's results.
TEST_F(CinnTest, OpaqueOpsSplitGroupsWithoutCycles) {
  ir::IrContext ctx;
  Generator g(3);
  Tensor w = randn({8}, g);
  Tensor m = randn({8, 8}, g);
  const Body body = [&](const Tensor& x, const Tensor& wt) {
    const Tensor a = x * sigmoid(x) + wt;        // group 1
    const Tensor b = matmul(a, m);               // opaque
    return exp(b - a) * 0.25 + a;                // group 2 reads a (group 1's output) and b
  };
  auto program = CaptureBody(ctx, body, 8, &w);
  const FusionReport r = Fuse(*program);
  ir::Verify(*program->module());
  EXPECT_EQ(r.groups, 2u) << ir::Print(*program);
  const Tensor x = randn({4, 3, 8}, g);
  const std::vector<Tensor> in = {x};
  ExpectClose(jit::Interpret(*program, in, kCpu)[0], body(x, w), 2e-5, "opaque split");
}

// Horizontal fusion: two row reductions of the same input that do not depend on each other (a row's
// max-shifted values and its weighted sum of squares) become one kernel with two outputs; a column sum of
// the same input reduces other dimensions, so it stays a kernel of its own. Eager's results.
TEST_F(CinnTest, SiblingGroupsReadingOneInputBecomeOneKernel) {
  ir::IrContext ctx;
  Generator g(9);
  Tensor w = randn({24}, g);
  const auto body = [&](const Tensor& x) {
    return std::vector<Tensor>{x - amax(x, {-1}, true), sum(x * x * w, {-1}, true), sum(x * w, {0, 1})};
  };
  const std::vector<jit::InputSpec> specs = {
      {"x", DType::kFloat32, {jit::DimSpec::Symbol("B"), jit::DimSpec::Static(3), jit::DimSpec::Static(24)}}};
  jit::CaptureOptions o;
  o.state = {{"w", &w}};
  jit::Captured c = jit::Capture(ctx, [&](std::span<const Tensor> in) { return body(in[0]); }, specs, {}, kCpu, o);
  const FusionReport r = Fuse(*c.program);
  ir::Verify(*c.program->module());
  EXPECT_EQ(r.groups, 2u) << ir::Print(*c.program);
  EXPECT_EQ(r.row_reduce, 1u) << ir::Print(*c.program);
  EXPECT_EQ(r.column_reduce, 1u) << ir::Print(*c.program);
  for (int64_t b : {1, 4}) {
    const Tensor x = randn({b, 3, 24}, g);
    const std::vector<Tensor> in = {x};
    const std::vector<Tensor> got = jit::Interpret(*c.program, in, kCpu), want = body(x);
    for (size_t i = 0; i < want.size(); ++i) ExpectClose(got[i], want[i], 2e-5, fmt::format("output {} b={}", i, b));
  }
}

// Matrix-vector products (matmul with one row: a decoding step's projections and attention at batch 1) are
// reductions CINN runs: b = permute(w) swapping w's last two dims is a row reduce along w's rows, a plain b
// a column reduce down its columns; gate and up projections of one vector fuse horizontally with their
// silu(gate) * up epilogue. No matmul is left; eager's results on every device, for odd extents and a
// symbolic batch and key length, with one kernel per group whatever the batch or length.
TEST_F(CinnTest, MatrixVectorProductsAreReductions) {
  const auto count_matmuls = [](const ir::Program& p) {
    return CountOps(p, "op.matmul") + CountOps(p, "kernel.matmul");
  };
  for (const auto& [h, n] : {std::pair<int64_t, int64_t>{1, 5}, {7, 1}, {33, 67}}) {
    ir::IrContext ctx;
    Generator g(static_cast<uint64_t>(h * 100 + n));
    Tensor wg = randn({n, h}, g), wu = randn({n, h}, g), wd = randn({n, h}, g);
    const auto body = [&](const Tensor& x) {
      const Tensor a = x * sigmoid(x);
      const Tensor gate = matmul(a, wg.permute({1, 0})), up = matmul(a, wu.permute({1, 0}));
      const Tensor y = gate * sigmoid(gate) * up;
      return std::vector<Tensor>{y, matmul(y, wd) + x};  // wd: [N, H] as b, down its columns
    };
    const std::vector<jit::InputSpec> specs = {
        {"x", DType::kFloat32, {jit::DimSpec::Symbol("B"), jit::DimSpec::Static(1), jit::DimSpec::Static(h)}}};
    jit::CaptureOptions o;
    o.state = {{"wg", &wg}, {"wu", &wu}, {"wd", &wd}};
    jit::Captured c = jit::Capture(
        ctx, [&](std::span<const Tensor> in) { return body(in[0]); }, specs, {}, kCpu, o);
    ASSERT_EQ(count_matmuls(*c.program), 3u);
    const FusionReport r = Fuse(*c.program);
    ir::Verify(*c.program->module());
    EXPECT_EQ(count_matmuls(*c.program), 0u) << ir::Print(*c.program);
    // x * sigmoid(x); gate and up with their epilogue (one row reduce); the column reduce with its + x.
    EXPECT_EQ(r.groups, 3u) << ir::Print(*c.program);
    EXPECT_EQ(r.row_reduce, 1u) << ir::Print(*c.program);
    EXPECT_EQ(r.column_reduce, 1u) << ir::Print(*c.program);
    for (const Device& d : kDevices) {
      const uint64_t before = Stats().kernels_compiled;
      for (int64_t b : {1, 3}) {
        const Tensor x = randn({b, 1, h}, g);
        const std::vector<Tensor> in = {x.to(d)};
        const std::vector<Tensor> got = jit::Interpret(*c.program, in, d), want = body(x);
        for (size_t i = 0; i < want.size(); ++i) {
          ExpectClose(got[i], want[i], 2e-5,
                      fmt::format("projections h={} n={} b={} output {} on {}", h, n, b, i, d.str()));
        }
      }
      EXPECT_LE(Stats().kernels_compiled - before, 3u) << "recompiled for another batch on " << d.str();
    }
  }
  // Attention at one query: scores against the keys (a row reduce over the head dimension), softmax, and the
  // values weighted by it (a column reduce over the symbolic key length L).
  for (int64_t dh : {5, 16}) {
    ir::IrContext ctx;
    Generator g(static_cast<uint64_t>(dh));
    const auto body = [&](std::span<const Tensor> in) {
      const Tensor scores = matmul(in[0], in[1].permute({0, 1, 3, 2})) * 0.25;
      return std::vector<Tensor>{matmul(softmax(scores, -1), in[2])};
    };
    const auto spec = [&](const char* name, jit::DimSpec rows) {
      return jit::InputSpec{
          name, DType::kFloat32, {jit::DimSpec::Symbol("B"), jit::DimSpec::Static(3), rows, jit::DimSpec::Static(dh)}};
    };
    const std::vector<jit::InputSpec> specs = {spec("q", jit::DimSpec::Static(1)), spec("k", jit::DimSpec::Symbol("L")),
                                               spec("v", jit::DimSpec::Symbol("L"))};
    jit::Captured c = jit::Capture(ctx, body, specs, {}, kCpu, {});
    const FusionReport r = Fuse(*c.program);
    ir::Verify(*c.program->module());
    EXPECT_EQ(count_matmuls(*c.program), 0u) << ir::Print(*c.program);
    EXPECT_EQ(r.column_reduce, 1u) << ir::Print(*c.program);
    for (const Device& d : kDevices) {
      for (const auto& [b, l] : {std::pair<int64_t, int64_t>{1, 1}, {2, 9}, {1, 33}}) {
        const std::vector<Tensor> in = {randn({b, 3, 1, dh}, g), randn({b, 3, l, dh}, g), randn({b, 3, l, dh}, g)};
        const std::vector<Tensor> on = {in[0].to(d), in[1].to(d), in[2].to(d)};
        ExpectClose(jit::Interpret(*c.program, on, d)[0], body(in)[0], 2e-5,
                    fmt::format("attention dh={} b={} l={} on {}", dh, b, l, d.str()));
      }
    }
  }
}

// The generated C of a matrix-vector product against the loop interpreter, both forms, randomised odd extents
// and batches: x: [B, 1, K] (B symbolic) times w^T (w: [N, K]) or w ([K, N]), times w2 ([N]) (an epilogue
// of the column form; the row form's domain [B, 1, N, K] does not map an input [N] yet, so it runs apart).
TEST_F(CinnTest, MatrixVectorKernelsMatchTheLoopInterpreter) {
  if (runtime::CompilerLanguages(kCpu).empty()) GTEST_SKIP() << "cpu has no usable C compiler here";
  Generator g(19);
  for (const bool transposed : {true, false}) {
    for (int trial = 0; trial < 3; ++trial) {
      const int64_t k = 1 + static_cast<int64_t>(g.NextU64() % 150), n = 1 + static_cast<int64_t>(g.NextU64() % 90);
      ir::IrContext ctx;
      Tensor w = transposed ? randn({n, k}, g) : randn({k, n}, g), w2 = randn({n}, g);
      const auto body = [&](const Tensor& x) { return matmul(x, transposed ? w.permute({1, 0}) : w) * w2; };
      const std::vector<jit::InputSpec> specs = {
          {"x", DType::kFloat32, {jit::DimSpec::Symbol("B"), jit::DimSpec::Static(1), jit::DimSpec::Static(k)}}};
      jit::CaptureOptions o;
      o.state = {{"w", &w}, {"w2", &w2}};
      jit::Captured c = jit::Capture(
          ctx, [&](std::span<const Tensor> in) { return std::vector<Tensor>{body(in[0])}; }, specs, {}, kCpu, o);
      const FusionReport r = Fuse(*c.program);
      ASSERT_EQ(r.groups, 1u) << ir::Print(*c.program);
      EXPECT_EQ(CountOps(*c.program, "op.mul"), transposed ? 1u : 0u) << ir::Print(*c.program);
      ir::Operation* group = LastGroup(*c.program);
      const GroupPlan plan = PlanGroup(*group, kCpu);
      EXPECT_EQ(plan.lowered.analysis.kind, transposed ? GroupTemplate::kRowReduce : GroupTemplate::kColumnReduce);
      std::shared_ptr<const scheduler::CompiledOp> compiled = CompileGroupOp(*group, kCpu);
      for (const int64_t b : {int64_t{1}, 1 + static_cast<int64_t>(g.NextU64() % 6)}) {
        const Tensor x = randn({b, 1, k}, g);
        // The group's operands: x unsqueezed outside it (a view), w and w2 (parameters, by name).
        std::vector<Tensor> operands;
        for (uint32_t i = 0; i < group->num_operands(); ++i) {
          const ir::Operation* def = group->operand(i).defining_op();
          if (def->name() == "builtin.parameter") {
            operands.push_back(def->attr("name").AsString() == "w" ? w : w2);
          } else {
            ASSERT_EQ(def->name(), "op.unsqueeze") << ir::Print(*c.program);
            operands.push_back(x.unsqueeze(def->attr("dim").AsInt()));
          }
        }
        const std::vector<Tensor> got = compiled->Run(operands);
        const Dims domain = transposed ? Dims{b, 1, n, k} : Dims{b, 1, k, n};
        const std::vector<Tensor> want = Interpreted(plan.lowered, operands, got, domain);
        ExpectClose(got[0], want[0], 1e-5, fmt::format("transposed={} k={} n={} b={}", transposed, k, n, b));
        const std::vector<Tensor> in = {x};
        ExpectClose(jit::Interpret(*c.program, in, kCpu)[0], body(x), 2e-5,
                    fmt::format("eager transposed={} k={} n={} b={}", transposed, k, n, b));
      }
    }
  }
}

// The Predictor's path: cinn before kernel selection, then the scheduler's Executor on each device.
TEST_F(CinnTest, ExecutorRunsFusedKernelPrograms) {
  for (const Device& d : kDevices) {
    ir::IrContext ctx;
    Generator g(5);
    Tensor w = randn({33}, g);
    auto program = CaptureBody(ctx, RmsNorm, 33, &w);
    passes::PassManager pm;
    pm.AddPipeline("canonicalize,cse,dce,cinn,kernel-select{device=" + d.str() + "}");
    pm.Run(*program);
    EXPECT_EQ(CountOps(*program, "cinn.group"), 1u) << ir::Print(*program);
    scheduler::Executor exec(*program, d);
    for (int64_t b : {2, 6}) {
      const Tensor x = randn({b, 3, 33}, g);
      const std::vector<Tensor> in = {x.to(d)};
      ExpectClose(exec.Run(in)[0], RmsNorm(x, w), 2e-5, "executor on " + d.str());
    }
  }
}

// The CUDA generator's kernels, compiled and run by gpu_emu (the CUDA runtime emulated on the host), give
// eager's results: ctest runs this with OAR_PLUGIN_PATH naming the emulator (cinn.gpu_emu).
TEST_F(CinnTest, CudaKernelsRunOnGpuEmu) {
  runtime::DeviceType* emu = runtime::Runtime::Get().FindType("gpu_emu");
  if (emu == nullptr || emu->device_count() == 0) GTEST_SKIP() << "gpu_emu is not loaded (OAR_PLUGIN_PATH)";
  const Device d("gpu_emu:0");
  ASSERT_EQ(runtime::CompilerLanguages(d), std::vector<runtime::SourceLanguage>{runtime::SourceLanguage::kCuda});
  for (const Case& c : kCases) {
    ir::IrContext ctx;
    Generator g(11);
    Tensor w = randn({37}, g);
    auto program = CaptureBody(ctx, c.body, 37, &w);
    Fuse(*program);
    const uint64_t interpreted = Stats().interpreted;
    const Tensor x = randn({2, 3, 37}, g);
    const std::vector<Tensor> in = {x.to(d)};
    ExpectClose(jit::Interpret(*program, in, d)[0], c.body(x, w), 2e-5, std::string(c.name) + " on gpu_emu");
    EXPECT_EQ(Stats().interpreted, interpreted) << c.name << " fell back to the interpreter";
  }
}

// A compiler that identifies itself but fails every compile (OAR_CC, a fresh cache): the group runs unfused,
// with eager's results, and nothing aborts.
TEST_F(CinnTest, ACompileErrorRunsTheGroupUnfused) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("oar_cinn_failing_cc_{}", ::getpid());
  fs::create_directories(dir);
  const fs::path cc = dir / "cc";
  {
    std::ofstream f(cc);
    f << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo failing-cc 1.0; exit 0; fi\n"
         "echo 'failing-cc: error: injected failure' >&2\nexit 1\n";
  }
  fs::permissions(cc, fs::perms::owner_all);
  const char* old_cache = std::getenv("OAR_CACHE_DIR");
  const std::string saved_cache = old_cache ? old_cache : "";
  ::setenv("OAR_CC", cc.c_str(), 1);
  ::setenv("OAR_CACHE_DIR", (dir / "cache").c_str(), 1);
  const uint64_t unfused = Stats().unfused;
  ir::IrContext ctx;
  Generator g(13);
  Tensor w = randn({9}, g);
  const Body body = [](const Tensor& x, const Tensor& wt) { return x * 0.3125 + sigmoid(x) * wt; };  // a new source
  auto program = CaptureBody(ctx, body, 9, &w);
  Fuse(*program);
  const Tensor x = randn({2, 3, 9}, g);
  const std::vector<Tensor> in = {x};
  const Tensor got = jit::Interpret(*program, in, kCpu)[0];
  ::unsetenv("OAR_CC");
  if (old_cache) ::setenv("OAR_CACHE_DIR", saved_cache.c_str(), 1); else ::unsetenv("OAR_CACHE_DIR");
  fs::remove_all(dir);
  if (runtime::CompilerLanguages(kCpu).empty()) GTEST_SKIP() << "cpu has no C compiler table";
  EXPECT_EQ(Stats().unfused, unfused + 1);
  ExpectClose(got, body(x, w), 1e-6, "unfused after a compile error");
}

TEST_F(CinnTest, CodegenSpellsTheCallingConventions) {
  ir::IrContext ctx;
  Generator g(1);
  Tensor w = randn({16}, g);
  auto program = CaptureBody(ctx, Softmax, 16, &w);
  Fuse(*program);
  ir::Operation* group = nullptr;
  for (ir::Operation* op : program->block()) {
    if (op->name() == "cinn.group") group = op;
  }
  ASSERT_NE(group, nullptr);
  const std::optional<GroupAnalysis> a = Analyze(BodyView(*group), nullptr);
  ASSERT_TRUE(a);
  const LoweredGroup c = Lower(BodyView(*group), *a, Target{1});
  const std::string src = GenerateSource(c.kernel, SourceDialect::kC);
  EXPECT_NE(src.find("void oar_kernel(void* const* args, int64_t task_begin, int64_t task_end)"), std::string::npos) << src;
  EXPECT_NE(src.find("#pragma omp simd reduction(max:"), std::string::npos) << src;
  const LoweredGroup gpu = Lower(BodyView(*group), *a, Target{256});
  const std::string cu = GenerateSource(gpu.kernel, SourceDialect::kCuda);
  EXPECT_NE(cu.find("extern \"C\" __global__ void oar_kernel("), std::string::npos) << cu;
  EXPECT_NE(cu.find("__syncthreads();"), std::string::npos) << cu;
  EXPECT_NE(cu.find("j += blockDim.x"), std::string::npos) << cu;
}

// The threads loops of a kernel: its passes over a row.
int ThreadsLoops(const Stmt& s) {
  int n = s->op == StmtOp::kFor && s->loop == LoopKind::kThreads ? 1 : 0;
  for (const Stmt& c : s->body) n += ThreadsLoops(c);
  return n;
}

// One-pass variance (Lowerer::PlanOnePassVariances): on C targets layer_norm's mean((x - mean)^2) runs in
// the mean's pass from float64 sums of x and x^2, so a row is read in two passes instead of three; GPU
// targets keep three. Against the loop interpreter and eager on rows the one-pass form has edges for: a
// large offset (mean 1e3, std 1: the cancellation the float64 sums absorb), a constant row (variance 0,
// rounding must not go negative), +inf, NaN, odd lengths and a single element.
TEST_F(CinnTest, LayerNormVarianceRunsInTheMeanPass) {
  if (runtime::CompilerLanguages(kCpu).empty()) GTEST_SKIP() << "cpu has no usable C compiler here";
  for (const Case& c : kCases) {
    if (std::string(c.name) != "layer_norm" && std::string(c.name) != "layer_norm_op") continue;
    for (int64_t h : {1, 5, 17, 64, 301}) {
      ir::IrContext ctx;
      Generator g(static_cast<uint64_t>(h));
      Tensor w = randn({h}, g);
      auto program = CaptureBody(ctx, c.body, h, &w);
      Fuse(*program);
      ir::Operation* group = LastGroup(*program);
      ASSERT_NE(group, nullptr);
      const std::optional<GroupAnalysis> a = Analyze(BodyView(*group), nullptr);
      ASSERT_TRUE(a);
      if (h > 1) {  // (at h = 1 x runs along no domain dimension: its values are row values, no pass reads a row)
        EXPECT_EQ(ThreadsLoops(Lower(BodyView(*group), *a, Target{1}).kernel.body), 2) << c.name << " h=" << h;
        EXPECT_EQ(ThreadsLoops(Lower(BodyView(*group), *a, Target{256}).kernel.body), 3) << c.name << " h=" << h;
        EXPECT_EQ(ThreadsLoops(Lower(BodyView(*group), *a, Target{1, 16, false}).kernel.body), 3)
            << c.name << " h=" << h;
      }
      const int64_t b = 2;  // rows: [b, 3]
      std::vector<float> v = randn({b, 3, h}, g).ToVector<float>();
      const auto row = [&](int64_t r) { return v.begin() + r * h; };
      for (int64_t j = 0; j < h; ++j) row(0)[j] += 1000.0f;  // mean 1e3, std 1
      std::fill(row(1), row(1) + h, 0.5f);  // constant, summed exactly in any order: variance 0, out = w
      row(2)[h / 2] = std::numeric_limits<float>::infinity();  // NaN, as eager
      row(3)[0] = std::numeric_limits<float>::quiet_NaN();
      const Tensor x = FromVector<float>(v, {b, 3, h}, kCpu);
      const std::vector<Tensor> in = {x};
      const Tensor out = jit::Interpret(*program, in, kCpu)[0];
      const std::vector<float> got = out.ToVector<float>(), want = c.body(x, w).ToVector<float>();
      const std::vector<float> oracle =
          Interpreted(PlanGroup(*group, kCpu).lowered, GroupOperands(*group, x, w), {out}, Dims{b, 3, h})[0]
              .ToVector<float>();
      for (size_t i = 0; i < got.size(); ++i) {
        const std::string at = fmt::format("{} h={} element {} (row {})", c.name, h, i, i / static_cast<size_t>(h));
        ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << at << ": " << got[i] << " vs eager " << want[i];
        ASSERT_EQ(std::isnan(got[i]), std::isnan(oracle[i])) << at << ": " << got[i] << " vs the interpreter";
        if (std::isnan(want[i])) continue;
        // Row 0's float32 mean (the same sum as before this rewrite) rounds its partial sums of ~1e3 * h
        // differently in each summation order (simd lanes, the interpreter's serial loop, eager's kernel):
        // a bound 1e3 times the others for its values, which the variance's float64 sums do not change.
        const double scale = i < static_cast<size_t>(h) ? 1e3 : 1.0;
        ASSERT_NEAR(got[i], want[i], scale * 2e-5 * (1 + std::fabs(want[i]))) << at;
        ASSERT_NEAR(got[i], oracle[i], scale * 1e-5 * (1 + std::fabs(oracle[i]))) << at;
      }
    }
  }
}

// The generated C of the only cinn.group of `program`, lowered for the C target.
std::string GroupSourceInC(ir::Program& program) {
  ir::Operation* group = nullptr;
  for (ir::Operation* op : program.block()) {
    if (op->name() == "cinn.group") group = op;
  }
  if (group == nullptr) return "";
  const std::optional<GroupAnalysis> a = Analyze(BodyView(*group), nullptr);
  if (!a) return "";
  return GenerateSource(Lower(BodyView(*group), *a, Target{1}).kernel, SourceDialect::kC);
}

// A causal mask's select in the attention softmax: GCC 12 vectorises no loop that loads a C `_Bool`, which
// kept that group scalar (3.6 ms of a 25 ms llama step); bool buffers are bytes in the generated C, and the
// results stay eager's.
TEST_F(CinnTest, BoolBuffersAreBytesInGeneratedC) {
  const int64_t h = 37;
  Generator g(11);
  Tensor mask = gt(rand({h}, g), 0.3);
  mask = where(gt(arange(0, h), 0.5), mask, ones({h}, DType::kBool));  // no row entirely masked
  const auto body = [&](const Tensor& x) {
    const Tensor s = where(mask, x * 0.25, full({1}, -INFINITY));
    const Tensor e = exp(s - amax(s, {-1}, true));
    return e / sum(e, {-1}, true);
  };
  ir::IrContext ctx;
  const std::vector<jit::InputSpec> specs = {
      {"x", DType::kFloat32, {jit::DimSpec::Symbol("B"), jit::DimSpec::Static(3), jit::DimSpec::Static(h)}}};
  jit::CaptureOptions o;
  o.state = {{"mask", &mask}};
  jit::Captured c = jit::Capture(
      ctx, [&](std::span<const Tensor> in) { return std::vector<Tensor>{body(in[0])}; }, specs, {}, kCpu, o);
  Fuse(*c.program);
  const std::string src = GroupSourceInC(*c.program);
  ASSERT_FALSE(src.empty()) << ir::Print(*c.program);
  EXPECT_NE(src.find("const uint8_t* restrict in"), std::string::npos) << src;
  EXPECT_EQ(src.find("const bool* restrict"), std::string::npos) << src;
  for (int64_t b : {1, 4}) {
    const Tensor x = randn({b, 3, h}, g);
    const std::vector<Tensor> in = {x};
    ExpectClose(jit::Interpret(*c.program, in, kCpu)[0], body(x), 2e-5, fmt::format("masked softmax b={}", b));
  }
}

// Column reductions in C: the simd loop over a tile's columns is innermost, under the serial loops down the
// rows (GCC vectorises no loop holding loops; column after column down every row misses the cache), so
// each `#pragma omp simd` loop of the kernel holds no loop.
TEST_F(CinnTest, ColumnReductionsRunTheirLanesInnermostInC) {
  for (const Body& body : {Body(ColumnNorm), Body(ColumnSum)}) {
    ir::IrContext ctx;
    Generator g(3);
    Tensor w = randn({64}, g);
    auto program = CaptureBody(ctx, body, 64, &w);
    Fuse(*program);
    const std::string src = GroupSourceInC(*program);
    ASSERT_NE(src.find("#pragma omp simd"), std::string::npos) << src;
    std::istringstream lines(src);
    std::string line;
    int pragmas = 0;
    while (std::getline(lines, line)) {
      if (line.find("#pragma omp simd") == std::string::npos) continue;
      ++pragmas;
      int depth = 0;
      bool opened = false;
      while (std::getline(lines, line) && !(opened && depth == 0)) {
        if (opened) {
          EXPECT_EQ(line.find("for ("), std::string::npos) << "a loop inside a simd loop:\n" << src;
        }
        depth += static_cast<int>(std::count(line.begin(), line.end(), '{')) -
                 static_cast<int>(std::count(line.begin(), line.end(), '}'));
        opened = true;
        if (depth == 0) break;
      }
    }
    EXPECT_GE(pragmas, 2) << src;
  }
}

// Streaming stores (codegen.cc, StreamLoop): run by ctest's cinn.streaming with OAR_STREAM_MIN_BYTES=4096,
// so that the same compiled kernel writes a batch of 64 with non-temporal stores and a batch of 1 with
// ordinary ones. Every row of the large batch must be the bits of the same row in the small one, for row
// lengths that give each row a head before its first 64-byte boundary and a tail after its last (h = 5,
// 301) and whole lines (64). The final passes of the row-reduce and elementwise templates stream; softmax's
// does not (it rescales its stashed exponentials in place, lines already in the cache), nor do column
// reductions.
TEST_F(CinnTest, StreamedRowsAreTheBitsOfCachedOnes) {
  if (runtime::CompilerLanguages(kCpu).empty()) GTEST_SKIP() << "cpu has no usable C compiler here";
  if (!GetEnv("OAR_STREAM_MIN_BYTES")) GTEST_SKIP() << "run by ctest's cinn.streaming (OAR_STREAM_MIN_BYTES=4096)";
  Generator g(5);
  for (const Case& c : kCases) {
    for (int64_t h : {5, 64, 301}) {
      ir::IrContext ctx;
      Tensor w = randn({h}, g);
      auto program = CaptureBody(ctx, c.body, h, &w);
      Fuse(*program);
      ir::Operation* group = nullptr;
      for (ir::Operation* op : program->block()) {
        if (op->name() == "cinn.group") group = op;
      }
      ASSERT_NE(group, nullptr) << c.name;
      const std::string src = PlanGroup(*group, kCpu).source;
      const bool streams = c.kind != GroupTemplate::kColumnReduce && std::string(c.name).rfind("softmax", 0) != 0;
      EXPECT_EQ(src.find("oar_stream_f32((out") != std::string::npos, streams) << c.name << "\n" << src;
      if (c.kind == GroupTemplate::kColumnReduce) continue;  // rows are not independent there
      std::shared_ptr<const scheduler::CompiledOp> compiled = CompileGroupOp(*group, kCpu);
      const Tensor big = randn({64, 3, h}, g);
      const Tensor small = big.slice(0, 0, 1).contiguous();
      const auto run = [&](const Tensor& x) {
        std::vector<Tensor> operands;
        for (uint32_t i = 0; i < group->num_operands(); ++i) {
          operands.push_back(group->operand(i).defining_op()->name() == "builtin.data" ? x : w);
        }
        return compiled->Run(operands);
      };
      const std::vector<Tensor> got_big = run(big), got_small = run(small);
      ASSERT_EQ(got_big.size(), got_small.size()) << c.name;
      for (size_t k = 0; k < got_big.size(); ++k) {
        const std::vector<float> a = got_big[k].contiguous().ToVector<float>();
        const std::vector<float> b = got_small[k].contiguous().ToVector<float>();
        ASSERT_EQ(a.size(), b.size() * 64) << c.name;
        EXPECT_EQ(std::memcmp(a.data(), b.data(), b.size() * sizeof(float)), 0) << c.name << " h=" << h << " output " << k;
      }
    }
  }
}

TEST_F(CinnTest, UnfusibleGroupTextIsRejectedClearly) {
  ir::IrContext ctx;
  const char* text = R"(builtin.module() ({
  %x = builtin.data() {name = "x", index = 0} : () -> tensor<[8, 8], f32>
  %g = cinn.group(%x) ({
  ^bb(%a: tensor<[8, 8], f32>):
    %m = op.matmul(%a, %a) : (tensor<[8, 8], f32>, tensor<[8, 8], f32>) -> tensor<[8, 8], f32>
    cinn.yield(%m) : (tensor<[8, 8], f32>) -> ()
  }) : (tensor<[8, 8], f32>) -> tensor<[8, 8], f32>
  builtin.output(%g) : (tensor<[8, 8], f32>) -> ()
}) : () -> ()
)";
  std::unique_ptr<ir::Program> p = ir::ParseProgram(ctx, text);
  try {
    const std::vector<Tensor> in = {zeros({8, 8})};
    jit::Interpret(*p, in, kCpu);
    FAIL() << "a group of a matmul ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not form one kernel"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("matmul"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oar::compiler
