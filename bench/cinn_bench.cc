// CINN against its peers on [4096, 4096] float32 (issue 19's targets), all in one run on the cpu device:
//   copy        the machine's limit: OpenMP copies of the same bytes (read x, write out), one with ordinary
//               stores and one with non-temporal stores (no read of the destination); the faster is the limit
//   rms_norm    x * rsqrt(mean(x * x, -1) + eps) * w written with primitive ops: Oar eager (composed),
//               CINN (captured, fused, compiled), a hand-written fused OpenMP kernel, libtorch composed
//   softmax     from primitives (max, sub, exp, sum, div): CINN; Oar's softmax kernel; libtorch
//   layer_norm  from primitives: CINN; Oar's layer_norm kernel; libtorch
//   compile     a group's C kernel compiled cold (empty cache) and served from the plugin's disk cache
// The summary prints each ratio with its target and PASS/MISS.
//   build/bin/oar_cinn_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "core/autograd/autograd.h"
#include "core/compiler/compiler.h"
#include "core/jit/capture.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/runtime/compiler.h"
#include "core/runtime/runtime.h"
#include "core/scheduler/executor.h"

namespace oar::bench {
namespace {

constexpr int64_t kN = 4096;
constexpr double kBytes = 2.0 * kN * kN * sizeof(float);  // read x once, write the result once
const Device kCpu("cpu:0");

enum Pattern { kRms = 0, kSoftmax = 1, kLayerNorm = 2 };

Tensor Composed(Pattern p, const Tensor& x, const Tensor& w, const Tensor& b) {
  switch (p) {
    case kRms: return rms_norm(x, 1, w, 1e-6);
    case kSoftmax: {
      const Tensor e = exp(x - amax(x, {-1}, true));
      return e / sum(e, {-1}, true);
    }
    case kLayerNorm: {
      const Tensor d = x - mean(x, {-1}, true);
      return d * rsqrt(mean(d * d, {-1}, true) + 1e-5) * w + b;
    }
  }
  return {};
}

struct Data {
  Tensor x, w, b;
  Data() {
    Generator g(1);
    x = randn({kN, kN}, g);
    w = randn({kN}, g);
    b = randn({kN}, g);
  }
};
Data& GetData() {
  static Data d;
  return d;
}

struct Compiled {
  ir::IrContext ctx;
  std::unique_ptr<ir::Program> program;
  std::unique_ptr<scheduler::Executor> exec;
  size_t groups = 0;
};

Compiled& GetCompiled(Pattern p) {
  static std::map<int, std::unique_ptr<Compiled>> cache;
  auto& slot = cache[p];
  if (slot) return *slot;
  compiler::RegisterCinn();
  slot = std::make_unique<Compiled>();
  Data& d = GetData();
  Tensor w = d.w, b = d.b;
  jit::CaptureOptions o;
  o.state = {{"w", &w}, {"b", &b}};
  const std::vector<jit::InputSpec> specs = {jit::InputSpec::Of("x", d.x)};
  slot->program = jit::Capture(
                      slot->ctx,
                      [&](std::span<const Tensor> in) {
                        NoGradGuard no_grad;
                        return std::vector<Tensor>{Composed(p, in[0], w, b)};
                      },
                      specs, std::vector<Tensor>{d.x}, kCpu, o)
                      .program;
  slot->groups = compiler::FuseGroups(*slot->program).groups;
  slot->exec = std::make_unique<scheduler::Executor>(*slot->program, kCpu);
  return *slot;
}

bool CheckClose(benchmark::State& state, const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.ToVector<float>(), e = want.ToVector<float>();
  for (size_t i = 0; i < g.size(); i += 4099) {
    if (!(std::fabs(g[i] - e[i]) <= 1e-4 * (1 + std::fabs(e[i])))) {
      state.SkipWithError(fmt::format("wrong result at {}: {} vs {}", i, g[i], e[i]).c_str());
      return false;
    }
  }
  return true;
}

static_assert(kN * kN == kStreamElements, "CopyLimit copies kStreamElements floats");

void Eager(benchmark::State& state, Pattern p) {
  Data& d = GetData();
  NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = Composed(p, d.x, d.w, d.b);
    runtime::Runtime::Get().Context(kCpu).Synchronize();
    benchmark::DoNotOptimize(y.data_ptr());
  }
  SetByteRate(state, kBytes);
}

void EagerKernel(benchmark::State& state, Pattern p) {  // Oar's own softmax / layer_norm kernels
  Data& d = GetData();
  NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = p == kSoftmax ? softmax(d.x, -1) : layer_norm(d.x, 1, d.w, d.b, 1e-5);
    runtime::Runtime::Get().Context(kCpu).Synchronize();
    benchmark::DoNotOptimize(y.data_ptr());
  }
  SetByteRate(state, kBytes);
}

