// Static auto-parallel: the placement pass over a captured MLP forward (Megatron column/row split) and the
// SPMD runner, against eager DistTensor execution of the same ops and against one device.
#include "core/distributed/spmd_pass.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/distributed/collectives.h"
#include "core/distributed/eager.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/jit/capture.h"
#include "core/nn/layers.h"
#include "core/ops/ops.h"
#include "core/passes/pass.h"
#include "core/scheduler/executor.h"
#include "core/scheduler/op_runner.h"

namespace oar::distributed {
namespace {

// The runtime (cpu + four kunlun_sim devices) is configured by dist_tensor_test.cc, linked into the same
// program.

const Placement R = Placement::Replicate();
Placement S(int64_t d) { return Placement::Shard(d); }
const Device kDev("kunlun_sim:0");

std::vector<float> Host(const Tensor& t) { return t.to(Device("cpu")).ToVector<float>(); }

// fc2(tanh(fc1(x))), x [6, 8] -> [6, 8] through 16 hidden units, captured with a static batch.
struct Mlp {
  Generator gen{7};
  nn::Linear fc1{8, 16, true, gen, nn::Options{kDev, DType::kFloat32}};
  nn::Linear fc2{16, 8, true, gen, nn::Options{kDev, DType::kFloat32}};
  Tensor x = randn({6, 8}, gen, 0, 1, DType::kFloat32, kDev);

  Tensor Forward(const Tensor& in) { return fc2.Forward(tanh(fc1.Forward(in))); }

