// Shared between the translation units of oar_bench: the fixed problem sizes, and the libtorch peers
// (torch_peers.cc, compiled only when CMake found libtorch; OAR_BENCH_HAVE_TORCH is then defined).
//
// The peer functions use no torch type in their signatures, so oar_bench.cc never includes a torch
// header and keeps -Werror; torch_peers.cc is built without our warning flags.
#ifndef OAR_BENCH_BENCH_H_
#define OAR_BENCH_BENCH_H_

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

namespace oar::bench {

// ---- problem sizes -------------------------------------------------------------------------------
/// Elements of each operand in the dispatch case: the kernel itself costs next to nothing.
inline constexpr int64_t kDispatchElements = 1;
/// Bytes per allocation in the allocator case.
inline constexpr size_t kAllocBytes = 4096;
/// M = N = K of the matmul case.
inline constexpr int64_t kMatmulSize = 1024;
/// Elements of each operand in the bandwidth case (64 MiB of float32: larger than any cache here).
inline constexpr int64_t kStreamElements = int64_t{1} << 24;
inline constexpr double kStreamBytes = static_cast<double>(kStreamElements) * sizeof(float);
/// Floating-point operations of one kMatmulSize^3 matmul.
inline constexpr double kMatmulFlops = 2.0 * kMatmulSize * kMatmulSize * kMatmulSize;

/// Marks the iterations of `state` as having done `flops` floating-point operations each (the "FLOP/s"
/// counter, decimal prefixes).
void SetFlopRate(benchmark::State& state, double flops_per_iteration);
/// Marks the iterations of `state` as having moved `bytes` each to or from memory (the "B/s" counter,
/// decimal prefixes).
void SetByteRate(benchmark::State& state, double bytes_per_iteration);
/// 64-byte aligned float buffer, first touched (and so placed) by the threads that will use it.
class AlignedFloats {
 public:
  explicit AlignedFloats(int64_t n);  ///< throws oar::Error (kResourceExhausted) when it cannot allocate
  ~AlignedFloats();
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;

  float* get() const { return data_; }
  void ParallelFill(float value);  ///< every OpenMP thread writes its static share

