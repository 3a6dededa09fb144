// Auto-parallel (docs/PERFORMANCE.md, "Distributed"):
//   - placement propagation (the spmd-propagate pass) over a captured program: a stack of Megatron MLP
//     blocks (column-parallel fc1, tanh, row-parallel fc2, residual add) of 4, 16 and 64 blocks, and the
//     llama example's captured forward and training step (when examples are built); time per program and
//     per op, and the collectives inserted;
//   - a 4-rank all_reduce of 64 MiB (float32) on the simulators' CCL: the simulated duration (the
//     profiler's collective activity) against the ring roofline 2 (p - 1) / p * bytes / peer_bandwidth +
//     launch overhead, and the wall time of the host doing the ranks' work; in one process (four devices)
//     and across four processes (one rank each, the CCL's shared-memory path, bootstrapped through the
//     launcher's store), the latter only under a launcher.
// Run: OAR_KUNLUN_SIM_DEVICES=4 OAR_ASCEND_SIM_DEVICES=4 build/bin/oar_dist_bench; across processes:
//   mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none
//     -np 4 build/bin/oar_dist_bench --benchmark_filter=processes   (only rank 0 prints)
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "core/distributed/group.h"
#include "core/distributed/process_group.h"
#include "core/distributed/spmd_pass.h"
#include "core/ir/text.h"
#include "core/jit/capture.h"
#include "core/nn/layers.h"
#include "core/ops/ops.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"
#ifdef OAR_DIST_BENCH_HAVE_EXAMPLES
#include "examples/models.h"
#endif

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

/// Time spmd-propagate over the program `text` of `ops` op.* ops (parsing excluded) and count every
/// collective kind it inserts: one all_reduce per block and nothing else is Megatron's.
void Propagate(benchmark::State& state, const std::string& text, int64_t ops) {
  distributed::PropagationReport report;
  for (auto _ : state) {
    state.PauseTiming();
    ir::IrContext ctx;
    distributed::RegisterDistDialect(ctx);
    auto p = ir::ParseProgram(ctx, text);
    state.ResumeTiming();
    report = distributed::PropagatePlacements(*p);
    benchmark::DoNotOptimize(report.ops);
  }
  state.counters["ops"] = static_cast<double>(ops);
  for (const char* n : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}) {
    state.counters[n] = static_cast<double>(report.count(std::string("dist.") + n));
  }
  state.counters["us_per_op"] =
      benchmark::Counter(static_cast<double>(ops) * 1e-6, benchmark::Counter::kIsIterationInvariantRate |
                                                               benchmark::Counter::kInvert);
}

void BM_SpmdPropagate(benchmark::State& state) {
  const int blocks = static_cast<int>(state.range(0));
  int64_t ops = 0;
  const std::string text = MlpStackText(blocks, ops);
  Propagate(state, text, ops);
}
BENCHMARK(BM_SpmdPropagate)->Name("spmd_propagate/megatron_mlp_blocks")->Arg(4)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond);

#ifdef OAR_DIST_BENCH_HAVE_EXAMPLES
// The llama example (examples/models.cc, batch 8, context 64) captured on cpu: its forward (ExportForward)
// or its training step (TrainOn: forward, cross-entropy, backward, AdamW, as `oar train --static` captures
// it), annotated for Megatron tensor parallelism on tp=2 (attention output and down projections
// row-parallel, gate and up column-parallel, the fused qkv replicated) and printed.
std::string LlamaText(bool training, int64_t& ops, std::string& error) {
  const Device dev("cpu:0");
  std::unique_ptr<examples::Example> e = examples::MakeExample("llama", dev, 5);
  ir::IrContext ctx;
  std::unique_ptr<jit::Captured> c;
  if (training) {
    (void)e->TrainStep(0, 10);  // the optimiser's moments exist, as in the step `oar train --static` replays
    jit::CaptureOptions o;
    for (auto& [name, t] : e->module().NamedParameters()) o.state.push_back({name, t});
    for (auto& [name, t] : e->optimizer().NamedState()) o.state.push_back({name, t});
    std::vector<Tensor> in = e->Batch(0, 1);
    const size_t num_batch = in.size();
    for (double v : e->optimizer().NextStepScalars()) in.push_back(full({}, v, DType::kFloat32, dev));
    std::vector<jit::InputSpec> specs;
    for (size_t i = 0; i < in.size(); ++i) specs.push_back(jit::InputSpec::Of(fmt::format("in{}", i), in[i]));
    c = std::make_unique<jit::Captured>(jit::Capture(
        ctx,
        [&](std::span<const Tensor> x) {
          return e->TrainOn(x.first(num_batch),
                            [&](size_t k, DType dtype, Device) { return cast(x[num_batch + k], dtype); });
        },
        specs, in, dev, o));
  } else {
    examples::InferenceForward f = e->ExportForward(8, 0);
    jit::CaptureOptions o;
    o.state = f.state;
    c = std::make_unique<jit::Captured>(jit::Capture(ctx, f.fn, f.inputs, {}, dev, o));
  }
  const distributed::ProcessMesh mesh = distributed::ProcessMesh::Parse("tp=2", "kunlun_sim");
  distributed::SetProgramMesh(*c->program, mesh);
  for (const auto& [name, t] : c->program->parameters) {  // the model's tensor-parallel plan
    const Placement tp = examples::LlamaTensorParallelPlacement(name);
    if (name.starts_with("layers.") && !tp.is_replicate()) distributed::AnnotatePlacements(*c->program, name, {tp});
  }
  if (training) {  // AdamW's moments live with their parameter's shard
    std::vector<std::string> params;
    for (auto& [name, t] : e->module().NamedParameters()) params.push_back(name);
    const std::string_view moments[] = {"adam.m.", "adam.v."};
    distributed::AnnotateStateLikeParameters(*c->program, params, moments);
  }
  const std::string text = ir::Print(*c->program);
  ir::IrContext ctx2;
  distributed::RegisterDistDialect(ctx2);
  auto p = ir::ParseProgram(ctx2, text);
  try {
    ops = distributed::PropagatePlacements(*p).ops;
  } catch (const Error& err) {
    error = err.what();
  }
  return text;
}

