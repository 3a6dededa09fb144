// fused_linear (one oneDNN matmul primitive with a bias and an eltwise post-op) against the eager
// matmul + add + relu it replaces, on cpu, for two MLP layer shapes; the ratio of each pair is printed at the
// end, measured within one run (docs/PERFORMANCE.md). Run inside the build lock:
//   obuild build/bin/oar_fused_linear_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"

namespace oar::bench {
namespace {

struct Shape {
  const char* name;
  int64_t m, k, n;
};
constexpr Shape kShapes[] = {{"64x256x256", 64, 256, 256}, {"512x1024x1024", 512, 1024, 1024}};

void Run(benchmark::State& state, const Shape& s, bool fused) {
  const Device cpu("cpu:0");
  Generator g(1);
  const Tensor x = randn({s.m, s.k}, g, 0, 1, DType::kFloat32, cpu), w = randn({s.k, s.n}, g, 0, 0.05, DType::kFloat32, cpu);
  const Tensor b = randn({s.n}, g, 0, 0.1, DType::kFloat32, cpu);
  // The two must agree before either is timed.
  const std::vector<float> a = fused_linear(x, w, b, FusedActivation::kRelu).ToVector<float>();
  const std::vector<float> c = relu(matmul(x, w) + b).ToVector<float>();
  for (size_t i = 0; i < a.size(); i += 97) {
    if (std::abs(a[i] - c[i]) > 1e-4f * (1 + std::abs(c[i]))) {
      state.SkipWithError("fused_linear and matmul + add + relu disagree");
      return;
    }
  }
  for (auto _ : state) {
    Tensor y = fused ? fused_linear(x, w, b, FusedActivation::kRelu) : relu(matmul(x, w) + b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(s.m * s.k * s.n),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

class Collect : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred || (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median")) continue;
      times[r.run_name.function_name] = r.real_accumulated_time / static_cast<double>(r.iterations);
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> times;
};

}  // namespace
}  // namespace oar::bench

int main(int argc, char** argv) {
  using namespace oar::bench;
  for (const Shape& s : kShapes) {
    benchmark::RegisterBenchmark((std::string("fused_linear_relu/") + s.name).c_str(),
                                 [&s](benchmark::State& st) { Run(st, s, true); })
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("matmul_add_relu/") + s.name).c_str(),
                                 [&s](benchmark::State& st) { Run(st, s, false); })
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  Collect reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nfused_linear against matmul + add + relu (eager, cpu, float32, same run):\n");
  for (const Shape& s : kShapes) {
    const auto f = reporter.times.find(std::string("fused_linear_relu/") + s.name);
    const auto u = reporter.times.find(std::string("matmul_add_relu/") + s.name);
    if (f == reporter.times.end() || u == reporter.times.end()) continue;
    std::printf("  [%ld, %ld] x [%ld, %ld]: fused %.1f us, unfused %.1f us, unfused / fused = %.2fx\n",
                static_cast<long>(s.m), static_cast<long>(s.k), static_cast<long>(s.k), static_cast<long>(s.n),
                f->second * 1e6, u->second * 1e6, u->second / f->second);
  }
  oar::runtime::Runtime::DrainAtExit();
  return 0;
}
