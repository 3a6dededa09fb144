// oar_bench: the core's performance against a peer or the machine's limit, measured in the same run.
// The targets are issue 18's:
//
//   dispatch   oar::add of two 1-element float32 tensors on cpu:0 (schema, allocation, plugin kernel
//              through the C ABI) vs torch::add                   target <= 1000 ns and <= 0.33x libtorch
//   allocator  CachingAllocator::Malloc + Free of 4 KiB (malloc/free shown for scale)    target <= 50 ns
//   matmul     oar::matmul 1024^3 float32 vs a oneDNN matmul primitive created once   target >= 90 %
//   add        oar::add over 2^24 float32 (2 reads + 1 write) vs the faster of two     target >= 90 %
//              parallel copies (ordinary or non-temporal stores; 1 read + 1 write)
//   oplib      every kernel the example models use (softmax, log_softmax, layer_norm, rms_norm composed,
//              elementwise, reductions over the last and the first axis, conv2d and pooling forward and
//              backward, embedding, cross-entropy) vs libtorch on the same shapes   target <= 1.0x
//   train      one training step of each example model vs its libtorch twin        target <= 0.67x
//
// Every case uses the OpenMP default thread count (libtorch is set to the same). Cases that run on one
// thread (dispatch, allocator) are timed in CPU time, which other processes on the machine do not
// inflate; threaded cases in real time, and the summary says when the machine was too busy for those to
// compare well. After the Google Benchmark table a "Summary" block prints one ratio line per target
// with PASS or MISS. Any Google Benchmark flag works (--benchmark_filter; --benchmark_repetitions: the
// summary then uses medians).
// The exit status is 1 when a case failed (an exception, a wrong result), not when a target is missed:
// a shared or throttled machine must not turn a build red.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bench/bench.h"
#include "core/autograd/autograd.h"
#include "core/base/error.h"
#include "core/ops/nn.h"
#ifdef OAR_BENCH_HAVE_EXAMPLES
#include "examples/models.h"
#endif
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "core/runtime/stream.h"

