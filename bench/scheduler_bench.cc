// The scheduler against the reference interpreter (docs/PERFORMANCE.md, "Scheduler"):
//   - step time of one inference program: executor vs jit::Interpret, on cpu and on kunlun_sim (wall time,
//     Google Benchmark), and on kunlun_sim in simulated device time (the span of the devices' activities);
//   - peak device memory of the same program: planned arena vs the executor freeing at last use through the
//     caching allocator vs the interpreter (keeps every value) vs no reuse at all (every buffer its own);
//   - copy/compute overlap on a program fed from the host in four chunks.
// The ratios are printed at the end of the run, all measured in it. Run: build/bin/oar_scheduler_bench.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>

#include "core/ir/text.h"
#include "core/jit/interpreter.h"
#include "core/ops/ops.h"
#include "core/passes/pass.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"
#include "core/runtime/stream.h"
#include "core/scheduler/executor.h"

namespace {

using namespace oar;

constexpr int64_t kBatch = 64, kHidden = 256;
constexpr int kLayers = 8, kChunks = 4;
const Device kCpu("cpu:0");

std::string T(int64_t rows, int64_t cols) { return fmt::format("tensor<[{}, {}], f32>", rows, cols); }

// x[B, H] -> kLayers x (matmul, add bias, tanh) -> softmax: an MLP's inference.
std::string MlpText() {
  std::string s = "builtin.module() ({\n";
  s += fmt::format("  %x = builtin.data() {{name = \"x\", index = 0}} : () -> {}\n", T(kBatch, kHidden));
  std::string v = "%x";
  for (int l = 0; l < kLayers; ++l) {
    s += fmt::format("  %w{0} = builtin.parameter() {{name = \"w{0}\"}} : () -> {1}\n", l, T(kHidden, kHidden));
    s += fmt::format("  %b{0} = builtin.parameter() {{name = \"b{0}\"}} : () -> tensor<[{1}], f32>\n", l, kHidden);
    s += fmt::format("  %m{0} = op.matmul({1}, %w{0}) : ({2}, {3}) -> {2}\n", l, v, T(kBatch, kHidden), T(kHidden, kHidden));
    s += fmt::format("  %a{0} = op.add(%m{0}, %b{0}) : ({1}, tensor<[{2}], f32>) -> {1}\n", l, T(kBatch, kHidden), kHidden);
    s += fmt::format("  %h{0} = op.tanh(%a{0}) : ({1}) -> {1}\n", l, T(kBatch, kHidden));
    v = fmt::format("%h{}", l);
  }
  s += fmt::format("  %p = op.softmax({0}) : ({1}) -> {1}\n  builtin.output(%p) : ({1}) -> ()\n}}) : () -> ()\n", v,
                   T(kBatch, kHidden));
  return s;
}

// kChunks inputs fed from the host, each through two layers, summed: the copies of the later chunks can run
// while the earlier ones compute.
std::string ChunksText() {
  std::string s = "builtin.module() ({\n";
  s += fmt::format("  %w = builtin.parameter() {{name = \"w0\"}} : () -> {}\n", T(kHidden, kHidden));
  for (int c = 0; c < kChunks; ++c) {
    s += fmt::format("  %x{0} = builtin.data() {{name = \"x{0}\", index = {0}}} : () -> {1}\n", c, T(4 * kBatch, kHidden));
  }
  std::string total;
  for (int c = 0; c < kChunks; ++c) {
    const std::string t = T(4 * kBatch, kHidden);
    s += fmt::format("  %m{0} = op.matmul(%x{0}, %w) : ({1}, {2}) -> {1}\n", c, t, T(kHidden, kHidden));
    s += fmt::format("  %t{0} = op.tanh(%m{0}) : ({1}) -> {1}\n", c, t);
    s += fmt::format("  %n{0} = op.matmul(%t{0}, %w) : ({1}, {2}) -> {1}\n", c, t, T(kHidden, kHidden));
    if (c == 0) {
      total = "%n0";
    } else {
      s += fmt::format("  %s{0} = op.add({1}, %n{0}) : ({2}, {2}) -> {2}\n", c, total, t);
      total = fmt::format("%s{}", c);
    }
  }
  s += fmt::format("  builtin.output({0}) : ({1}) -> ()\n}}) : () -> ()\n", total, T(4 * kBatch, kHidden));
  return s;
}

struct Case {
  ir::IrContext ctx;
  std::unique_ptr<ir::Program> program;
  std::vector<Tensor> inputs;
};

std::unique_ptr<Case> MakeCase(const std::string& text, const std::string& device) {
  auto c = std::make_unique<Case>();
  c->program = ir::ParseProgram(c->ctx, text, "bench.oir");
  Generator g(1);
  for (int l = 0; l < kLayers; ++l) {
    c->program->parameters[fmt::format("w{}", l)] = randn({kHidden, kHidden}, g, 0, 0.06, DType::kFloat32, kCpu);
    c->program->parameters[fmt::format("b{}", l)] = randn({kHidden}, g, 0, 0.1, DType::kFloat32, kCpu);
  }
  passes::PassManager pm;
  pm.AddPipeline("kernel-select{device=" + device + "},canonicalize,cse,inplace");
  pm.Run(*c->program);
  for (const ir::Operation* op : c->program->block()) {
    if (op->name() != "builtin.data") continue;
    const Dims shape(op->result(0).type().dims());
    c->inputs.push_back(randn(shape, g, 0, 1, DType::kFloat32, kCpu));
  }
  return c;
}

Case& Mlp(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Case>> cases;
  auto& c = cases[device];
  if (!c) c = MakeCase(MlpText(), device);
  return *c;
}

void BM_Interpreter(benchmark::State& state, std::string device) {
  Case& c = Mlp(device);
  for (auto _ : state) {
    std::vector<Tensor> out = jit::Interpret(*c.program, c.inputs, Device(device));
    runtime::Synchronize(Device(device));
    benchmark::DoNotOptimize(out);
  }
}

void BM_Executor(benchmark::State& state, std::string device) {
  Case& c = Mlp(device);
  scheduler::Executor exec(*c.program, Device(device));
  for (auto _ : state) benchmark::DoNotOptimize(exec.Run(c.inputs));  // Run returns with the outputs computed
}

BENCHMARK_CAPTURE(BM_Interpreter, cpu, std::string("cpu:0"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Executor, cpu, std::string("cpu:0"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Interpreter, kunlun_sim, std::string("kunlun_sim:0"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Executor, kunlun_sim, std::string("kunlun_sim:0"))->Unit(benchmark::kMicrosecond);

// What one call added at its peak on `device`, from an emptied cache: bytes in blocks handed out (exact
// packing) and bytes reserved from the device (caches and fragmentation included, what the device's tools
// show; a warm cache can serve a call without reserving more).
struct Peak {
  uint64_t allocated = 0, reserved = 0;
};
template <typename Fn>
Peak PeakOf(Device device, Fn&& fn) {
  runtime::CachingAllocator& a = runtime::Runtime::Get().Context(device).allocator();
  runtime::Synchronize(device);
  a.EmptyCache();
  a.ResetPeakStats();
  const runtime::AllocatorStats before = a.stats();
  fn();
  runtime::Synchronize(device);
  const runtime::AllocatorStats after = a.stats();
  return {after.peak_allocated_bytes - before.allocated_bytes, after.peak_reserved_bytes - before.reserved_bytes};
}

// The simulated device time from the first to the last activity of one call.
template <typename Fn>
uint64_t SimulatedSpan(Fn&& fn) {
  fn();
  runtime::Profiler::Get().Start();
  fn();
  runtime::Profiler::Get().Stop();
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& a : runtime::Profiler::Get().activities()) {
    lo = std::min(lo, a.start_ns);
    hi = std::max(hi, a.end_ns);
  }
  return hi > lo ? hi - lo : 0;
}

void Report() {
  std::string out = "\n== scheduler summary (ratios measured in this run)\n";
  for (const std::string device : {"cpu:0", "kunlun_sim:0"}) {
    const Device d(device);
    Case& c = Mlp(device);
    scheduler::ExecutorOptions dyn;
    dyn.plan_memory = false;
    // A fresh executor for each (its parameters are on the device before the measurement starts), whose
    // first run plans, allocates its arena and runs.
    Peak p, q;
    {
      scheduler::Executor e(*c.program, d);
      p = PeakOf(d, [&] { e.Run(c.inputs); });
    }
    {
      scheduler::Executor e(*c.program, d, dyn);
      q = PeakOf(d, [&] { e.Run(c.inputs); });
    }
    const Peak r = PeakOf(d, [&] { jit::Interpret(*c.program, c.inputs, d); });
    scheduler::Executor planned(*c.program, d);
    planned.Run(c.inputs);
    uint64_t arena = 0, unplanned = 0;
    for (const auto& s : planned.MemoryPlan(c.inputs)) {
      if (s.device == d.str()) arena = s.arena_bytes, unplanned = s.unplanned_bytes;
    }
    out += fmt::format("{}: arena {} bytes vs {} bytes with no reuse: {:.1f}%\n", device, arena, unplanned,
                       100.0 * static_cast<double>(arena) / static_cast<double>(std::max<uint64_t>(unplanned, 1)));
    auto pct = [](uint64_t x, uint64_t y) { return 100.0 * static_cast<double>(x) / static_cast<double>(std::max<uint64_t>(y, 1)); };
    out += fmt::format("{}: peak allocated by one run: planned {} / free-at-last-use {} / interpreter {} bytes "
                       "(planned = {:.1f}% of free-at-last-use, {:.1f}% of the interpreter)\n",
                       device, p.allocated, q.allocated, r.allocated, pct(p.allocated, q.allocated),
                       pct(p.allocated, r.allocated));
    out += fmt::format("{}: peak reserved by one run: planned {} / free-at-last-use {} / interpreter {} bytes\n", device,
                       p.reserved, q.reserved, r.reserved);
  }
  {
    Case& c = Mlp("kunlun_sim:0");
    const Device d("kunlun_sim:0");
    scheduler::Executor exec(*c.program, d);
    const uint64_t e = SimulatedSpan([&] { exec.Run(c.inputs); });
    const uint64_t i = SimulatedSpan([&] {
      jit::Interpret(*c.program, c.inputs, d);
      runtime::Synchronize(d);
    });
    out += fmt::format("kunlun_sim:0: simulated step {} ns (executor) vs {} ns (interpreter): {:.2f}x\n", e, i,
                       static_cast<double>(i) / static_cast<double>(std::max<uint64_t>(e, 1)));
  }
  {
    auto c = MakeCase(ChunksText(), "kunlun_sim:0");
    scheduler::Executor exec(*c->program, Device("kunlun_sim:0"));
    exec.Run(c->inputs);
    scheduler::RunProfile prof;
    exec.Run(c->inputs, &prof);
    const uint64_t copy = prof.copy_ns["kunlun_sim:0"], hidden = prof.hidden_copy_ns["kunlun_sim:0"];
    out += fmt::format("kunlun_sim:0: {} chunks fed from the host: {:.1f}% of {} ns of copies hidden behind compute\n",
                       kChunks, 100.0 * static_cast<double>(hidden) / static_cast<double>(std::max<uint64_t>(copy, 1)),
                       copy);
  }
  fmt::print("{}", out);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  Report();
  runtime::Runtime::DrainAtExit();
  return 0;
}
