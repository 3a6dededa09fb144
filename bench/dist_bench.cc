// Auto-parallel (docs/PERFORMANCE.md, "Distributed"):
//   - placement propagation (the spmd-propagate pass) over a captured program: a stack of Megatron MLP
//     blocks (column-parallel fc1, tanh, row-parallel fc2, residual add), the largest program the pass
//     handles today (the llama training program is not placed yet: its backward and its composites are
//     not captured into the op dialect the pass reads); time per program and per op;
//   - a 4-rank all_reduce of 64 MiB (float32) on the simulators' CCL: the simulated duration (the
//     profiler's collective activity) against the ring roofline 2 (p - 1) / p * bytes / peer_bandwidth +
//     launch overhead, and the wall time of the host doing the ranks' work.
// Run: OAR_KUNLUN_SIM_DEVICES=4 OAR_ASCEND_SIM_DEVICES=4 build/bin/oar_dist_bench.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "core/distributed/group.h"
#include "core/distributed/spmd_pass.h"
#include "core/ir/text.h"
#include "core/jit/capture.h"
#include "core/nn/layers.h"
#include "core/ops/ops.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"

namespace {

using namespace oar;
using distributed::Placement;

constexpr int64_t kBatch = 8, kDim = 64, kHidden = 256;

// kBlocks Megatron MLP blocks over tp=4, captured with a static batch, annotated, printed.
std::string MlpStackText(int blocks, int64_t& ops) {
  const Device dev("cpu:0");
  Generator gen(3);
  std::vector<std::unique_ptr<nn::Linear>> fc1, fc2;
  for (int b = 0; b < blocks; ++b) {
    fc1.push_back(std::make_unique<nn::Linear>(kDim, kHidden, true, gen, nn::Options{dev, DType::kFloat32}));
    fc2.push_back(std::make_unique<nn::Linear>(kHidden, kDim, true, gen, nn::Options{dev, DType::kFloat32}));
  }
  jit::CaptureOptions o;
  for (int b = 0; b < blocks; ++b) {
    o.state.push_back({fmt::format("b{}.fc1.weight", b), &fc1[b]->weight});
    o.state.push_back({fmt::format("b{}.fc1.bias", b), fc1[b]->bias});
    o.state.push_back({fmt::format("b{}.fc2.weight", b), &fc2[b]->weight});
    o.state.push_back({fmt::format("b{}.fc2.bias", b), fc2[b]->bias});
  }
  const Tensor x = randn({kBatch, kDim}, gen, 0, 1, DType::kFloat32, dev);
  ir::IrContext ctx;
  NoGradGuard no_grad;
  const std::vector<jit::InputSpec> specs = {
      {"x", DType::kFloat32, {jit::DimSpec::Static(kBatch), jit::DimSpec::Static(kDim)}}};
  jit::Captured c = jit::Capture(
      ctx,
      [&](std::span<const Tensor> in) {
        Tensor h = in[0];
        for (int b = 0; b < blocks; ++b) h = h + fc2[b]->Forward(tanh(fc1[b]->Forward(h)));
        return std::vector<Tensor>{h};
      },
      specs, std::vector<Tensor>{x}, dev, o);
  const distributed::ProcessMesh mesh = distributed::ProcessMesh::Parse("tp=4", "kunlun_sim");
  distributed::SetProgramMesh(*c.program, mesh);
  for (int b = 0; b < blocks; ++b) {
    distributed::AnnotatePlacements(*c.program, fmt::format("b{}.fc1.weight", b), {Placement::Shard(0)});
    distributed::AnnotatePlacements(*c.program, fmt::format("b{}.fc1.bias", b), {Placement::Shard(0)});
    distributed::AnnotatePlacements(*c.program, fmt::format("b{}.fc2.weight", b), {Placement::Shard(1)});
  }
  const std::string text = ir::Print(*c.program);
  ir::IrContext ctx2;
  distributed::RegisterDistDialect(ctx2);
  auto p = ir::ParseProgram(ctx2, text);
  ops = distributed::PropagatePlacements(*p).ops;
  return text;
}

void BM_SpmdPropagate(benchmark::State& state) {
  const int blocks = static_cast<int>(state.range(0));
  int64_t ops = 0;
  const std::string text = MlpStackText(blocks, ops);
  int64_t all_reduces = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ir::IrContext ctx;
    distributed::RegisterDistDialect(ctx);
    auto p = ir::ParseProgram(ctx, text);
    state.ResumeTiming();
    all_reduces = distributed::PropagatePlacements(*p).count("dist.all_reduce");
    benchmark::DoNotOptimize(all_reduces);
  }
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["all_reduces"] = static_cast<double>(all_reduces);
  state.counters["us_per_op"] =
      benchmark::Counter(static_cast<double>(ops) * 1e-6, benchmark::Counter::kIsIterationInvariantRate |
                                                               benchmark::Counter::kInvert);
}
BENCHMARK(BM_SpmdPropagate)->Name("spmd_propagate/megatron_mlp_blocks")->Arg(4)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond);