namespace oar::bench {

namespace {

// A function, not a namespace-scope constant: Device interns its type name in a registry that is
// itself a namespace-scope object of another translation unit (static initialisation order).
const Device& Cpu() {
  static const Device cpu("cpu", 0);
  return cpu;
}


/// Runs `fn`; an exception becomes a benchmark error (reported, and the exit status becomes 1).
template <typename Fn>
void Guarded(benchmark::State& state, Fn&& fn) {
  try {
    fn(state);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

const float* FloatData(const Tensor& t) { return static_cast<const float*>(t.data_ptr()); }

// ---- dispatch -----------------------------------------------------------------------------------

/// The whole eager path for a kernel that costs nothing. The cpu plugin runs kernels synchronously, so
/// the result is complete when add returns; `synchronize` also waits on the device each iteration, to
/// show what that costs.
void OarDispatchAdd(benchmark::State& state, bool synchronize) {
  const Tensor a = full({kDispatchElements}, 1.0, DType::kFloat32, Cpu());
  const Tensor b = full({kDispatchElements}, 2.0, DType::kFloat32, Cpu());
  if (add(a, b).item<float>() != 3.0f) {
    state.SkipWithError("oar::add(1, 2) != 3");
    return;
  }
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
    if (synchronize) runtime::Synchronize(Cpu());
  }
}

// ---- allocator ----------------------------------------------------------------------------------

void OarAllocator(benchmark::State& state) {
  runtime::CachingAllocator& allocator = runtime::Runtime::Get().Context(Cpu()).allocator();
  allocator.Free(allocator.Malloc(kAllocBytes));  // the segment exists before timing starts
  for (auto _ : state) {
    runtime::CachingAllocator::Block* block = allocator.Malloc(kAllocBytes);
    benchmark::DoNotOptimize(block);
    allocator.Free(block);
  }
}

/// The C library's allocator on the same size: not a target, a sense of scale.
void MallocFree(benchmark::State& state) {
  for (auto _ : state) {
    void* p = std::malloc(kAllocBytes);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}

// ---- matmul -------------------------------------------------------------------------------------

void OarMatmul(benchmark::State& state) {
  Generator gen(1);
  const Tensor a = randn({kMatmulSize, kMatmulSize}, gen, 0, 1, DType::kFloat32, Cpu());
  const Tensor b = randn({kMatmulSize, kMatmulSize}, gen, 0, 1, DType::kFloat32, Cpu());
  {
    const Tensor c = matmul(a, b);
    runtime::Synchronize(Cpu());
    if (!SpotCheckMatmul(state, FloatData(a), FloatData(b), FloatData(c), kMatmulSize)) return;
  }
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    runtime::Synchronize(Cpu());
    benchmark::DoNotOptimize(c.data_ptr());
  }
  SetFlopRate(state, kMatmulFlops);
}

/// oneDNN called directly: one primitive and one set of memory objects for the whole run, the best
/// any framework on top of it can do.
void OneDnnMatmul(benchmark::State& state) {
  using dnnl::memory;
  const int64_t n = kMatmulSize;
  AlignedFloats a(n * n), b(n * n), c(n * n);
  Generator gen(1);
  for (float* m : {a.get(), b.get()}) {
    for (int64_t i = 0; i < n * n; ++i) m[i] = static_cast<float>(gen.NextNormal());
  }
  c.ParallelFill(0);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc md({n, n}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul primitive(dnnl::matmul::primitive_desc(dnnl::matmul::desc(md, md, md), engine));
  const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(md, engine, a.get())},
                                             {DNNL_ARG_WEIGHTS, memory(md, engine, b.get())},
                                             {DNNL_ARG_DST, memory(md, engine, c.get())}};
  primitive.execute(stream, args);
  stream.wait();
  if (!SpotCheckMatmul(state, a.get(), b.get(), c.get(), n)) return;
  for (auto _ : state) {
    primitive.execute(stream, args);
    stream.wait();
  }
  SetFlopRate(state, kMatmulFlops);
}

// ---- bandwidth ----------------------------------------------------------------------------------

void OarStreamAdd(benchmark::State& state) {
  const Tensor a = full({kStreamElements}, 1.0, DType::kFloat32, Cpu());
  const Tensor b = full({kStreamElements}, 2.0, DType::kFloat32, Cpu());
  {
    const Tensor c = add(a, b);
    runtime::Synchronize(Cpu());
    if (FloatData(c)[0] != 3.0f || FloatData(c)[kStreamElements - 1] != 3.0f) {
      state.SkipWithError("oar::add(1, 2) != 3");
      return;
    }
  }
  for (auto _ : state) {
    Tensor c = add(a, b);
    runtime::Synchronize(Cpu());
    benchmark::DoNotOptimize(c.data_ptr());
  }
  SetByteRate(state, 3 * kStreamBytes);
}


// ---- op library: conv2d, softmax, layer_norm, rms_norm composed of primitives ---------------------

bool IsBackward(OpCase which) {
  return which == OpCase::kConv2dBackward || which == OpCase::kMaxPool2dBackward ||
         which == OpCase::kAvgPool2dBackward || which == OpCase::kCrossEntropyBackward;
}

/// int64 tensor of `n` BenchIndex values below `bound`.
Tensor BenchIndices(int64_t n, int64_t bound, const Device& device) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = BenchIndex(i, bound);
  return FromVector(v, {n}, device);
}

void OarOpCase(benchmark::State& state, OpCase which) {
  using enum OpCase;
  const Device& cpu = Cpu();
  Generator gen(2);
  auto normal = [&](const Dims& shape) { return randn(shape, gen, 0, 1, DType::kFloat32, cpu); };
  Tensor x, w, b, g;
  switch (which) {
    case kConv2d:
    case kConv2dBackward:
      x = normal({kConvN, kConvC, kConvHW, kConvHW});
      w = normal({kConvO, kConvC, 3, 3});
      g = normal({kConvN, kConvO, kConvHW, kConvHW});
      break;
    case kMaxPool2d:
    case kMaxPool2dBackward:
    case kAvgPool2d:
    case kAvgPool2dBackward:
      x = normal({kPoolN, kPoolC, kPoolHW, kPoolHW});
      g = normal({kPoolN, kPoolC, kPoolHW / 2, kPoolHW / 2});
      break;
    case kEmbedding:
      w = normal({kEmbedRows, kEmbedDim});
      b = BenchIndices(kEmbedTokens, kEmbedRows, cpu);
      break;
    case kCrossEntropy:
    case kCrossEntropyBackward:
      x = normal({kCeRows, kCeClasses});
      b = BenchIndices(kCeRows, kCeClasses, cpu);
      break;
    default:
      x = normal({kRows, kCols});
      w = normal({kCols});
      b = normal({kCols});
      g = normal({kRows, kCols});
      break;
  }
  auto run = [&]() -> Tensor {
    switch (which) {
      case kConv2d:
      case kConv2dBackward: return conv2d(x, w, Tensor(), {1, 1}, {1, 1});
      case kSoftmax: return softmax(x, -1);
      case kSoftmaxAxis0: return softmax(x, 0);
      case kLogSoftmax: return log_softmax(x, -1);
      case kLayerNorm: return layer_norm(x, 1, w, b, 1e-5);
      case kRmsNormComposed: return rms_norm(x, 1, w, 1e-6);
      case kExp: return exp(x);
      case kTanh: return tanh(x);
      case kSigmoid: return sigmoid(x);
      case kRelu: return relu(x);
      case kAdd: return add(x, g);
      case kMul: return mul(x, g);
      case kAddRowBroadcast: return add(x, b);
      case kSumLast: return sum(x, {-1});
      case kSumFirst: return sum(x, {0});
      case kMeanLast: return mean(x, {-1});
      case kMeanFirst: return mean(x, {0});
      case kMaxLast: return amax(x, {-1});
      case kMaxFirst: return amax(x, {0});
      case kMaxPool2d:
      case kMaxPool2dBackward: return max_pool2d(x, {2, 2}, {2, 2});
      case kAvgPool2d:
      case kAvgPool2dBackward: return avg_pool2d(x, {2, 2}, {2, 2});
      case kEmbedding: return embedding(w, b);
      case kCrossEntropy:
      case kCrossEntropyBackward: return cross_entropy(x, b);
    }
    return {};
  };
  if (!IsBackward(which)) {
    for (auto _ : state) {
      Tensor y = run();
      benchmark::DoNotOptimize(y.data_ptr());
    }
    return;
  }
  // Forward and backward: the gradients of the float inputs, seeded with g (1 for the scalar loss).
  x.set_requires_grad(true);
  std::vector<Tensor> wrt{x};
  if (which == kConv2dBackward) {
    w.set_requires_grad(true);
    wrt.push_back(w);
  }
  for (auto _ : state) {
    const Tensor y = run();
    std::vector<Tensor> grads = oar::grad({y}, wrt, g.defined() ? std::vector<Tensor>{g} : std::vector<Tensor>{});
    benchmark::DoNotOptimize(grads[0].data_ptr());
  }
}

// ---- training step of the example models (examples/models.cc) -----------------------------------

#ifdef OAR_BENCH_HAVE_EXAMPLES
/// One TrainStep of the example `kind` per iteration (forward, loss, backward, optimiser step, the loss
/// read back), walking through its default learning-rate schedule.
void OarTrainStep(benchmark::State& state, const std::string& kind) {
  std::unique_ptr<examples::Example> e = examples::MakeExample(kind, Cpu(), 3);
  const int64_t total = e->default_steps();
  int64_t step = 0;
  for (auto _ : state) benchmark::DoNotOptimize(e->TrainStep(step++ % total, total));
}

#ifdef OAR_BENCH_HAVE_TORCH
/// The example's hyper-parameters, as it writes them into a checkpoint, and its parameter count: what its
/// libtorch twin is built from and checked against.
std::pair<nlohmann::json, int64_t> ExampleConfig(const std::string& kind) {
  std::unique_ptr<examples::Example> e = examples::MakeExample(kind, Cpu(), 3);
  return {nlohmann::json::parse(e->ConfigJson()), e->module().NumParameters()};
}

CnnConfig CnnTwin() {
  const auto [j, parameters] = ExampleConfig("cnn");
  return {.batch = j.at("batch"), .image = j.at("image"), .lr = j.at("lr"), .parameters = parameters};
}

LlamaConfig LlamaTwin() {
  const auto [j, parameters] = ExampleConfig("llama");
  return {.vocab = j.at("vocab_size"), .dim = j.at("dim"), .heads = j.at("heads"), .layers = j.at("layers"),
          .hidden = j.at("hidden"), .context = j.at("context"), .batch = j.at("batch"), .lr = j.at("lr"),
          .parameters = parameters};
}
#endif
#endif

// ---- registration -------------------------------------------------------------------------------

// Names the summary looks the results up by.
constexpr const char* kDispatchOar = "dispatch/add_1xf32/oar";
constexpr const char* kDispatchOarSync = "dispatch/add_1xf32/oar+sync";
constexpr const char* kDispatchTorch = "dispatch/add_1xf32/libtorch";
constexpr const char* kAllocOar = "allocator/4KiB/oar_caching";
constexpr const char* kAllocMalloc = "allocator/4KiB/malloc";
constexpr const char* kMatmulOar = "matmul/1024/oar";
constexpr const char* kMatmulOneDnn = "matmul/1024/onednn";
constexpr const char* kMatmulTorch = "matmul/1024/libtorch";
constexpr const char* kAddOar = "add/2^24xf32/oar";
constexpr const char* kAddCopyLoop = "add/2^24xf32/copy_loop";
constexpr const char* kAddCopyNonTemporal = "add/2^24xf32/copy_nontemporal";
constexpr const char* kAddTorch = "add/2^24xf32/libtorch";
constexpr const char* kAddTorchOut = "add/2^24xf32/libtorch_out";
struct OpLibCase {
  OpCase which;
  const char* label;
  const char* oar;
  const char* torch;
};
constexpr OpLibCase kOpLibCases[] = {
    {OpCase::kConv2d, "conv2d 8x32x32x32 3x3", "oplib/conv2d/oar", "oplib/conv2d/libtorch"},
    {OpCase::kConv2dBackward, "conv2d fwd+bwd", "oplib/conv2d_backward/oar", "oplib/conv2d_backward/libtorch"},
    {OpCase::kSoftmax, "softmax 512x1024", "oplib/softmax/oar", "oplib/softmax/libtorch"},
    {OpCase::kSoftmaxAxis0, "softmax axis 0", "oplib/softmax_axis0/oar", "oplib/softmax_axis0/libtorch"},
    {OpCase::kLogSoftmax, "log_softmax 512x1024", "oplib/log_softmax/oar", "oplib/log_softmax/libtorch"},
    {OpCase::kLayerNorm, "layer_norm 512x1024", "oplib/layer_norm/oar", "oplib/layer_norm/libtorch"},
    {OpCase::kRmsNormComposed, "rms_norm (composed)", "oplib/rms_norm_composed/oar",
     "oplib/rms_norm_composed/libtorch"},
    {OpCase::kExp, "exp 512x1024", "oplib/exp/oar", "oplib/exp/libtorch"},
    {OpCase::kTanh, "tanh 512x1024", "oplib/tanh/oar", "oplib/tanh/libtorch"},
    {OpCase::kSigmoid, "sigmoid 512x1024", "oplib/sigmoid/oar", "oplib/sigmoid/libtorch"},
    {OpCase::kRelu, "relu 512x1024", "oplib/relu/oar", "oplib/relu/libtorch"},
    {OpCase::kAdd, "add 512x1024", "oplib/add/oar", "oplib/add/libtorch"},
    {OpCase::kMul, "mul 512x1024", "oplib/mul/oar", "oplib/mul/libtorch"},
    {OpCase::kAddRowBroadcast, "add [512,1024]+[1024]", "oplib/add_row_broadcast/oar",
     "oplib/add_row_broadcast/libtorch"},
    {OpCase::kSumLast, "sum last axis", "oplib/sum_last/oar", "oplib/sum_last/libtorch"},
    {OpCase::kSumFirst, "sum first axis", "oplib/sum_first/oar", "oplib/sum_first/libtorch"},
    {OpCase::kMeanLast, "mean last axis", "oplib/mean_last/oar", "oplib/mean_last/libtorch"},
    {OpCase::kMeanFirst, "mean first axis", "oplib/mean_first/oar", "oplib/mean_first/libtorch"},
    {OpCase::kMaxLast, "amax last axis", "oplib/max_last/oar", "oplib/max_last/libtorch"},
    {OpCase::kMaxFirst, "amax first axis", "oplib/max_first/oar", "oplib/max_first/libtorch"},
    {OpCase::kMaxPool2d, "max_pool2d 2x2", "oplib/max_pool2d/oar", "oplib/max_pool2d/libtorch"},
    {OpCase::kMaxPool2dBackward, "max_pool2d fwd+bwd", "oplib/max_pool2d_backward/oar",
     "oplib/max_pool2d_backward/libtorch"},
    {OpCase::kAvgPool2d, "avg_pool2d 2x2", "oplib/avg_pool2d/oar", "oplib/avg_pool2d/libtorch"},
    {OpCase::kAvgPool2dBackward, "avg_pool2d fwd+bwd", "oplib/avg_pool2d_backward/oar",
     "oplib/avg_pool2d_backward/libtorch"},
    {OpCase::kEmbedding, "embedding 1024x256", "oplib/embedding/oar", "oplib/embedding/libtorch"},
    {OpCase::kCrossEntropy, "cross_entropy fwd", "oplib/cross_entropy/oar", "oplib/cross_entropy/libtorch"},
    {OpCase::kCrossEntropyBackward, "cross_entropy fwd+bwd", "oplib/cross_entropy_backward/oar",
     "oplib/cross_entropy_backward/libtorch"},
};
/// A training step of an example model (examples::MakeExample(kind)) and its libtorch twin.
struct TrainCase {
  const char* kind;
  const char* label;
  const char* oar;
  const char* torch;
};
constexpr TrainCase kTrainCases[] = {
    {"mlp", "mlp train step", "train/mlp_step/oar", "train/mlp_step/libtorch"},
    {"cnn", "cnn train step", "train/cnn_step/oar", "train/cnn_step/libtorch"},
    {"llama", "llama train step", "train/llama_step/oar", "train/llama_step/libtorch"},
};

/// How a case is timed. A case on one thread is measured in CPU time, which is its cost even when other
/// processes share the cores; a case that runs OpenMP threads is measured in real time (the CPU time of
/// the main thread alone would leave out the other threads' share).
enum class Clock { kCpu, kReal };

template <typename Fn>
void Register(const char* name, Clock clock, Fn fn) {
  benchmark::internal::Benchmark* b =
      benchmark::RegisterBenchmark(name, [fn](benchmark::State& state) { Guarded(state, fn); });
  if (clock == Clock::kReal) {
    b->UseRealTime()->Unit(benchmark::kMillisecond);
  } else {
    b->Unit(benchmark::kNanosecond);
  }
}

void RegisterAll() {
  using enum Clock;
  Register(kDispatchOar, kCpu, [](benchmark::State& s) { OarDispatchAdd(s, false); });
  Register(kDispatchOarSync, kCpu, [](benchmark::State& s) { OarDispatchAdd(s, true); });
#ifdef OAR_BENCH_HAVE_TORCH
  Register(kDispatchTorch, kCpu, TorchDispatchAdd);
#endif
  Register(kAllocOar, kCpu, OarAllocator);
  Register(kAllocMalloc, kCpu, MallocFree);
  Register(kMatmulOar, kReal, OarMatmul);
  Register(kMatmulOneDnn, kReal, OneDnnMatmul);
#ifdef OAR_BENCH_HAVE_TORCH
  Register(kMatmulTorch, kReal, TorchMatmul);
#endif
  Register(kAddOar, kReal, OarStreamAdd);
  Register(kAddCopyLoop, kReal, [](benchmark::State& s) { CopyLimit(s, CopyKind::kLoop); });
#ifdef __SSE2__
  Register(kAddCopyNonTemporal, kReal, [](benchmark::State& s) { CopyLimit(s, CopyKind::kNonTemporal); });
#endif
#ifdef OAR_BENCH_HAVE_TORCH
  Register(kAddTorch, kReal, [](benchmark::State& s) { TorchStreamAdd(s, false); });
  Register(kAddTorchOut, kReal, [](benchmark::State& s) { TorchStreamAdd(s, true); });
#endif
#ifdef OAR_BENCH_HAVE_EXAMPLES
  for (const TrainCase& c : kTrainCases) {
    const std::string kind = c.kind;
    Register(c.oar, kReal, [kind](benchmark::State& s) { OarTrainStep(s, kind); });
  }
#endif
#ifdef OAR_BENCH_HAVE_TORCH
  Register(kTrainCases[0].torch, kReal, TorchMlpTrainStep);
#ifdef OAR_BENCH_HAVE_EXAMPLES
  Register(kTrainCases[1].torch, kReal, [](benchmark::State& s) { TorchCnnTrainStep(s, CnnTwin()); });
  Register(kTrainCases[2].torch, kReal, [](benchmark::State& s) { TorchLlamaTrainStep(s, LlamaTwin()); });
#endif
#endif
  for (const OpLibCase& c : kOpLibCases) {
    const OpCase which = c.which;
    Register(c.oar, kReal, [which](benchmark::State& s) { OarOpCase(s, which); });
#ifdef OAR_BENCH_HAVE_TORCH
    Register(c.torch, kReal, [which](benchmark::State& s) { TorchOpCase(s, which); });
#endif
  }
}

// ---- reporting ----------------------------------------------------------------------------------

/// What the summary needs from one benchmark.
struct Result {
  double seconds = 0;  // per iteration, on the case's clock: real time, or CPU time for one-thread cases
  double real_seconds = 0;
  double cpu_seconds = 0;  // of the main thread
  bool real_time = false;  // the case is measured in real time (it runs OpenMP threads)
  std::map<std::string, double> counters;
  std::string error;  // non-empty: the case failed
  bool is_median = false;
};

/// The console table as usual, plus a record of every case's times and counters (the median when
/// --benchmark_repetitions asks for several).
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  using ConsoleReporter::ConsoleReporter;

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) Record(run);
    ConsoleReporter::ReportRuns(runs);
  }

  /// The case named `name`, or nullptr when it did not run (filtered out, not built).
  const Result* Find(std::string_view name) const {
    auto it = results_.find(std::string(name));
    return it == results_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Result>& results() const { return results_; }
  bool any_error() const {
    return std::any_of(results_.begin(), results_.end(), [](const auto& r) { return !r.second.error.empty(); });
  }

 private:
  void Record(const Run& run) {
    const bool median = run.run_type == Run::RT_Aggregate;
    if (median && run.aggregate_name != "median") return;
    Result& r = results_[run.run_name.function_name];
    if (r.is_median && !median) return;
    r.is_median = median;
    r.error = run.error_occurred ? (run.error_message.empty() ? "failed" : run.error_message) : "";
    r.real_time = run.run_name.time_type == "real_time";
    r.real_seconds = run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
    r.cpu_seconds = run.GetAdjustedCPUTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
    r.seconds = r.real_time ? r.real_seconds : r.cpu_seconds;
    r.counters.clear();
    for (const auto& [name, counter] : run.counters) r.counters[name] = counter.value;
  }

  std::map<std::string, Result> results_;
};

