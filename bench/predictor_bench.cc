// Predictor vs eager latency at batch 1 (issue 16's target: the Predictor >= 1.5x faster than eager on cpu,
// dispatch overhead removed, and the same on the simulators in their simulated time). Each example model is
// trained for a step, exported into a saved program, and timed both ways on the same input in the same run;
// `llama_decode` is one decoding step (oar export llama --decode) at cache length kDecodeCache, eager being
// the same step function run eagerly; `predictor_cinn` is the Predictor with CINN fusion (Config::cinn).
// A summary prints the cpu ratios with PASS/MISS, then the simulated
// device time of one run (the span of the device's activities, docs/simulators.md) of the MLP and the decoding
// step on kunlun_sim:0 and ascend_sim:1, eager and predicted.
// --iterations=N runs every case exactly N iterations (once), for instruction counts under callgrind: the
// difference of two runs' counts over N is a run's cost without the model's set-up.
//   build/bin/oar_predictor_bench [--no-simulated] [--iterations=N] [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <unistd.h>

#include "bench/bench_util.h"
#include "core/inference/predictor.h"
#include "core/jit/model.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"
#include "examples/models.h"

namespace oar::bench {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDecodeCache = 32;  // the cache length of the timed decoding step

struct Model {
  std::unique_ptr<examples::Example> example;
  examples::InferenceForward forward;
  std::unique_ptr<inference::Predictor> predictor;
  std::unique_ptr<inference::Predictor> fused;  // with CINN (Config::cinn)
  std::vector<Tensor> inputs;
};

// kind: mlp | cnn | llama | llama_decode, on `device` (trained one step on cpu; the simulators use the same
// seed's untrained weights, which do not change simulated time).
Model Make(const std::string& kind, Device device) {
  Model m;
  const bool decode = kind == "llama_decode";
  m.example = examples::MakeExample(decode ? "llama" : kind, device, 1);
  if (device.type() == "cpu") examples::Train(*m.example, 1);
  m.forward = decode ? examples::DecodeForward(*m.example, 1, 2 * kDecodeCache)
                     : m.example->ExportForward(1, kind == "llama" ? 16 : 0);
  jit::CaptureOptions o;
  o.state = m.forward.state;
  o.output_names = m.forward.outputs;
  const fs::path dir = fs::temp_directory_path() /
                       fmt::format("oar_predictor_bench_{}_{}_{}", kind, device.type(), ::getpid());
  {
    ir::IrContext ctx;
    jit::Save(*jit::Capture(ctx, m.forward.fn, m.forward.inputs, {}, device, o).program, dir);
  }
  m.predictor = std::make_unique<inference::Predictor>(inference::Config{.model_dir = dir, .device = device.str()});
  m.fused =
      std::make_unique<inference::Predictor>(inference::Config{.model_dir = dir, .device = device.str(), .cinn = true});
  fs::remove_all(dir);
  for (const jit::InputSpec& spec : m.forward.inputs) {
    Dims shape;
    for (const jit::DimSpec& d : spec.dims) shape.push_back(d.is_static() ? d.extent : kDecodeCache);
    Tensor t = spec.dtype == DType::kInt64 ? zeros(shape, DType::kInt64, device) : ones(shape, DType::kFloat32, device);
    if (spec.name == "position") t = full(shape, static_cast<double>(kDecodeCache), DType::kInt64, device);
    m.inputs.push_back(t);
  }
  return m;
}

Model& Get(const std::string& kind) {
  static std::map<std::string, Model> models;
  auto it = models.find(kind);
  if (it != models.end()) return it->second;
  return models.emplace(kind, Make(kind, Device("cpu"))).first->second;
}

void Eager(benchmark::State& state, const std::string& kind) {
  Model& m = Get(kind);
  for (auto _ : state) benchmark::DoNotOptimize(m.forward.fn(m.inputs)[0].ToVector<float>());
}

void Predicted(benchmark::State& state, const std::string& kind) {
  Model& m = Get(kind);
  for (auto _ : state) benchmark::DoNotOptimize(m.predictor->Run(m.inputs)[0].ToVector<float>());
}

void Fused(benchmark::State& state, const std::string& kind) {
  Model& m = Get(kind);
  for (auto _ : state) benchmark::DoNotOptimize(m.fused->Run(m.inputs)[0].ToVector<float>());
}

// Simulated device time (ms) of one call of `run` on `device`, after two warm-up calls (plans, private-format
// copies): the span from its first to its last simulated activity.
double SimulatedMs(Device device, const std::function<void()>& run) {
  run();
  run();
  runtime::Runtime::Get().Context(device).Synchronize();
  runtime::Profiler& prof = runtime::Profiler::Get();
  prof.Start();
  run();
  runtime::Runtime::Get().Context(device).Synchronize();
  prof.Stop();
  return SimulatedSpanMs(prof, device);
}

void SimulatedSummary() {
  std::printf("\nSimulated device time of one run at batch 1 (target: predictor >= 1.5x faster than eager)\n");
  for (const char* d : {"kunlun_sim:0", "ascend_sim:1"}) {
    for (const char* kind : {"mlp", "llama_decode"}) {
      const Device device(d);
      Model m = Make(kind, device);
      const double eager = SimulatedMs(device, [&] { m.forward.fn(m.inputs); });
      const double predicted = SimulatedMs(device, [&] { m.predictor->Run(m.inputs); });
      const double fused = SimulatedMs(device, [&] { m.fused->Run(m.inputs); });
      const double speedup = predicted > 0 ? eager / predicted : 0.0;
      const double fused_speedup = fused > 0 ? eager / fused : 0.0;
      std::printf("  %-13s %-13s eager %9.4f ms  predictor %9.4f ms  -> %.2fx %s   +cinn %9.4f ms -> %.2fx %s\n", d,
                  kind, eager, predicted, speedup, speedup >= 1.5 ? "PASS" : "MISS", fused, fused_speedup,
                  fused_speedup >= 1.5 ? "PASS" : "MISS");
    }
  }
}

class Recorder : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration || r.aggregate_name == "median") {
        seconds[r.run_name.function_name] = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> seconds;
};

}  // namespace
}  // namespace oar::bench

