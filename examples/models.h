// Example models (oar::examples): an MLP on two spirals, a LeNet-style CNN on generated shape images and a
// tiny Llama-style character model trained on the repository's own docs. Every dataset and every weight
// comes from one seed (drawn on the host), so a run is the same on every device; checkpoints are a
// safetensors file plus a JSON config and load onto any device.
#ifndef OAR_EXAMPLES_MODELS_H_
#define OAR_EXAMPLES_MODELS_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/distributed/mesh.h"
#include "core/jit/capture.h"
#include "core/jit/static_function.h"
#include "core/nn/module.h"
#include "core/optim/optim.h"

namespace oar::examples {

/// An example's inference forward as a function to capture (jit::Capture) or run eagerly: eval mode, no
/// gradients, the model's parameters and buffers as state.
struct InferenceForward {
  std::vector<jit::InputSpec> inputs;
  std::vector<std::string> outputs;
  jit::Function fn;
  std::vector<jit::StateSlot> state;
  /// Module attributes for the captured program (integer arrays; e.g. tokenizer.vocab_bytes).
  std::vector<std::pair<std::string, std::vector<int64_t>>> attributes;
};

/// One trainable example: its model, its generated data and its training recipe.
class Example {
 public:
  virtual ~Example() = default;
  /// "mlp", "cnn" or "llama".
  virtual std::string kind() const = 0;
  /// Steps that reach the documented quality (mlp ≥ 95 % accuracy, cnn ≥ 90 %, llama well below unigram).
  virtual int64_t default_steps() const = 0;
  /// "accuracy" (higher is better) or "loss" (lower is better).
  virtual std::string metric_name() const = 0;
  virtual nn::Module& module() = 0;
  /// One optimiser step (step is 0-based out of `total`, for the schedule); returns the training loss.
  /// By default EagerStep's loss read on the host.
  virtual double TrainStep(int64_t step, int64_t total);
  /// Batch, then TrainOn with the optimiser's NextStepScalars() as tensors; returns the loss tensor.
  Tensor EagerStep(int64_t step, int64_t total);
  /// The step's data as tensors (drawn on the host from the example's seed; sets the learning rate of the
  /// schedule). Called once per step, in order, eagerly or statically alike. (Examples over a mesh have
  /// none: kUnimplemented, as for TrainOn, optimizer and ExportForward.)
  virtual std::vector<Tensor> Batch(int64_t step, int64_t total);
  /// Forward, loss, backward and the optimiser's update on `batch`, its host numbers from `scalar`;
  /// returns {loss}. Only tensor ops: this is what `oar train --static` captures into one program.
  virtual std::vector<Tensor> TrainOn(std::span<const Tensor> batch, const optim::Optimizer::ScalarFn& scalar);
  virtual optim::Optimizer& optimizer();
  /// The metric on held-out data (eval mode, no gradients).
  virtual double Evaluate() = 0;
  /// The forward for export. `batch` > 0 fixes the batch extent, otherwise it is the symbol B; `seq` (llama
  /// only) is the static sequence length, default (0) the training context; seq < 0 makes it the symbol T
  /// (with a static batch), the inputs then ids [batch, T] and positions int64 [T] (normally 0 .. T-1, at
  /// most the context), the rotary rows and causal mask computed from the positions.
  virtual InferenceForward ExportForward(int64_t batch, int64_t seq);
  /// Hyper-parameters as a JSON object text (written next to the weights).
  virtual std::string ConfigJson() const = 0;
  Device device() const { return device_; }
  uint64_t seed() const { return seed_; }