  jit::Captured Capture(ir::IrContext& ctx, std::vector<jit::DimSpec> dims = {}) {
    jit::CaptureOptions o;
    o.state = {
        {"fc1.weight", &fc1.weight}, {"fc1.bias", fc1.bias}, {"fc2.weight", &fc2.weight}, {"fc2.bias", fc2.bias}};
    NoGradGuard no_grad;
    const bool is_static = dims.empty();
    if (is_static) dims = {jit::DimSpec::Static(6), jit::DimSpec::Static(8)};
    const std::vector<jit::InputSpec> specs = {{"x", DType::kFloat32, dims}};
    return jit::Capture(
        ctx, [this](std::span<const Tensor> in) { return std::vector<Tensor>{Forward(in[0])}; }, specs,
        is_static ? std::vector<Tensor>{x} : std::vector<Tensor>{}, kDev, o);
  }
};

// Column-parallel fc1, row-parallel fc2 on tp (x replicated, or sharded by rows on dp).
void Annotate(ir::Program& p, const ProcessMesh& mesh) {
  SetProgramMesh(p, mesh);
  auto on_tp = [&](Placement tp) {
    Placements pl;
    for (const std::string& n : mesh.dim_names()) pl.push_back(n == "tp" ? tp : R);
    return pl;
  };
  AnnotatePlacements(p, "fc1.weight", on_tp(S(0)));
  AnnotatePlacements(p, "fc1.bias", on_tp(S(0)));
  AnnotatePlacements(p, "fc2.weight", on_tp(S(1)));
  if (mesh.ndim() == 2) AnnotatePlacements(p, "x", {S(0), R});
}

// The captured ops (linear = matmul(x, w^T) + b) run eagerly on DistTensors with the same annotations.
std::vector<float> EagerDist(Mlp& m, const ProcessMesh& mesh) {
  auto on_tp = [&](Placement tp, Placement dp = Placement::Replicate()) {
    Placements pl;
    for (const std::string& n : mesh.dim_names()) pl.push_back(n == "tp" ? tp : dp);
    return pl;
  };
  NoGradGuard no_grad;
  DistTensor x = shard_tensor(m.x, mesh, on_tp(R, S(0)));
  x.set_annotated(mesh.ndim() == 2);  // as in Annotate: unannotated values may be resharded
  const DistTensor w1 = shard_tensor(m.fc1.weight, mesh, on_tp(S(0))),
                   b1 = shard_tensor(*m.fc1.bias, mesh, on_tp(S(0)));
  const DistTensor w2 = shard_tensor(m.fc2.weight, mesh, on_tp(S(1)));
  DistTensor b2 = shard_tensor(*m.fc2.bias, mesh, on_tp(R));
  b2.set_annotated(false);
  const DistTensor h = Apply(ops::Op::kTanh, std::vector{add(matmul(x, transpose(w1, 0, 1)), b1)}).at(0);
  const DistTensor y = add(matmul(h, transpose(w2, 0, 1)), b2);
  return Host(FullTensor(y));
}

int64_t Collectives(const PropagationReport& r) {
  return r.count("dist.all_reduce") + r.count("dist.all_gather") + r.count("dist.reduce_scatter") +
         r.count("dist.all_to_all");
}

TEST(SpmdPass, MegatronMlpForwardGetsExactlyOneAllReduceAndEqualsEagerExecution) {
  Mlp m;
  ir::IrContext ctx;
  jit::Captured c = m.Capture(ctx);
  ir::Program& p = *c.program;
  const ProcessMesh mesh = ProcessMesh::Parse("tp=4", "kunlun_sim");
  Annotate(p, mesh);
  const PropagationReport report = PropagatePlacements(p);
  ir::Verify(p);
  const std::string text = ir::Print(p);
  EXPECT_EQ(report.count("dist.all_reduce"), 1) << text;
  EXPECT_EQ(Collectives(report), 1) << text;
  EXPECT_NE(text.find("dist.all_reduce"), std::string::npos);
  EXPECT_NE(text.find("dist.placements = [\"[S(1)]\"]"), std::string::npos) << text;  // the hidden layer
  EXPECT_NE(report.explain.find("op.matmul"), std::string::npos) << report.explain;
  // The placed program prints and parses back to the same text.
  ir::IrContext ctx2;
  RegisterDistDialect(ctx2);
  EXPECT_EQ(ir::Print(*ir::ParseProgram(ctx2, text, "placed.oir")), text);
  // Run: the one all_reduce is the only collective, and the result is eager DistTensor execution's bitwise
  // (the same local ops, the same reductions) and one device's within float rounding.
  // Each rank's program goes through its own scheduler::Executor; the collective is the rank program's one
  // dist.rank_reshard, on the rank's local shapes (fc1's 16 outputs split 4 ways).
  const std::string rank1 = ir::Print(*RankProgram(p, mesh, 1));
  EXPECT_NE(rank1.find("dist.rank_reshard"), std::string::npos) << rank1;
  EXPECT_EQ(rank1.find("dist.all_reduce"), std::string::npos) << rank1;
  EXPECT_NE(rank1.find("tensor<[6, 4], f32>"), std::string::npos) << rank1;
  const SpmdExecutor exec(p, mesh);
  ResetCollectiveCounts();
  const std::vector<DistTensor> out = exec.Run(std::vector<Tensor>{m.x});
  const CollectiveCounts counts = GetCollectiveCounts();
  EXPECT_EQ(counts.all_reduce, 1) << counts.ToString();
  EXPECT_EQ(counts.total(), 1) << counts.ToString();
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(exec.rank_executor(r).stats().runs, 1u) << r;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].placements(), (Placements{R}));
  const std::vector<float> got = Host(FullTensor(out[0]));
  EXPECT_EQ(got, EagerDist(m, mesh));
  EXPECT_EQ(got, Host(FullTensor(RunSpmdEager(p, mesh, std::vector<Tensor>{m.x}).at(0))));
  // Again (compiled once): the same result.
  EXPECT_EQ(Host(FullTensor(exec.Run(std::vector<Tensor>{m.x}).at(0))), got);
  // A wrong input fails every rank with the executor's message, and nothing waits forever.
  try {
    exec.Run(std::vector<Tensor>{randn({5, 8}, m.gen, 0, 1, DType::kFloat32, kDev)});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("input 0 ('x')"), std::string::npos) << e.what();
  }
  NoGradGuard no_grad;
  const std::vector<float> one = Host(m.Forward(m.x));
  ASSERT_EQ(got.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(got[i], one[i], 1e-5 * (1 + std::abs(one[i]))) << i;
}

TEST(SpmdPass, DataAndTensorParallelMlpOnATwoByTwoMesh) {
  Mlp m;
  ir::IrContext ctx;
  jit::Captured c = m.Capture(ctx);
  ir::Program& p = *c.program;
  const ProcessMesh mesh = ProcessMesh::Parse("dp=2,tp=2", "kunlun_sim");
  Annotate(p, mesh);
  const PropagationReport report = PropagatePlacements(p);
  // One all_reduce over tp inside; the rows sharded on dp are gathered only for the replicated output.
  EXPECT_EQ(report.count("dist.all_reduce"), 1) << ir::Print(p);
  EXPECT_EQ(report.count("dist.all_gather"), 1) << ir::Print(p);
  EXPECT_EQ(Collectives(report), 2) << ir::Print(p);
  const std::vector<DistTensor> out = RunSpmd(p, mesh, std::vector<Tensor>{m.x});
  EXPECT_EQ(Host(FullTensor(out[0])), EagerDist(m, mesh));
  EXPECT_EQ(Host(FullTensor(out[0])), Host(FullTensor(RunSpmdEager(p, mesh, std::vector<Tensor>{m.x}).at(0))));
}