/// One summary line per target, e.g.
///   matmul 1024^3 f32   oar 95.1 GFLOP/s vs oneDNN 98.0 GFLOP/s -> 97.0% (target >= 90%)   PASS
/// A target whose cases did not run (filtered out) or failed gets a line saying so instead.
class Summary {
 public:
  Summary(const RecordingReporter& results, std::ostream& out) : results_(results), out_(out) {}

  void Print(int threads, const std::string& torch) {
    out_ << "\nSummary (" << threads << " OpenMP threads for every case; libtorch " << torch
         << "; one-thread cases in CPU time, threaded ones in real time)\n";
    Dispatch();
    Allocator();
    Matmul();
    Add();
    OpLibrary();
    Training();
    Load();
  }

 private:
  static constexpr bool kHaveTorch =
#ifdef OAR_BENCH_HAVE_TORCH
      true;
#else
      false;
#endif

  /// True when every case in `names` ran without error; otherwise prints one line saying which did not.
  bool Require(std::string_view label, std::initializer_list<const char*> names) {
    std::string missing;
    for (const char* name : names) {
      const Result* r = results_.Find(name);
      if (r == nullptr) {
        missing += fmt::format("{}{} not run", missing.empty() ? "" : "; ", name);
      } else if (!r->error.empty()) {
        missing += fmt::format("{}{} failed: {}", missing.empty() ? "" : "; ", name, r->error);
      }
    }
    if (!missing.empty()) out_ << fmt::format("  {:<22}{}\n", label, missing);
    return missing.empty();
  }
  /// A case that ran without error, or nullptr.
  const Result* Ok(const char* name) const {
    const Result* r = results_.Find(name);
    return r != nullptr && r->error.empty() ? r : nullptr;
  }
  static double Counter(const Result& r, const char* name) {
    auto it = r.counters.find(name);
    return it == r.counters.end() ? 0 : it->second;
  }
  void Line(std::string_view label, const std::string& text, bool pass) {
    out_ << fmt::format("  {:<22}{:<82} {}\n", label, text, pass ? "PASS" : "MISS");
  }
  void Note(const std::string& text) { out_ << fmt::format("  {:<22}{}\n", "", text); }
  /// Why a libtorch figure is absent.
  static std::string NoTorch(const char* name) {
    return kHaveTorch ? fmt::format("{} not run", name) : std::string("libtorch not found");
  }