void Cinn(benchmark::State& state, Pattern p) {
  Compiled& c = GetCompiled(p);
  Data& d = GetData();
  if (c.groups != 1) {
    state.SkipWithError(fmt::format("expected one fusion group, got {}", c.groups).c_str());
    return;
  }
  const std::vector<Tensor> in = {d.x};
  {
    NoGradGuard no_grad;
    if (!CheckClose(state, c.exec->Run(in)[0], Composed(p, d.x, d.w, d.b))) return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(c.exec->Run(in)[0].data_ptr());
  state.counters["interpreted"] = static_cast<double>(compiler::Stats().interpreted);
  SetByteRate(state, kBytes);
}

// The hand-written fused RMSNorm: one parallel loop over rows, a vectorised sum of squares, one write pass.
void HandFused(benchmark::State& state) {
  Data& d = GetData();
  const std::vector<float> xv = d.x.ToVector<float>(), wv = d.w.ToVector<float>();
  std::vector<float> out(xv.size());
  const float* x = xv.data();
  const float* w = wv.data();
  float* o = out.data();
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < kN; ++r) {
      const float* xr = x + r * kN;
      float* orow = o + r * kN;
      float acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t j = 0; j < kN; ++j) acc += xr[j] * xr[j];
      const float scale = 1.0f / std::sqrt(acc / static_cast<float>(kN) + 1e-6f);
#pragma omp simd
      for (int64_t j = 0; j < kN; ++j) orow[j] = xr[j] * scale * w[j];
    }
    benchmark::DoNotOptimize(o);
    benchmark::ClobberMemory();
  }
  SetByteRate(state, kBytes);
}

// Compile time of one group's C kernel: cold (a source never seen, empty cache folder) and a disk-cache hit.
void Compile(benchmark::State& state, bool hit) {
  if (runtime::CompilerLanguages(kCpu).empty()) {
    state.SkipWithError("cpu has no usable C compiler");
    return;
  }
  static int serial = 0;
  const std::string base = "void oar_kernel(void* const* args, long task_begin, long task_end) {\n"
                           "  float* out = *(float* const*)args[0];\n"
                           "  for (long t = task_begin; t < task_end; ++t) out[t] = (float)t * ";
  for (auto _ : state) {
    const std::string src = base + std::to_string(hit ? 1 : ++serial + 1000 * ::getpid()) + ".0f;\n}\n";
    runtime::CompileRequest req{runtime::SourceLanguage::kC, src, {}, "bench"};
    benchmark::DoNotOptimize(runtime::CompiledModule::Compile(kCpu, req));
  }
}

struct Target {
  const char* what;
  const char* fast;
  const char* slow;
  double at_least;  // fast's speed over slow's
};