// h = h + fc2(tanh(fc1(h))), three times (oar_dist_bench's residual stack): the residual stream stays
// Partial(sum) and each block's input is all-reduced once — one all_reduce per block, the last one at the
// output. The transposed weights inherit their parameters' annotation, so a block never gathers its
// column-parallel weight to multiply a Partial input (before: all_gather of the weight plus a
// reduce_scatter of the product in every block after the first, and only one all_reduce in all).
TEST(SpmdPass, ResidualMlpStackHasOneAllReducePerBlockAndGathersNoWeight) {
  constexpr int kBlocks = 3;
  Generator gen{11};
  const nn::Options o{kDev, DType::kFloat32};
  std::vector<std::unique_ptr<nn::Linear>> fc1, fc2;
  jit::CaptureOptions co;
  for (int b = 0; b < kBlocks; ++b) {
    fc1.push_back(std::make_unique<nn::Linear>(8, 16, true, gen, o));
    fc2.push_back(std::make_unique<nn::Linear>(16, 8, true, gen, o));
    const std::string n = "b" + std::to_string(b) + ".";
    co.state.push_back({n + "fc1.weight", &fc1.back()->weight});
    co.state.push_back({n + "fc1.bias", fc1.back()->bias});
    co.state.push_back({n + "fc2.weight", &fc2.back()->weight});
    co.state.push_back({n + "fc2.bias", fc2.back()->bias});
  }
  auto forward = [&](const Tensor& x) {
    Tensor h = x;
    for (int b = 0; b < kBlocks; ++b) h = h + fc2[b]->Forward(tanh(fc1[b]->Forward(h)));
    return h;
  };
  const Tensor x = randn({6, 8}, gen, 0, 1, DType::kFloat32, kDev);
  ir::IrContext ctx;
  NoGradGuard no_grad;
  const std::vector<jit::InputSpec> specs = {{"x", DType::kFloat32, {jit::DimSpec::Static(6), jit::DimSpec::Static(8)}}};
  jit::Captured c = jit::Capture(
      ctx, [&](std::span<const Tensor> in) { return std::vector<Tensor>{forward(in[0])}; }, specs,
      std::vector<Tensor>{x}, kDev, co);
  ir::Program& p = *c.program;
  const ProcessMesh mesh = ProcessMesh::Parse("tp=4", "kunlun_sim");
  SetProgramMesh(p, mesh);
  for (int b = 0; b < kBlocks; ++b) {
    const std::string n = "b" + std::to_string(b) + ".";
    AnnotatePlacements(p, n + "fc1.weight", {S(0)});
    AnnotatePlacements(p, n + "fc1.bias", {S(0)});
    AnnotatePlacements(p, n + "fc2.weight", {S(1)});
  }
  const PropagationReport report = PropagatePlacements(p);
  EXPECT_EQ(report.count("dist.all_reduce"), kBlocks) << ir::Print(p);
  EXPECT_EQ(Collectives(report), kBlocks) << ir::Print(p);
  ResetCollectiveCounts();
  const std::vector<DistTensor> out = RunSpmd(p, mesh, std::vector<Tensor>{x});
  EXPECT_EQ(GetCollectiveCounts().all_reduce, kBlocks) << GetCollectiveCounts().ToString();
  EXPECT_EQ(GetCollectiveCounts().total(), kBlocks) << GetCollectiveCounts().ToString();
  const std::vector<float> got = Host(FullTensor(out.at(0))), one = Host(forward(x));
  ASSERT_EQ(got.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(got[i], one[i], 1e-5 * (1 + std::abs(one[i]))) << i;
}

TEST(SpmdPass, RunsAsARegisteredPassAndRefusesWhatItCannotPlace) {
  RegisterAutoParallelPasses();
  Mlp m;
  ir::IrContext ctx;
  jit::Captured c = m.Capture(ctx);
  ir::Program& p = *c.program;
  // No mesh.
  try {
    PropagatePlacements(p);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("the program has no mesh: set the module attribute dist.mesh"),
              std::string::npos)
        << e.what();
  }
  const ProcessMesh mesh = ProcessMesh::Parse("tp=2", "kunlun_sim");
  SetProgramMesh(p, mesh);
  try {
    AnnotatePlacements(p, "fc3.weight", {S(0)});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("no input or parameter 'fc3.weight'; it has: x, fc1.weight"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(AnnotatePlacements(p, "fc1.bias", {S(1)}), Error);  // a 1-d tensor has no dim 1
  // Through the pass manager, with an option: the rows of x sharded (data parallel over the 2 ranks) stay
  // sharded to the output with outputs=keep: no reshard op at all.
  AnnotatePlacements(p, "x", {S(0)});
  passes::PassManager pm;
  pm.AddPipeline("spmd-propagate{outputs=keep}");
  pm.Run(p);
  const std::string text = ir::Print(p);
  EXPECT_EQ(text.find("= dist."), std::string::npos) << text;
  const ir::Operation* output = nullptr;
  for (ir::Operation* o : p.block()) {
    if (o->name() == "builtin.output") output = o;
  }
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(PlacementsOf(output->operand(0)), (Placements{S(0)})) << text;
  EXPECT_THROW(passes::CreatePass("spmd-propagate", {{"outputs", "sideways"}}), Error);
  // Symbolic batch.
  Mlp m2;
  ir::IrContext ctx2;
  jit::Captured sym = m2.Capture(ctx2, {jit::DimSpec::Symbol("B"), jit::DimSpec::Static(8)});
  SetProgramMesh(*sym.program, mesh);
  try {
    PropagatePlacements(*sym.program);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("needs static shapes"), std::string::npos) << e.what();
  }
}

// Fault injection: the compiler of dist.rank_reshard wrapped so that rank kVictim's collectives throw
// (Fault::kThrow) or arrive only after kLate, past the others' timeout (Fault::kHang).
enum class Fault { kNone, kThrow, kHang };
std::atomic<Fault> g_fault{Fault::kNone};
scheduler::OpCompiler g_real_compiler = nullptr;
constexpr int64_t kVictim = 2;
constexpr auto kLate = std::chrono::seconds(3);

class FaultyCollective : public scheduler::CompiledOp {
 public:
  FaultyCollective(std::shared_ptr<const scheduler::CompiledOp> real, Fault fault) : real_(std::move(real)), fault_(fault) {}
  std::vector<Tensor> Run(std::span<const Tensor> inputs) const override {
    if (fault_ == Fault::kThrow) Throw(ErrorCode::kUnavailable, "injected fault: the device was lost");
    std::this_thread::sleep_for(kLate);
    return real_->Run(inputs);
  }

 private:
  std::shared_ptr<const scheduler::CompiledOp> real_;
  Fault fault_;
};

std::shared_ptr<const scheduler::CompiledOp> CompileFaulty(const ir::Operation& op, Device device) {
  std::shared_ptr<const scheduler::CompiledOp> real = g_real_compiler(op, device);
  if (op.attr("rank").AsInt() != kVictim || g_fault == Fault::kNone) return real;
  return std::make_shared<FaultyCollective>(real, g_fault);
}

struct InjectFaults {
  InjectFaults() {
    g_real_compiler = scheduler::FindOpCompiler("dist.rank_reshard");
    scheduler::RegisterOpCompiler("dist.rank_reshard", &CompileFaulty);
  }
  ~InjectFaults() {
    scheduler::RegisterOpCompiler("dist.rank_reshard", g_real_compiler);
    g_fault = Fault::kNone;
    unsetenv("OAR_DIST_TIMEOUT_S");
  }
};

// A rank that fails stops the others at once (they do not wait out the timeout), and the run's error is its
// own, naming it; a rank that never arrives fails the others after OAR_DIST_TIMEOUT_S with kDeadlineExceeded
// naming it and the collective.
TEST(SpmdExecutor, ARankThatFailsOrNeverArrivesFailsTheRunNamingItAndTheCollective) {
  Mlp m;
  ir::IrContext ctx;
  jit::Captured c = m.Capture(ctx);
  ir::Program& p = *c.program;
  const ProcessMesh mesh = ProcessMesh::Parse("tp=4", "kunlun_sim");
  Annotate(p, mesh);
  PropagatePlacements(p);
  const InjectFaults inject;
  const std::vector<Tensor> in = {m.x};
  {
    g_fault = Fault::kThrow;
    const SpmdExecutor exec(p, mesh);  // the default timeout, 300 s
    const auto start = std::chrono::steady_clock::now();
    try {
      exec.Run(in);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 2: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("injected fault"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  }
  {
    g_fault = Fault::kHang;
    setenv("OAR_DIST_TIMEOUT_S", "1", 1);
    const SpmdExecutor exec(p, mesh);  // reads the timeout
    try {
      exec.Run(in);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find("rank(s) 2 never arrived"), std::string::npos) << what;
      EXPECT_NE(what.find("collective #1 'all_reduce [P(sum)] -> [R]"), std::string::npos) << what;
      EXPECT_NE(what.find("within 1 s"), std::string::npos) << what;
    }
  }
  // Without faults the same executors' program runs.
  g_fault = Fault::kNone;
  EXPECT_EQ(SpmdExecutor(p, mesh).Run(in).size(), 1u);
}

}  // namespace
}  // namespace oar::distributed
