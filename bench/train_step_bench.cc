// `oar train --static` vs eager training: step time of the example models on cpu (wall) and kunlun_sim (wall
// and simulated device time), and the peak device memory of one training step (the executor's memory plan
// against the same buffers with no reuse). Issue 20's aims: static >= 1.3x faster than eager on cpu; the
// planned step's memory <= 60 % of eager's.
//   build/bin/oar_train_step_bench [--steps N] [--models mlp,cnn,llama] [--devices cpu:0,kunlun_sim:0]
//   --cinn: also the static step with CINN's fusion groups (compiled kernels; issue 19 aims at >= 1.2x over
//   the static step without them), in two more columns.
// Each figure is the median over the steps after the captures (steps 0 and 1 capture, as Adam's moments
// appear); eager and static run the same steps of the same model (same seed) in one process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench/bench_util.h"
#include "core/compiler/compiler.h"
#include "core/inference/predictor.h"
#include "core/jit/capture.h"
#include "core/jit/model.h"
#include "core/scheduler/executor.h"
#include "core/runtime/allocator.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"
#include "core/scheduler/profile.h"
#include "examples/models.h"

namespace oar::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double wall_ms = 0;  // median step
  double sim_ms = 0;   // simulated device time of one step (simulators only): the span of its activities
  uint64_t peak_bytes = 0;   // reserved (segments, caches included): the `peak device memory` figure
  uint64_t alloc_bytes = 0;  // allocated blocks (no cache)
};

// The executor's own account of a static step (a short run of its own, profiled: the profile's bookkeeping
// would slow the timed steps): the plan's arena, the peak the run allocated, the outputs written into the
// state they replace.
struct PlanFigures {
  uint64_t arena_bytes = 0, alloc_bytes = 0, reserved_bytes = 0, donated = 0;
};

constexpr int64_t kSkip = 3;  // steps 0 and 1 capture under --static; step 2 is the first replay (plans)

// `static_graph`: TrainStatic, else Train, for `steps` steps. Steps kSkip .. steps - 2 are timed on the wall
// clock; the last one measures memory (the allocator's cache emptied first, so its peak is what the step held)
// and, on a simulator, simulated time (the span of the device's activities).
Timing Measure(const std::string& kind, Device device, int64_t steps, bool static_graph, const std::string& fusion) {
  auto e = examples::MakeExample(kind, device, 1);
  runtime::DeviceContext& ctx = runtime::Runtime::Get().Context(device);
  runtime::Profiler& prof = runtime::Profiler::Get();
  const bool sim = ctx.FindAttribute("simulated") != nullptr;
  std::vector<Clock::time_point> ends;
  auto progress = [&](int64_t done, int64_t) {
    ends.push_back(Clock::now());
    if (done != steps - 1) return;
    ctx.Synchronize();
    ctx.allocator().EmptyCache();
    ctx.allocator().ResetPeakStats();
    if (sim) prof.Start();
  };
  if (static_graph) {
    examples::TrainStatic(*e, steps, 0, {}, progress, nullptr, nullptr, fusion);
  } else {
    examples::Train(*e, steps, 0, {}, progress);
  }
  ctx.Synchronize();
  Timing t;
  t.peak_bytes = ctx.allocator().stats().peak_reserved_bytes;
  t.alloc_bytes = ctx.allocator().stats().peak_allocated_bytes;
  std::vector<double> ms;
  for (int64_t i = kSkip; i + 1 < steps; ++i) {
    ms.push_back(std::chrono::duration<double, std::milli>(ends[static_cast<size_t>(i)] - ends[static_cast<size_t>(i - 1)]).count());
  }
  t.wall_ms = Median(ms);
  if (sim) {
    prof.Stop();
    t.sim_ms = SimulatedSpanMs(prof, device);
  }
  return t;
}

PlanFigures MeasurePlan(const std::string& kind, Device device) {
  auto e = examples::MakeExample(kind, device, 1);
  scheduler::RunProfile profile;
  runtime::DeviceContext& ctx = runtime::Runtime::Get().Context(device);
  auto progress = [&](int64_t done, int64_t) {
    if (done != kSkip) return;
    ctx.Synchronize();
    ctx.allocator().EmptyCache();  // the profiled step's reserved peak is what it held
  };
  examples::TrainStatic(*e, kSkip + 1, 0, {}, progress, nullptr, &profile);
  PlanFigures f;
  f.arena_bytes = profile.arena_bytes[device.str()];
  f.alloc_bytes = profile.peak_allocated_memory[device.str()];
  f.reserved_bytes = profile.peak_device_memory[device.str()];
  f.donated = profile.donated_outputs;
  return f;
}