constexpr int64_t kAllReduceBytes = 64ll << 20;

struct AllReduceCase {
  std::unique_ptr<distributed::Group> group;
  std::vector<Tensor> ts;
};

AllReduceCase& Case(const std::string& type) {
  static std::map<std::string, AllReduceCase> cases;
  AllReduceCase& c = cases[type];
  if (!c.group) {
    std::vector<Device> devs;
    for (int i = 0; i < 4; ++i) devs.emplace_back(type, i);
    c.group = std::make_unique<distributed::Group>(devs);
    for (const Device& d : devs) c.ts.push_back(full({kAllReduceBytes / 4}, 1.0, DType::kFloat32, d));
  }
  return c;
}

double PeerBandwidth(const std::string& type) {
  const runtime::AttrValue* a = runtime::Runtime::Get().Context(Device(type, 0)).FindAttribute("peer_bandwidth");
  return a != nullptr ? a->f : 0;
}
// The plugins' launch overhead (plugins/{kunlun,ascend}_sim/*_plugin.cc; not a device attribute).
double LaunchOverheadS(const std::string& type) { return type == "kunlun_sim" ? 4e-6 : 3e-6; }

double RooflineS(const std::string& type) {
  const double p = 4;
  return LaunchOverheadS(type) + 2 * (p - 1) / p * static_cast<double>(kAllReduceBytes) / PeerBandwidth(type);
}

// The simulated duration of one all_reduce (the longest collective activity of the four ranks).
double SimulatedS(AllReduceCase& c) {
  runtime::Profiler::Get().Start();
  c.group->AllReduce(c.ts, runtime::ReduceOp::kSum);
  for (const Tensor& t : c.ts) runtime::Runtime::Get().Context(t.device()).Synchronize();
  runtime::Profiler::Get().Stop();
  uint64_t longest = 0;
  for (const auto& a : runtime::Profiler::Get().activities()) {
    if (a.name.find("all_reduce") != std::string::npos) longest = std::max(longest, a.end_ns - a.start_ns);
  }
  return static_cast<double>(longest) * 1e-9;
}

void BM_AllReduce(benchmark::State& state, const std::string& type) {
  AllReduceCase& c = Case(type);
  for (auto _ : state) {
    c.group->AllReduce(c.ts, runtime::ReduceOp::kSum);
    for (const Tensor& t : c.ts) runtime::Runtime::Get().Context(t.device()).Synchronize();
  }
  const double roof = RooflineS(type), sim = SimulatedS(c);
  state.counters["roofline_ms"] = roof * 1e3;
  state.counters["simulated_ms"] = sim * 1e3;
  state.counters["simulated_over_roofline"] = sim / roof;
  state.SetBytesProcessed(state.iterations() * kAllReduceBytes);
}
BENCHMARK_CAPTURE(BM_AllReduce, kunlun_sim, std::string("kunlun_sim"))
    ->Name("all_reduce/kunlun_sim/4_ranks/64MiB")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_AllReduce, ascend_sim, std::string("ascend_sim"))
    ->Name("all_reduce/ascend_sim/4_ranks/64MiB")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  ::setenv("OAR_KUNLUN_SIM_DEVICES", "4", 0);
  ::setenv("OAR_ASCEND_SIM_DEVICES", "4", 0);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  runtime::Runtime::DrainAtExit();
  return 0;
}
