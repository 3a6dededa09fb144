// oar_gpu_bench: the cuda plugin, reached through the core like any user would, against the vendor
// library called directly and against the device's measured copy bandwidth, in the same run.
//
//   matmul/4096/f32|bf16/oar     oar::matmul on cuda:0 (plugin -> cuBLAS or the tiled kernel)
//   matmul/4096/f32|bf16/cublas  cublasGemmEx on the same sizes, handle made once     target >= 90 %
//   add/2^26/oar                 oar::add over 2^26 float32 (2 reads + 1 write)
//   copy/2^26/cudaMemcpy         device-to-device cudaMemcpyAsync (1 read + 1 write)   target >= 70 %
//
// Without a CUDA device (or without the cuda plugin) the program prints why and exits 0 with every case
// skipped: it must not fail a machine that has no GPU. Exit status 1 only when a case errs.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <string>

#include "core/base/error.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "core/runtime/stream.h"

namespace oar::bench {
namespace {

constexpr int64_t kGemm = 4096;
constexpr double kGemmFlops = 2.0 * kGemm * kGemm * kGemm;
constexpr int64_t kElements = int64_t{1} << 26;
constexpr double kBytes = static_cast<double>(kElements) * sizeof(float);

const Device& Gpu() {
  static const Device gpu("cuda", 0);
  return gpu;
}

void Rate(benchmark::State& state, const char* name, double per_iteration) {
  state.counters[name] =
      benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

template <typename Fn>
void Guarded(benchmark::State& state, Fn&& fn) {
  try {
    fn(state);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

bool CudaOk(benchmark::State& state, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  state.SkipWithError(fmt::format("{} failed: {}", what, cudaGetErrorString(e)).c_str());
  return false;
}

// ---- matmul ---------------------------------------------------------------------------------------

void OarMatmul(benchmark::State& state, DType dtype) {
  Generator gen(1);
  const Tensor a = randn({kGemm, kGemm}, gen, 0, 1, DType::kFloat32, Gpu()).to(dtype);
  const Tensor b = randn({kGemm, kGemm}, gen, 0, 1, DType::kFloat32, Gpu()).to(dtype);
  {  // a result worth timing: compare one row with the cpu plugin
    const Tensor c = matmul(a, b).to(DType::kFloat32).to(Device("cpu", 0));
    const Tensor ref = matmul(a.to(DType::kFloat32).to(Device("cpu", 0)), b.to(DType::kFloat32).to(Device("cpu", 0)));
    const double err = amax(abs(sub(c, ref))).item<float>();
    if (err > (dtype == DType::kFloat32 ? 1e-2 : 1.0)) {
      state.SkipWithError(fmt::format("matmul differs from cpu by {}", err).c_str());
      return;
    }
  }
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    runtime::Synchronize(Gpu());
    benchmark::DoNotOptimize(c.data_ptr());
  }
  Rate(state, "FLOP/s", kGemmFlops);
}

void CublasMatmul(benchmark::State& state, cudaDataType_t type, size_t element) {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  const size_t bytes = static_cast<size_t>(kGemm * kGemm) * element;
  if (!CudaOk(state, cudaSetDevice(0), "cudaSetDevice") || !CudaOk(state, cudaMalloc(&a, bytes), "cudaMalloc") ||
      !CudaOk(state, cudaMalloc(&b, bytes), "cudaMalloc") || !CudaOk(state, cudaMalloc(&c, bytes), "cudaMalloc")) {
    return;
  }
  cudaMemset(a, 0, bytes);
  cudaMemset(b, 0, bytes);
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("cublasCreate failed");
  } else {
    const float alpha = 1, beta = 0;
    for (auto _ : state) {
      const cublasStatus_t s =
          cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, kGemm, kGemm, kGemm, &alpha, b, type, kGemm, a, type, kGemm,
                       &beta, c, type, kGemm, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (s != CUBLAS_STATUS_SUCCESS) {
        state.SkipWithError(cublasGetStatusString(s));
        break;
      }
      cudaDeviceSynchronize();
    }
    cublasDestroy(handle);
    Rate(state, "FLOP/s", kGemmFlops);
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

// ---- bandwidth ------------------------------------------------------------------------------------

void OarAdd(benchmark::State& state) {
  const Tensor a = full({kElements}, 1.0, DType::kFloat32, Gpu());
  const Tensor b = full({kElements}, 2.0, DType::kFloat32, Gpu());
  if (amax(abs(sub(add(a, b), 3.0))).to(Device("cpu", 0)).item<float>() != 0.0f) {
    state.SkipWithError("oar::add(1, 2) != 3 on cuda:0");
    return;
  }
  for (auto _ : state) {
    Tensor c = add(a, b);
    runtime::Synchronize(Gpu());
    benchmark::DoNotOptimize(c.data_ptr());
  }
  Rate(state, "B/s", 3 * kBytes);
}

void DeviceCopy(benchmark::State& state) {
  void *src = nullptr, *dst = nullptr;
  if (!CudaOk(state, cudaSetDevice(0), "cudaSetDevice") || !CudaOk(state, cudaMalloc(&src, kBytes), "cudaMalloc") ||
      !CudaOk(state, cudaMalloc(&dst, kBytes), "cudaMalloc")) {
    return;
  }
  cudaMemset(src, 0, kBytes);
  for (auto _ : state) {
    if (!CudaOk(state, cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync")) break;
    cudaDeviceSynchronize();
  }
  Rate(state, "B/s", 2 * kBytes);
  cudaFree(src);
  cudaFree(dst);
}

/// Keeps every run's counters for the summary.
class Recorder : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) any_error = true;
      for (const auto& [name, counter] : r.counters) rates[r.benchmark_name()] = counter.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> rates;
  bool any_error = false;
};

void Summary(const Recorder& r) {
  auto line = [&](const char* label, const std::string& ours, const std::string& peer, double target) {
    auto a = r.rates.find(ours), b = r.rates.find(peer);
    if (a == r.rates.end() || b == r.rates.end() || b->second <= 0) return;
    const double ratio = a->second / b->second;
    std::cout << fmt::format("  {:<24}{:.3g} vs {:.3g} -> {:.1f}% (target >= {:.0f}%)   {}\n", label, a->second,
                             b->second, 100 * ratio, 100 * target, ratio >= target ? "PASS" : "MISS");
  };
  std::cout << "\nSummary (oar through the cuda plugin vs the peer measured in this run)\n";
  line("matmul 4096^3 f32", "matmul/4096/f32/oar", "matmul/4096/f32/cublas", 0.9);
  line("matmul 4096^3 bf16", "matmul/4096/bf16/oar", "matmul/4096/bf16/cublas", 0.9);
  line("add 2^26 f32 (B/s)", "add/2^26/oar", "copy/2^26/cudaMemcpy", 0.7);
}

}  // namespace
}  // namespace oar::bench

int main(int argc, char** argv) {
  using namespace oar::bench;  // NOLINT
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    oar::runtime::Runtime::Get().Context(Gpu());
  } catch (const oar::Error& e) {
    std::cout << "oar_gpu_bench: SKIPPED, no cuda:0 device: " << e.ToString() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cout << "oar_gpu_bench: SKIPPED, no cuda:0 device: " << e.what() << "\n";
    return 0;
  }
  auto reg = [](const char* name, auto fn) {
    benchmark::RegisterBenchmark(name, [fn](benchmark::State& s) { Guarded(s, fn); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  };
  reg("matmul/4096/f32/oar", [](benchmark::State& s) { OarMatmul(s, oar::DType::kFloat32); });
  reg("matmul/4096/f32/cublas", [](benchmark::State& s) { CublasMatmul(s, CUDA_R_32F, 4); });
  reg("matmul/4096/bf16/oar", [](benchmark::State& s) { OarMatmul(s, oar::DType::kBFloat16); });
  reg("matmul/4096/bf16/cublas", [](benchmark::State& s) { CublasMatmul(s, CUDA_R_16BF, 2); });
  reg("add/2^26/oar", [](benchmark::State& s) { OarAdd(s); });
  reg("copy/2^26/cudaMemcpy", [](benchmark::State& s) { DeviceCopy(s); });
  Recorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);
  Summary(recorder);
  benchmark::Shutdown();
  return recorder.any_error ? 1 : 0;
}