// Inference memory: the example's exported forward (`batch`, llama at its training context), saved and loaded
// by a Predictor as `oar predict` does, then the Predictor's prepared program on an executor of its own (the
// Predictor's options): the plan's arena against the same buffers with no reuse at all.
std::string InferencePlan(const std::string& kind, Device device, int64_t batch) {
  auto e = examples::MakeExample(kind, device, 1);
  examples::InferenceForward f = e->ExportForward(batch, 0);
  jit::CaptureOptions o;
  o.state = f.state;
  o.output_names = f.outputs;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("oar_train_step_bench_{}_{}", kind, ::getpid());
  {
    ir::IrContext ctx;
    jit::Save(*jit::Capture(ctx, f.fn, f.inputs, {}, device, o).program, dir);
  }
  inference::Predictor predictor(inference::Config{.model_dir = dir, .device = device.str()});
  std::filesystem::remove_all(dir);
  std::vector<Tensor> inputs;
  for (const jit::InputSpec& spec : predictor.inputs()) {
    Dims shape;
    for (const jit::DimSpec& d : spec.dims) shape.push_back(d.extent);
    inputs.push_back(spec.dtype == DType::kInt64 ? zeros(shape, DType::kInt64, device)
                                                 : ones(shape, spec.dtype, device));
  }
  scheduler::Executor exec(predictor.program(), device);
  exec.Run(inputs);
  uint64_t arena = 0, unplanned = 0;
  for (const scheduler::MemoryPlanSummary& m : exec.MemoryPlan(inputs)) {
    if (m.device == device.str()) arena = m.arena_bytes, unplanned = m.unplanned_bytes;
  }
  return fmt::format("{:<6} {:<13} batch {}: arena {} B vs {} B with no reuse: {:.1f} %", kind, device.str(), batch,
                     arena, unplanned, unplanned > 0 ? 100.0 * static_cast<double>(arena) / static_cast<double>(unplanned) : 0.0);
}

}  // namespace
}  // namespace oar::bench

int main(int argc, char** argv) {
  using namespace oar;
  int64_t steps = 12;
  std::string models = "mlp,cnn,llama", devices = "cpu:0,kunlun_sim:0";
  bool cinn = false;
  for (int i = 1; i < argc; i += 2) {
    if (std::strcmp(argv[i], "--cinn") == 0) {
      cinn = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", argv[i]);
      return 2;
    }
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::stoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--models") == 0) models = argv[i + 1];
    else if (std::strcmp(argv[i], "--devices") == 0) devices = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s (known: --steps N, --models a,b, --devices a,b, --cinn)\n", argv[i]);
      return 2;
    }
  }
  if (steps < bench::kSkip + 2) {
    std::fprintf(stderr, "--steps must be at least %lld\n", static_cast<long long>(bench::kSkip + 2));
    return 2;
  }
  compiler::RegisterCinn();
  std::printf("%-6s %-13s %10s %10s %7s %10s %10s %7s %12s %12s %6s %12s %12s %6s%s\n", "model", "device", "eager ms",
              "static ms", "wall", "eager sim", "static sim", "sim", "eager peak", "static peak", "peak", "eager alloc",
              "static alloc", "alloc", cinn ? "    cinn ms  vs static   cinn sim  vs static" : "");
  std::vector<std::string> plan_lines;
  for (const std::string& kind : bench::Split(models)) {
    for (const std::string& d : bench::Split(devices)) {
      const Device device(d);
      const bench::Timing eager = bench::Measure(kind, device, steps, false, {});
      const bench::Timing stat = bench::Measure(kind, device, steps, true, {});
      auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
      std::printf("%-6s %-13s %10.3f %10.3f %6.2fx %10.3f %10.3f %6.2fx %12llu %12llu %5.0f%% %12llu %12llu %5.0f%%",
                  kind.c_str(), d.c_str(), eager.wall_ms, stat.wall_ms, ratio(eager.wall_ms, stat.wall_ms),
                  eager.sim_ms, stat.sim_ms, ratio(eager.sim_ms, stat.sim_ms),
                  static_cast<unsigned long long>(eager.peak_bytes), static_cast<unsigned long long>(stat.peak_bytes),
                  100.0 * ratio(static_cast<double>(stat.peak_bytes), static_cast<double>(eager.peak_bytes)),
                  static_cast<unsigned long long>(eager.alloc_bytes), static_cast<unsigned long long>(stat.alloc_bytes),
                  100.0 * ratio(static_cast<double>(stat.alloc_bytes), static_cast<double>(eager.alloc_bytes)));
      if (cinn) {
        const bench::Timing fused = bench::Measure(kind, device, steps, true, inference::kCinnPasses);
        std::printf(" %10.3f %8.2fx %10.3f %8.2fx", fused.wall_ms, ratio(stat.wall_ms, fused.wall_ms), fused.sim_ms,
                    ratio(stat.sim_ms, fused.sim_ms));
      }
      std::printf("\n");
      std::fflush(stdout);
      const bench::PlanFigures f = bench::MeasurePlan(kind, device);
      char line[256];
      std::snprintf(line, sizeof line, "%-6s %-13s arena %llu B, peak allocated %llu B, peak reserved %llu B, %llu outputs into donated state",
                    kind.c_str(), d.c_str(), static_cast<unsigned long long>(f.arena_bytes),
                    static_cast<unsigned long long>(f.alloc_bytes), static_cast<unsigned long long>(f.reserved_bytes),
                    static_cast<unsigned long long>(f.donated));
      plan_lines.push_back(line);
    }
  }
  std::printf("\nthe executor's profile of one static step (memory plan):\n");
  for (const std::string& l : plan_lines) std::printf("%s\n", l.c_str());
  std::printf("\ninference (the Predictor's program; issue 20's aim: arena <= 35 %% of no reuse):\n");
  for (const std::string& kind : bench::Split(models)) {
    if (kind == "cnn") continue;  // its export is not what the issue measures
    for (const std::string& d : bench::Split(devices)) {
      std::printf("%s\n", bench::InferencePlan(kind, Device(d), kind == "mlp" ? 64 : 1).c_str());
    }
  }
  runtime::Runtime::DrainAtExit();
  return 0;
}