 private:
  float* data_;
  int64_t n_;
};

/// How a copy writes.
enum class CopyKind {
  kLoop,         ///< a vectorised loop with ordinary stores: STREAM's "Copy"
  kNonTemporal,  ///< non-temporal stores (SSE2, so x86-64 only): no read-for-ownership of the destination
};

/// The machine's limit for a streaming kernel: every OpenMP thread copies its contiguous share of
/// kStreamElements floats, one read and one write per element ("B/s" counts 2 x kStreamBytes). Which kind
/// is faster depends on the machine; a summary takes the faster as the limit. (glibc's memcpy is not a
/// candidate: on the 2-vCPU AMD EPYC VM this was written on it ran at about half the speed of either loop
/// for 64 MiB.)
void CopyLimit(benchmark::State& state, CopyKind kind);

/// Compares a few elements of the row-major n x n product c = a @ b with a double-precision dot
/// product. False (and a message on `state`) when one is off: a benchmark must not time a wrong result.
bool SpotCheckMatmul(benchmark::State& state, const float* a, const float* b, const float* c, int64_t n);

/// The op-library cases, each timed against libtorch on the same shapes and threads. Shapes:
///  - conv2d [8, 32, 32, 32] * [64, 32, 3, 3] (padding 1), forward, and backward (grad_x and grad_w of a
///    given grad_y);
///  - [kRows, kCols] float32 for softmax, log_softmax, layer_norm, rms_norm composed of primitives, the
///    elementwise ops and the reductions (over the last axis, and over the first);
///  - pooling 2x2 stride 2 over [kPoolN, kPoolC, kPoolHW, kPoolHW], forward and forward + backward;
///  - embedding: kEmbedTokens int64 indices into a [kEmbedRows, kEmbedDim] table;
///  - cross-entropy: [kCeRows, kCeClasses] logits against int64 targets, forward and forward + backward.
inline constexpr int64_t kConvN = 8, kConvC = 32, kConvHW = 32, kConvO = 64;
inline constexpr int64_t kRows = 512, kCols = 1024;
inline constexpr int64_t kPoolN = 32, kPoolC = 16, kPoolHW = 32;
inline constexpr int64_t kEmbedRows = 1000, kEmbedDim = 256, kEmbedTokens = 1024;
inline constexpr int64_t kCeRows = 1024, kCeClasses = 512;
enum class OpCase {
  kConv2d,
  kConv2dBackward,
  kSoftmax,
  kSoftmaxAxis0,
  kLogSoftmax,
  kLayerNorm,
  kRmsNormComposed,
  kExp,
  kTanh,
  kSigmoid,
  kRelu,
  kAdd,
  kMul,
  kAddRowBroadcast,
  kSumLast,
  kSumFirst,
  kMeanLast,
  kMeanFirst,
  kMaxLast,
  kMaxFirst,
  kMaxPool2d,
  kMaxPool2dBackward,
  kAvgPool2d,
  kAvgPool2dBackward,
  kEmbedding,
  kCrossEntropy,
  kCrossEntropyBackward,
};
/// Deterministic int64 values in [0, bound): the indices and targets of the embedding and
/// cross-entropy cases, the same on both sides.
inline int64_t BenchIndex(int64_t i, int64_t bound) { return (i * 7919 + 13) % bound; }
/// The MLP example's training batch (examples/models.cc, MlpExample::kTrain).
inline constexpr int64_t kMlpBatch = 1000, kMlpHidden = 64;

/// What a libtorch twin of an example model needs to know about it: its hyper-parameters, read from the
/// example's own ConfigJson(), and its parameter count, which the twin must match.
struct CnnConfig {
  int64_t batch = 0, image = 0;
  double lr = 0;
  int64_t parameters = 0;
};
struct LlamaConfig {
  int64_t vocab = 0, dim = 0, heads = 0, layers = 0, hidden = 0, context = 0, batch = 0;
  double lr = 0;
  int64_t parameters = 0;
};

// ---- libtorch peers (torch_peers.cc) ----------------------------------------------------------------
#ifdef OAR_BENCH_HAVE_TORCH
/// "1.13.0": the libtorch headers compiled against.
std::string TorchVersion();
/// torch::set_num_threads(threads): the peers use as many threads as Oar.
void TorchSetThreads(int threads);
/// torch::add of two kDispatchElements-element float32 tensors, under InferenceMode.
void TorchDispatchAdd(benchmark::State& state);
/// torch::matmul of two kMatmulSize^2 float32 matrices.
void TorchMatmul(benchmark::State& state);
/// torch::add of two kStreamElements float32 tensors; `preallocated_out` uses torch::add_out into a
/// tensor allocated once (no allocator or page-fault cost in the loop).
void TorchStreamAdd(benchmark::State& state, bool preallocated_out);
/// The op-library case `which`, the same shapes and threads as Oar's.
void TorchOpCase(benchmark::State& state, OpCase which);
/// The CINN benchmark's peers on [rows, cols] float32, under InferenceMode: which = 0 rms_norm composed of
/// primitives (as oar::rms_norm), 1 torch::softmax, 2 torch::layer_norm over the last axis.
void TorchRowNorm(benchmark::State& state, int which, int64_t rows, int64_t cols);
/// One training step (forward, cross-entropy, backward, Adam) of the MLP example's network: 2 -> 64 ->
/// 64 -> 64 -> 2 with tanh, full batch of kMlpBatch points.
void TorchMlpTrainStep(benchmark::State& state);
/// One training step (forward, cross-entropy, backward, Adam) of the CNN example's LeNet: conv 5x5 (1 -> 8),
/// conv 3x3 (8 -> 16), conv 3x3 (16 -> 16), each + batch_norm + relu + 2x2 max-pool, then a linear layer to 3
/// classes, on a batch of c.batch single-channel c.image^2 images.
void TorchCnnTrainStep(benchmark::State& state, const CnnConfig& c);
/// One training step (forward, cross-entropy, backward, global-norm clipping to 1, AdamW) of the tiny
/// Llama example: token embedding, c.layers blocks of RMSNorm + causal rotary attention + RMSNorm + SwiGLU,
/// final RMSNorm and the tied output head, on c.batch sequences of c.context tokens.
void TorchLlamaTrainStep(benchmark::State& state, const LlamaConfig& c);
#endif

}  // namespace oar::bench

#endif  // OAR_BENCH_BENCH_H_