  /// Oar's time against libtorch's for the same work, same shapes, threads and run; target: at most
  /// `target` times libtorch's (1: not slower).
  void VersusTorch(const char* label, const char* oar, const char* torch_name, double target = 1.0) {
    if (!Require(label, {oar})) return;
    const double ms = Ok(oar)->seconds * 1e3;
    if (const Result* torch = Ok(torch_name)) {
      const double ratio = ms / (torch->seconds * 1e3);
      Line(label, fmt::format("oar {:.3f} ms vs libtorch {:.3f} ms -> {:.2f}x (target <= {:.2f}x)", ms,
                              torch->seconds * 1e3, ratio, target),
           ratio <= target);
    } else {
      Note(fmt::format("{}: oar {:.3f} ms; {}", label, ms, NoTorch(torch_name)));
    }
  }

  void Training() {
    // Issue 18: each training step at least 1.5 times as fast as its libtorch twin.
    for (const TrainCase& c : kTrainCases) VersusTorch(c.label, c.oar, c.torch, 1 / 1.5);
  }

  void OpLibrary() {
    for (const OpLibCase& c : kOpLibCases) VersusTorch(c.label, c.oar, c.torch);
  }

  void Dispatch() {
    constexpr double kLimitNs = 1000;
    constexpr double kTarget = 0.33;  // issue 18: at least 3 times as fast as libtorch
    constexpr const char* kLabel = "dispatch add 1xf32";
    if (!Require(kLabel, {kDispatchOar})) return;
    const double ns = Ok(kDispatchOar)->seconds * 1e9;
    if (const Result* torch = Ok(kDispatchTorch)) {
      const double torch_ns = torch->seconds * 1e9;
      const double ratio = ns / torch_ns;
      Line(kLabel,
           fmt::format("oar {:.0f} ns vs libtorch {:.0f} ns -> {:.2f}x (target <= {:.2f}x, <= {:.0f} ns)", ns,
                       torch_ns, ratio, kTarget, kLimitNs),
           ratio <= kTarget && ns <= kLimitNs);
    } else {
      Line(kLabel,
           fmt::format("oar {:.0f} ns; {}, ratio not checked (target <= {:.0f} ns)", ns, NoTorch(kDispatchTorch),
                       kLimitNs),
           ns <= kLimitNs);
    }
    if (const Result* sync = Ok(kDispatchOarSync)) {
      Note(fmt::format("with runtime::Synchronize(cpu:0) each iteration: {:.0f} ns ({:+.0f} ns)", sync->seconds * 1e9,
                       sync->seconds * 1e9 - ns));
    }
  }