 protected:
  Example(Device device, uint64_t seed) : device_(device), seed_(seed) {}
  std::string NotCapturable() const;
  Device device_;
  uint64_t seed_;
};

/// The example `kind` on `device`, weights and data from `seed`. Throws oar::Error for an unknown kind or
/// an unusable device.
std::unique_ptr<Example> MakeExample(const std::string& kind, Device device, uint64_t seed);
/// How MakeParallelExample pipelines: with a mesh dim named "pp" (and optionally "dp") the layers are cut
/// into pp stages and each batch into dp x micro_batches row blocks, run under `schedule`
/// (core/distributed/pipeline.h).
struct ParallelOptions {
  std::string schedule = "1f1b";  // or "fthenb"
  int64_t micro_batches = 0;      // 0: as many as pipeline stages
  /// Megatron sequence parallel on the tp dim (norms and residual adds sharded on the sequence; each
  /// block all-gathers before its column-parallel and reduce-scatters after its row-parallel Linear).
  bool sequence_parallel = false;
};
/// The example `kind` (llama only) over `mesh`, every rank in this process: tensor parallel on the mesh
/// dim named "tp", data parallel on "dp", pipeline parallel on "pp" (with dp, tp or both); the same weights,
/// data order and step losses as MakeExample on one device (up to float rounding). Throws oar::Error
/// naming a missing device or a mesh that does not divide the model.
std::unique_ptr<Example> MakeParallelExample(const std::string& kind, const distributed::ProcessMesh& mesh,
                                             uint64_t seed, const ParallelOptions& options = {});
/// The llama's Megatron tensor-parallel plan — the one definition that MakeParallelExample, the static
/// placement tests and `oar_dist_bench` share: the placement on the tp mesh dim of the parameter called
/// `name` (or of optimiser state named after it): the fused qkv weight [3 · dim, dim] column-parallel by heads
/// (Shard(0, 3), a strided shard: each rank holds its heads' q, k and v rows), gate and up column-parallel
/// (Shard(0) of [out, in]), the attention output and down projections row-parallel (Shard(1)), the rest
/// (norms, the tied embedding) replicated.
distributed::Placement LlamaTensorParallelPlacement(std::string_view name);
/// Data parallel across processes (llama only): this process trains rows [rank, rank + 1) · batch / size
/// of every batch (all draw the same batches) and `all_reduce_mean` replaces a tensor by its mean over the
/// processes (gradients before clipping, and the printed loss).
void SetDataParallel(Example& e, int rank, int size, std::function<void(Tensor&)> all_reduce_mean);
/// The known kinds.
std::vector<std::string> ExampleKinds();

/// Run `steps` training steps (default_steps() when steps < 0); `log(step, loss)` is called every
/// `log_every` steps and after the last. Returns every step's loss.
std::vector<double> Train(Example& example, int64_t steps, int64_t log_every = 0,
                          const std::function<void(int64_t, double)>& log = {},
                          const std::function<void(int64_t, int64_t)>& progress = {});

/// Train as Train does, but through captured programs (`oar train --static`): the step Batch -> TrainOn is
/// captured by a jit::StaticFunction on its first call and replayed from the program afterwards (capturing
/// again when a guard fails, e.g. once Adam's moments exist). The same batches, schedule and update, so the
/// losses equal Train's. The replays run on scheduler::Executor. `stats` (optional) receives the capture
/// cache's hits, misses and their reasons; `profile` (optional) the executor's profile of the last step that
/// replayed a program (per-instruction times, overlap, peak memory; empty when none did). `fusion_passes`:
/// StaticFunction::set_fusion_passes ("decompose,cinn,dce" for `--cinn`: losses then agree with Train's
/// within float rounding instead of bitwise).
std::vector<double> TrainStatic(Example& example, int64_t steps, int64_t log_every = 0,
                                const std::function<void(int64_t, double)>& log = {},
                                const std::function<void(int64_t, int64_t)>& progress = {},
                                jit::StaticFunction::Stats* stats = nullptr,
                                scheduler::RunProfile* profile = nullptr, const std::string& fusion_passes = {});

/// The points SaveCheckpoint passes, in order: "weights" (model.safetensors written and flushed in the
/// temporary folder), "config" (config.json too), "verified" (both read back and checked), "replaced"
/// (the new folder renamed into place; the previous checkpoint, if any, is now the temporary one).
inline constexpr const char* kCheckpointSteps[] = {"weights", "config", "verified", "replaced"};

/// Write the checkpoint folder `dir` (model.safetensors + config.json: kind, seed, hyper-parameters) as a
/// unit: both files go to a temporary folder beside `dir`, are flushed to stable storage (fsync), read
/// back and checked, then the folder replaces `dir` in one rename (an atomic exchange where the file
/// system has one), so a crash or kill at any point leaves either the previous checkpoint or the new one,
/// never a mix, and the previous one survives until the new one is complete. Every failure (a full disk,
/// a quota, EIO) throws oar::Error naming the file and removes the temporary folder. `dir` must not exist,
/// or be empty, or hold only a checkpoint's two files (it is replaced as a whole). `after_step` (for
/// tests that interrupt the save) is called with each name of kCheckpointSteps as it is passed.
void SaveCheckpoint(Example& example, const std::filesystem::path& dir,
                    const std::function<void(const char* step)>& after_step = {});
/// Rebuild the example from `dir` onto `device`; oar::Error naming the file and the cause for a missing,
/// unreadable or corrupt checkpoint (or one whose weights do not fit its config).
std::unique_ptr<Example> LoadCheckpoint(const std::filesystem::path& dir, Device device);

/// Llama only: unigram entropy (nats per character) of the training text.
double UnigramEntropy(Example& llama);
/// Llama only: one decoding step for `oar export llama --decode` (docs/design/dynamic-to-static.md): inputs
/// `ids` int64 [B, 1], `position` int64 [1] (the cache length: the position of `ids`) and per layer i
/// `past.i.k`, `past.i.v` float32 [B, heads, L, head_dim]; outputs `logits` [B, 1, vocab] and `present.i.k`,
/// `present.i.v` (the caches with this position appended). B is symbolic unless `batch` > 0; L is the symbol
/// L. Rotary rows come from tables of `max_positions` positions (a position beyond them is an error of the
/// runner, inference::GenerateGreedy). Attributes: decode.max_positions, tokenizer.vocab_bytes (the byte of
/// each token id). Run eagerly, the step gives bitwise the logits of the cached eager forward (Generate).
InferenceForward DecodeForward(Example& llama, int64_t batch, int64_t max_positions);
/// Llama only: continue `prompt` by `max_new_tokens` characters with the KV cache; top_k <= 1 is greedy,
/// otherwise sampling from the k most likely characters with `sample_seed`.
std::string Generate(Example& llama, const std::string& prompt, int64_t max_new_tokens, int64_t top_k = 1,
                     uint64_t sample_seed = 0);

}  // namespace oar::examples

#endif  // OAR_EXAMPLES_MODELS_H_
