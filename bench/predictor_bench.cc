// Predictor vs eager latency at batch 1 (issue 16's target: the Predictor >= 1.5x faster than eager on cpu,
// dispatch overhead removed). Each example model is trained for a step, exported into a saved program, and
// timed both ways on the same input in the same run; a summary prints the ratios with PASS/MISS.
//   build/bin/oar_predictor_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <unistd.h>

#include "core/inference/predictor.h"
#include "core/jit/model.h"
#include "examples/models.h"

namespace oar::bench {
namespace {

namespace fs = std::filesystem;

struct Model {
  std::unique_ptr<examples::Example> example;
  examples::InferenceForward forward;
  std::unique_ptr<inference::Predictor> predictor;
  Tensor input;
};

Model& Get(const std::string& kind) {
  static std::map<std::string, Model> models;
  auto it = models.find(kind);
  if (it != models.end()) return it->second;
  Model m;
  m.example = examples::MakeExample(kind, Device("cpu"), 1);
  examples::Train(*m.example, 1);
  m.forward = m.example->ExportForward(1, kind == "llama" ? 16 : 0);
  jit::CaptureOptions o;
  o.state = m.forward.state;
  o.output_names = m.forward.outputs;
  const fs::path dir = fs::temp_directory_path() / fmt::format("oar_predictor_bench_{}_{}", kind, ::getpid());
  {
    ir::IrContext ctx;
    jit::Save(*jit::Capture(ctx, m.forward.fn, m.forward.inputs, {}, Device("cpu"), o).program, dir);
  }
  m.predictor = std::make_unique<inference::Predictor>(inference::Config{.model_dir = dir, .device = "cpu"});
  fs::remove_all(dir);
  Dims shape;
  for (const jit::DimSpec& d : m.forward.inputs[0].dims) shape.push_back(d.extent);
  m.input = m.forward.inputs[0].dtype == DType::kInt64 ? zeros(shape, DType::kInt64) : ones(shape);
  return models.emplace(kind, std::move(m)).first->second;
}

void Eager(benchmark::State& state, const std::string& kind) {
  Model& m = Get(kind);
  const std::vector<Tensor> in{m.input};
  for (auto _ : state) benchmark::DoNotOptimize(m.forward.fn(in)[0].ToVector<float>());
}

void Predicted(benchmark::State& state, const std::string& kind) {
  Model& m = Get(kind);
  const std::vector<Tensor> in{m.input};
  for (auto _ : state) benchmark::DoNotOptimize(m.predictor->Run(in)[0].ToVector<float>());
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
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (const char* kind : {"mlp", "cnn", "llama"}) {
    benchmark::RegisterBenchmark(fmt::format("eager/{}_b1", kind).c_str(), oar::bench::Eager, std::string(kind))
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(fmt::format("predictor/{}_b1", kind).c_str(), oar::bench::Predicted,
                                 std::string(kind))
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  oar::bench::Recorder rec;
  benchmark::RunSpecifiedBenchmarks(&rec);
  std::printf("\nSummary (target: predictor >= 1.5x faster than eager at batch 1 on cpu)\n");
  for (const char* kind : {"mlp", "cnn", "llama"}) {
    const auto e = rec.seconds.find(fmt::format("eager/{}_b1", kind));
    const auto p = rec.seconds.find(fmt::format("predictor/{}_b1", kind));
    if (e == rec.seconds.end() || p == rec.seconds.end()) continue;
    const double speedup = e->second / p->second;
    std::printf("  %-6s eager %8.1f us  predictor %8.1f us  -> %.2fx   %s\n", kind, e->second * 1e6, p->second * 1e6,
                speedup, speedup >= 1.5 ? "PASS" : "MISS");
  }
  benchmark::Shutdown();
  return 0;
}