  void Allocator() {
    constexpr double kLimitNs = 50;
    constexpr const char* kLabel = "allocator 4 KiB";
    if (!Require(kLabel, {kAllocOar})) return;
    const double ns = Ok(kAllocOar)->seconds * 1e9;
    std::string peer;
    if (const Result* libc = Ok(kAllocMalloc)) {
      peer = fmt::format(" (malloc+free {:.0f} ns -> {:.2f}x)", libc->seconds * 1e9, ns / (libc->seconds * 1e9));
    }
    Line(kLabel, fmt::format("oar Malloc+Free {:.0f} ns{} (target <= {:.0f} ns)", ns, peer, kLimitNs), ns <= kLimitNs);
  }

  void Matmul() {
    constexpr double kTarget = 0.90;
    constexpr const char* kLabel = "matmul 1024^3 f32";
    if (!Require(kLabel, {kMatmulOar, kMatmulOneDnn})) return;
    const double oar = Counter(*Ok(kMatmulOar), "FLOP/s") / 1e9;
    const double dnnl = Counter(*Ok(kMatmulOneDnn), "FLOP/s") / 1e9;
    Line(kLabel,
         fmt::format("oar {:.1f} GFLOP/s vs oneDNN {:.1f} GFLOP/s -> {:.1f}% (target >= {:.0f}%)", oar, dnnl,
                     100 * oar / dnnl, 100 * kTarget),
         oar / dnnl >= kTarget);
    if (const Result* torch = Ok(kMatmulTorch)) {
      const double g = Counter(*torch, "FLOP/s") / 1e9;
      Note(fmt::format("libtorch torch::matmul {:.1f} GFLOP/s: oar is {:.2f}x libtorch", g, oar / g));
    } else {
      Note(NoTorch(kMatmulTorch));
    }
  }

