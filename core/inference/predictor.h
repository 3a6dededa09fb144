// The Predictor: serve a saved program (core/jit/model.h) on any device by name, in the manner of Paddle
// Inference and ONNX Runtime. Built once from a Config — load, verify, optimise (canonicalize, cse,
// constant-fold, fuse-rotary, fuse-rms-scale, fuse-linear, dce: DefaultPasses), bind every op to the device
// (kernel-select, with explicit host fallback) and compile the result into the scheduler's instruction list
// (core/scheduler: streams, planned memory) — then Run(inputs) any number of times, from any number of
// threads at once: each run has its own streams and arenas, the plan and the parameters (placed on the device
// at load) are only read. Input shapes may change from run to run within the program's symbolic extents.
// Inputs bound from user buffers with FromDLPack (core/tensor/dlpack.h) are read in place, without a copy,
// when they are on the device.
#ifndef OAR_CORE_INFERENCE_PREDICTOR_H_
#define OAR_CORE_INFERENCE_PREDICTOR_H_

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/builder.h"
#include "core/jit/capture.h"
#include "core/tensor/tensor.h"

namespace oar::scheduler {
class Executor;
struct RunProfile;
}

namespace oar::inference {

struct Config {
  /// A folder written by jit::Save or `oar export`.
  std::filesystem::path model_dir;
  /// The device by name ("cpu", "kunlun_sim:0", "ascend_sim:1"); empty: OAR_DEVICE, else cpu:0.
  std::string device;
  /// Run the optimisation passes on load (kernel selection always runs).
  bool optimize = true;
  /// A pass pipeline replacing the default optimisation passes (oar ir opt syntax); empty: the default
  /// (DefaultPasses). "canonicalize,cse,constant-fold,dce" is the default without fusion.
  std::string passes;
  /// Host threads the cpu device's kernels use during a Run (OpenMP, for the calling thread only, restored
  /// afterwards); 0: the process default. The simulators' kernel threads are their own (docs/simulators.md).
  int threads = 0;
  /// CINN (core/compiler): fuse elementwise chains and row reductions into kernels generated and compiled
  /// for the device. Unset: OAR_CINN (0|1; off when unset).
  std::optional<bool> cinn;
};

/// Counters of a predictor (all runs so far): its program is compiled once, at construction; a memory plan
/// is made per input-shape signature (so once per cache length in generation).
struct PredictorStats {
  uint64_t runs = 0;
  uint64_t plans_built = 0;
  size_t instructions = 0;  ///< the compiled instruction list's length
};

class Predictor {
 public:
  /// Load, check and prepare the model. Throws oar::Error naming the file, the device or the pass.
  explicit Predictor(const Config& config);
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  /// Outputs for `inputs` (by position, as inputs() lists them), on the predictor's device. Safe to call
  /// from several threads at once. Throws oar::Error naming the input that does not fit its spec. With
  /// `profile`, the executor fills it (per-instruction times, overlap, peak memory; one profiled run at a time).
  std::vector<Tensor> Run(std::span<const Tensor> inputs, scheduler::RunProfile* profile = nullptr) const;
  /// By name: every input of inputs() must be present; returns outputs by name.
  std::map<std::string, Tensor> Run(const std::map<std::string, Tensor>& inputs) const;

  const std::vector<jit::InputSpec>& inputs() const { return inputs_; }
  const std::vector<std::string>& output_names() const { return outputs_; }
  Device device() const { return device_; }
  /// The prepared (optimised, device-bound) program.
  const ir::Program& program() const { return *program_; }
  /// {"inputs": [{name, dtype, shape}], "outputs": [{name, dtype, shape}], "device": ...} as JSON text.
  std::string Describe() const;
  PredictorStats stats() const;

 private:
  Device device_;
  int threads_ = 0;
  std::unique_ptr<ir::IrContext> ctx_;
  bool cinn_ = false;
  std::unique_ptr<ir::Program> program_;
  std::unique_ptr<scheduler::Executor> executor_;
  std::vector<jit::InputSpec> inputs_;
  std::vector<std::string> outputs_;
};

/// The default optimisation pipeline run on load for the device named `device`, before kernel selection: canonicalize,
/// cse, constant-fold, then fuse-rotary{device=...} (the rotary rotation of x's halves into one fused_rotary),
/// fuse-rms-scale{device=...} (rms_norm's x * rsqrt(ms + eps) * w into one fused_rms_scale) and
/// fuse-linear{device=...} (matmul -> bias add [-> relu | tanh] into one fused_linear, as Paddle Inference's
/// fc_fuse_pass), each where the device has the fused kernel, which gives the unfused kernels' results bitwise
/// on the host devices, and dce for what the rewrites left dead. With `cinn` (Config::cinn), without
/// fuse-rms-scale: CINN fuses rms_norm's whole chain, the mean of squares included, into one kernel, where
/// fused_rms_scale leaves the mean as a kernel of its own. fused_linear and fused_rotary stay with CINN: a
/// matmul is opaque to CINN, so fused_linear's decomposition would give the matmul plus a group of its bias
/// and activation (two launches for one: the mlp at batch 1 ran at 0.45-0.79x with CINN that way), and
/// fused_rotary's would give a group of the rotation plus two concat kernels (three launches for two). The
/// Predictor with CINN runs `decompose` before these passes (so the composites are primitives and the fused
/// ops are made from them) and kPredictorCinnPasses after them.
std::string DefaultPasses(std::string_view device, bool cinn = false);
/// What `oar train --static --cinn` runs on a captured step: composites (softmax, layer_norm, fused_linear)
/// become primitives, which CINN fuses into kernels.
inline constexpr const char* kCinnPasses = "decompose,cinn,dce";
/// What the Predictor with CINN runs after its optimisation passes (before kernel selection): the groups,
/// leaving the library-fused ops the passes made (fused_linear, fused_rotary) whole. The Predictor also runs
/// the pipeline without CINN on a copy and keeps whichever program has fewer kernels (CINN's groups do not
/// form over a view with an unknown extent, and the decomposed composites would then run one kernel per op).
inline constexpr const char* kPredictorCinnPasses = "cinn,dce";

}  // namespace oar::inference

#endif  // OAR_CORE_INFERENCE_PREDICTOR_H_