int main(int argc, char** argv) {
  // --no-simulated: skip the simulated-time summary (it builds every model again on two simulators).
  bool simulated = true;
  int64_t iterations = 0;  // 0: as Google Benchmark decides
  for (int i = 1; i < argc;) {
    const std::string_view arg(argv[i]);
    if (arg == "--no-simulated") {
      simulated = false;
    } else if (arg.starts_with("--iterations=")) {
      iterations = std::stoll(std::string(arg.substr(13)));
    } else {
      ++i;
      continue;
    }
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (const char* kind : {"mlp", "cnn", "llama", "llama_decode"}) {
    for (auto* b : {benchmark::RegisterBenchmark(fmt::format("eager/{}_b1", kind).c_str(), oar::bench::Eager,
                                                 std::string(kind)),
                    benchmark::RegisterBenchmark(fmt::format("predictor/{}_b1", kind).c_str(), oar::bench::Predicted,
                                                 std::string(kind)),
                    benchmark::RegisterBenchmark(fmt::format("predictor_cinn/{}_b1", kind).c_str(), oar::bench::Fused,
                                                 std::string(kind))}) {
      b->UseRealTime()->Unit(benchmark::kMicrosecond);
      if (iterations > 0) b->Iterations(iterations);
    }
  }
  oar::bench::Recorder rec;
  benchmark::RunSpecifiedBenchmarks(&rec);
  std::printf("\nSummary (target: predictor >= 1.5x faster than eager at batch 1 on cpu)\n");
  for (const char* kind : {"mlp", "cnn", "llama", "llama_decode"}) {
    const auto e = rec.seconds.find(fmt::format("eager/{}_b1", kind));
    const auto p = rec.seconds.find(fmt::format("predictor/{}_b1", kind));
    const auto f = rec.seconds.find(fmt::format("predictor_cinn/{}_b1", kind));
    if (e == rec.seconds.end() || p == rec.seconds.end() || f == rec.seconds.end()) continue;
    const double speedup = e->second / p->second, fused = e->second / f->second;
    std::printf("  %-12s eager %8.1f us  predictor %8.1f us  -> %.2fx %s   +cinn %8.1f us -> %.2fx %s\n", kind,
                e->second * 1e6, p->second * 1e6, speedup, speedup >= 1.5 ? "PASS" : "MISS", f->second * 1e6, fused,
                fused >= 1.5 ? "PASS" : "MISS");
  }
  // Issue 19's target: the decoding step with CINN >= 1.3x faster than the Predictor without it.
  std::printf("\nCINN through the Predictor (target: llama_decode >= 1.3x faster with CINN than without)\n");
  for (const char* kind : {"mlp", "cnn", "llama", "llama_decode"}) {
    const auto p = rec.seconds.find(fmt::format("predictor/{}_b1", kind));
    const auto f = rec.seconds.find(fmt::format("predictor_cinn/{}_b1", kind));
    if (p == rec.seconds.end() || f == rec.seconds.end()) continue;
    const double ratio = p->second / f->second;
    std::printf("  %-12s predictor %8.1f us  +cinn %8.1f us  -> %.2fx%s\n", kind, p->second * 1e6, f->second * 1e6,
                ratio, std::string_view(kind) == "llama_decode" ? (ratio >= 1.3 ? " PASS" : " MISS") : "");
  }
  if (simulated) oar::bench::SimulatedSummary();
  benchmark::Shutdown();
  oar::runtime::Runtime::DrainAtExit();
  return 0;
}