  void Add() {
    constexpr double kTarget = 0.90;
    constexpr const char* kLabel = "add 2^24xf32";
    if (!Require(kLabel, {kAddOar, kAddCopyLoop})) return;
    const double oar = Counter(*Ok(kAddOar), "B/s") / 1e9;
    // The limit is the faster copy; which one wins depends on the machine.
    const double loop = Counter(*Ok(kAddCopyLoop), "B/s") / 1e9;
    const Result* nt_result = Ok(kAddCopyNonTemporal);
    const double nt = nt_result ? Counter(*nt_result, "B/s") / 1e9 : 0;
    const double copy = std::max(loop, nt);
    Line(kLabel,
         fmt::format("oar {:.1f} GB/s vs copy {:.1f} GB/s -> {:.1f}% (target >= {:.0f}%)", oar, copy, 100 * oar / copy,
                     100 * kTarget),
         oar / copy >= kTarget);
    Note(nt_result ? fmt::format("copy = the faster of: non-temporal stores {:.1f} GB/s, loop {:.1f} GB/s", nt, loop)
                   : fmt::format("copy = loop {:.1f} GB/s (non-temporal copy not run)", loop));
    if (!kHaveTorch) {
      Note(NoTorch(kAddTorch));
      return;
    }
    for (const auto& [name, what] : {std::pair{kAddTorch, "torch::add"}, std::pair{kAddTorchOut, "torch::add_out"}}) {
      if (const Result* torch = Ok(name)) {
        const double g = Counter(*torch, "B/s") / 1e9;
        Note(fmt::format("libtorch {} {:.1f} GB/s ({:.1f}% of copy): oar is {:.2f}x libtorch", what, g, 100 * g / copy,
                         oar / g));
      } else {
        Note(NoTorch(name));
      }
    }
  }