void BM_SpmdPropagateLlama(benchmark::State& state, bool training) {
  int64_t ops = 0;
  std::string error;
  const std::string text = LlamaText(training, ops, error);
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  Propagate(state, text, ops);
}
BENCHMARK_CAPTURE(BM_SpmdPropagateLlama, forward, false)
    ->Name("spmd_propagate/llama_forward/tp2")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SpmdPropagateLlama, training_step, true)
    ->Name("spmd_propagate/llama_training_step/tp2")
    ->Unit(benchmark::kMillisecond);
#endif

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

// The same all_reduce with one rank per process (run under mpirun -np 4 or a torchrun-style launcher of 4):
// each process's `type`:0 joins the group's device communicator (ProcessGroup::DeviceCommunicator: the
// simulator's CCL across processes, shared memory in rounds of 4 MiB). A fixed iteration count, since every
// process must issue the same collectives.
bool UnderLauncher() { return distributed::LaunchInfo::FromEnv().launcher != "single"; }

void BM_AllReduceProcesses(benchmark::State& state, const std::string& type) {
  if (!UnderLauncher() || distributed::LaunchInfo::FromEnv().world_size != 4) {
    state.SkipWithError("needs 4 processes: mpirun ... -np 4 oar_dist_bench --benchmark_filter=processes");
    return;
  }
  distributed::ProcessGroup& g = distributed::ProcessGroup::World();
  const Device dev(type, 0);
  runtime::Communicator& comm = g.DeviceCommunicator(dev);
  Tensor t = full({kAllReduceBytes / 4}, 1.0, DType::kFloat32, dev);
  runtime::DeviceContext& ctx = runtime::Runtime::Get().Context(dev);
  for (auto _ : state) {
    comm.AllReduce({&t, 1}, runtime::ReduceOp::kSum);
    ctx.Synchronize();
  }
  runtime::Profiler::Get().Start();
  comm.AllReduce({&t, 1}, runtime::ReduceOp::kSum);
  ctx.Synchronize();
  runtime::Profiler::Get().Stop();
  uint64_t longest = 0;
  for (const auto& a : runtime::Profiler::Get().activities()) {
    if (a.name.find("all_reduce") != std::string::npos) longest = std::max(longest, a.end_ns - a.start_ns);
  }
  const double roof = RooflineS(type), sim = static_cast<double>(longest) * 1e-9;
  state.counters["roofline_ms"] = roof * 1e3;
  state.counters["simulated_ms"] = sim * 1e3;
  state.counters["simulated_over_roofline"] = sim / roof;
  state.counters["engine_" + std::string(g.engine())] = 1;
  state.SetBytesProcessed(state.iterations() * kAllReduceBytes);
}
BENCHMARK_CAPTURE(BM_AllReduceProcesses, kunlun_sim, std::string("kunlun_sim"))
    ->Name("all_reduce/kunlun_sim/4_processes/64MiB")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_AllReduceProcesses, ascend_sim, std::string("ascend_sim"))
    ->Name("all_reduce/ascend_sim/4_processes/64MiB")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  ::setenv("OAR_KUNLUN_SIM_DEVICES", "4", 0);
  ::setenv("OAR_ASCEND_SIM_DEVICES", "4", 0);
  const distributed::LaunchInfo launch = distributed::LaunchInfo::FromEnv();
  if (launch.rank != 0) std::freopen("/dev/null", "w", stdout);  // under a launcher only rank 0 reports
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  runtime::Runtime::DrainAtExit();
  return 0;
}