void Summary(const std::map<std::string, double>& times) {
  const Target targets[] = {
      {"rms_norm: CINN vs copy bandwidth", "rms_norm/cinn", "copy", 0.90},
      {"rms_norm: CINN vs hand-fused kernel", "rms_norm/cinn", "rms_norm/hand_fused", 1.10},
      {"rms_norm: CINN vs libtorch composed", "rms_norm/cinn", "rms_norm/torch", 1.00},
      {"rms_norm: CINN vs Oar eager composed", "rms_norm/cinn", "rms_norm/eager", 3.50},
      {"softmax: CINN vs copy bandwidth", "softmax/cinn", "copy", 0.80},
      {"softmax: CINN vs Oar's softmax kernel", "softmax/cinn", "softmax/kernel", 1.00},
      {"softmax: CINN vs libtorch", "softmax/cinn", "softmax/torch", 1.00},
      {"layer_norm: CINN vs copy bandwidth", "layer_norm/cinn", "copy", 0.80},
      {"layer_norm: CINN vs Oar's layer_norm kernel", "layer_norm/cinn", "layer_norm/kernel", 1.00},
      {"layer_norm: CINN vs libtorch", "layer_norm/cinn", "layer_norm/torch", 1.00},
  };
  std::printf("\nCINN [%lld, %lld] float32, %d threads (speed ratio = slower's time / faster's time):\n",
              static_cast<long long>(kN), static_cast<long long>(kN), omp_get_max_threads());
  // The limit is the faster of the two copies.
  std::map<std::string, double> t = times;
  for (const char* k : {"copy/loop", "copy/nontemporal"}) {
    if (auto it = times.find(k); it != times.end() && (!t.count("copy") || it->second < t["copy"])) t["copy"] = it->second;
  }
  if (t.count("copy")) {
    std::printf("  copy = the faster of: ordinary stores %s, non-temporal stores %s\n",
                times.count("copy/loop") ? fmt::format("{:.2f} ms", times.at("copy/loop") * 1e3).c_str() : "not run",
                times.count("copy/nontemporal") ? fmt::format("{:.2f} ms", times.at("copy/nontemporal") * 1e3).c_str()
                                                : "not run");
  }
  for (const Target& x : targets) {
    auto f = t.find(x.fast), s = t.find(x.slow);
    if (f == t.end() || s == t.end()) {
      std::printf("  %-46s  not measured\n", x.what);
      continue;
    }
    const double ratio = s->second / f->second;
    std::printf("  %-46s  %6.2fx  (target >= %.2fx)  %s\n", x.what, ratio, x.at_least,
                ratio >= x.at_least ? "PASS" : "MISS");
  }
  for (const char* k : {"compile/cold", "compile/cache_hit"}) {
    if (auto it = t.find(k); it != t.end()) std::printf("  %-46s  %8.2f ms\n", k, it->second * 1e3);
  }
}

class Collect : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      // With --benchmark_repetitions the summary uses the median (not the stddev or cv aggregates).
      if (r.error_occurred || (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median")) continue;
      times[r.run_name.function_name] = r.real_accumulated_time / static_cast<double>(r.iterations);  // s
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> times;
};

}  // namespace
}  // namespace oar::bench

int main(int argc, char** argv) {
  using namespace oar::bench;
  namespace fs = std::filesystem;
  const fs::path cache = fs::temp_directory_path() / fmt::format("oar_cinn_bench_cache_{}", ::getpid());
  ::setenv("OAR_CACHE_DIR", cache.c_str(), 1);  // cold compiles really are cold
  benchmark::RegisterBenchmark("copy/loop", [](benchmark::State& s) { CopyLimit(s, CopyKind::kLoop); })
      ->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("copy/nontemporal", [](benchmark::State& s) { CopyLimit(s, CopyKind::kNonTemporal); })
      ->UseRealTime()->Unit(benchmark::kMillisecond);
  const std::pair<Pattern, const char*> patterns[] = {{kRms, "rms_norm"}, {kSoftmax, "softmax"}, {kLayerNorm, "layer_norm"}};
  for (const auto& [p, name] : patterns) {
    const Pattern pat = p;
    benchmark::RegisterBenchmark((std::string(name) + "/cinn").c_str(), [pat](benchmark::State& s) { Cinn(s, pat); })
        ->UseRealTime()->Unit(benchmark::kMillisecond);
    if (pat == kRms) {
      benchmark::RegisterBenchmark("rms_norm/eager", [](benchmark::State& s) { Eager(s, kRms); })
          ->UseRealTime()->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark("rms_norm/hand_fused", HandFused)->UseRealTime()->Unit(benchmark::kMillisecond);
    } else {
      benchmark::RegisterBenchmark((std::string(name) + "/kernel").c_str(),
                                   [pat](benchmark::State& s) { EagerKernel(s, pat); })
          ->UseRealTime()->Unit(benchmark::kMillisecond);
    }
#ifdef OAR_BENCH_HAVE_TORCH
    benchmark::RegisterBenchmark((std::string(name) + "/torch").c_str(), [pat](benchmark::State& s) {
      TorchSetThreads(omp_get_max_threads());
      TorchRowNorm(s, static_cast<int>(pat), kN, kN);
      SetByteRate(s, kBytes);
    })->UseRealTime()->Unit(benchmark::kMillisecond);
#endif
  }
  benchmark::RegisterBenchmark("compile/cold", [](benchmark::State& s) { Compile(s, false); })
      ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(5);
  benchmark::RegisterBenchmark("compile/cache_hit", [](benchmark::State& s) { Compile(s, true); })
      ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(20);
  benchmark::Initialize(&argc, argv);
  Collect reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  Summary(reporter.times);
  std::error_code ec;
  fs::remove_all(cache, ec);
  return 0;
}