  /// Whether another process competed for the cores while the multi-threaded cases ran. Undisturbed,
  /// the main thread is busy for the whole of such a case (OpenMP workers spin while they wait), so its
  /// CPU time ~ real time; when a core is shared, a parallel region waits for its preempted thread and
  /// the CPU time drops below the real time. (One-thread cases are timed in CPU time: unaffected.)
  void Load() {
    constexpr double kQuiet = 0.9;
    std::string worst;
    double share = 2;
    for (const auto& [name, r] : results_.results()) {
      if (!r.error.empty() || !r.real_time || r.real_seconds <= 0) continue;
      if (r.cpu_seconds / r.real_seconds < share) {
        share = r.cpu_seconds / r.real_seconds;
        worst = name;
      }
    }
    if (worst.empty()) return;  // no threaded case ran
    if (share >= kQuiet) {
      out_ << fmt::format("  {:<22}quiet: the threaded cases had >= {:.0f}% of their real time on a CPU\n", "machine",
                          100 * kQuiet);
    } else {
      out_ << fmt::format("  {:<22}busy: {} had only {:.0f}% of its real time on a CPU: another\n", "machine", worst,
                          100 * share);
      Note("process competed for the cores, so threaded figures taken seconds apart compare less well.");
      Note("Rerun with --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true (medians).");
    }
  }

  const RecordingReporter& results_;
  std::ostream& out_;
};

}  // namespace
}  // namespace oar::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const int threads = omp_get_max_threads();
  // Load the plugins now: a missing cpu plugin is one clear message, not an error in every case.
  try {
    oar::runtime::Runtime::Get().Context(oar::bench::Cpu());
  } catch (const oar::Error& e) {
    std::cerr << "oar_bench: no cpu device (is the cpu plugin in " << oar::runtime::DefaultPluginDir().string()
              << "?): " << e.ToString() << "\n";
    return 1;
  }
#ifdef OAR_BENCH_HAVE_TORCH
  oar::bench::TorchSetThreads(threads);
  const std::string torch = oar::bench::TorchVersion();
#else
  const std::string torch = "not found";  // say so in the output, not only at configure time
#endif
  benchmark::AddCustomContext("omp_threads", std::to_string(threads));
  benchmark::AddCustomContext("libtorch", torch);
  oar::bench::RegisterAll();

  oar::bench::RecordingReporter reporter(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                                               : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  oar::bench::Summary(reporter, std::cout).Print(threads, torch);
  benchmark::Shutdown();
  return reporter.any_error() ? 1 : 0;
}
