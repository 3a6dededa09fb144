// Pipeline parallelism in one process (or one stage lane per process, PipelineProcesses): a model cut into stages, stage s on its own devices, a batch cut
// into micro-batches that flow through the stages under a schedule (FThenB or 1F1B), gradients
// accumulated over the micro-batches.
//
// Each stage has one or more lanes (data-parallel replicas of the stage, one device each); lane l of
// stage s sends its activations to lane l of stage s + 1. At a stage boundary the activation is sent with
// the CCL's send/recv between the two devices (stream-ordered on their compute streams, like a kernel; a
// device type without a CCL table copies with Tensor::to instead) and becomes a leaf of the next stage's
// graph; in the backward the leaf's gradient is sent back the same way and seeds the previous stage's
// backward from its output. So a stage's graph lives from its forward of a micro-batch until its
// backward of it: the schedule decides how many micro-batches are alive at once.
//
// The host thread issues every stage's work in the schedule's order (a stage runs its next action as soon
// as what it needs has been issued by its neighbour); kernels, copies and send/recv run asynchronously on
// the devices, so stages on different devices compute at the same time where the schedule lets them.
//
// Schedules (S stages, M micro-batches, stage s = 0 .. S-1):
//   FThenB (GPipe): every forward, then every backward: F0 .. F(M-1), B0 .. B(M-1). Stage s holds M
//                   micro-batches' activations at its peak.
//   1F1B (PipeDream-flush, Megatron's default): w = min(S - s - 1, M) warm-up forwards, then one forward
//                   and one backward alternately, then the remaining backwards. Stage s holds at most
//                   min(S - s, M) <= S micro-batches' activations.
// Both compute the same gradients (each micro-batch's loss seeded with loss_scale, default 1 / M, so the
// accumulated gradient is the mean over micro-batches); only the order and the memory differ.
#ifndef OAR_CORE_DISTRIBUTED_PIPELINE_H_
#define OAR_CORE_DISTRIBUTED_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor/tensor.h"

namespace oar::distributed {

class Group;

enum class PipelineSchedule { kFThenB, k1F1B };

/// "fthenb" or "1f1b" (case-insensitive; also "gpipe"); throws kInvalidArgument naming both otherwise.
PipelineSchedule ParsePipelineSchedule(std::string_view name);
/// "FThenB" or "1F1B".
std::string ScheduleName(PipelineSchedule schedule);

/// One step of a stage: the forward or the backward of one micro-batch.
struct PipelineAction {
  enum class Kind { kForward, kBackward };
  Kind kind = Kind::kForward;
  int64_t micro = 0;
  /// "F3", "B0".
  std::string ToString() const;
  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};

/// The actions of stage `stage` (of `stages`) for `micro_batches`, in the order the schedule runs them.
/// Throws kInvalidArgument for stages < 1, micro_batches < 1 or a stage outside [0, stages).
std::vector<PipelineAction> StageOrder(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t stage);

/// One stage of the pipeline.
struct PipelineStage {
  /// The device of each lane (the same count for every stage; every device of the pipeline distinct and of
  /// one type).
  std::vector<Device> lanes;
  /// The forward of micro-batch `micro` on lane `lane`. `input` is the previous stage's output, now on
  /// this lane's device and a leaf that requires grad; undefined on the first stage (which reads its own
  /// data). Returns the output to send on, on this lane's device; on the last stage the micro-batch's
  /// scalar loss.
  std::function<Tensor(int64_t micro, int64_t lane, const Tensor& input)> forward;
};

/// One stage lane per process (mpirun): where this process sits, and the process (world rank) of every
/// stage lane. Activations and gradients then go between the processes with MPI send/recv.
struct PipelineProcesses {
  int64_t stage = 0, lane = 0;
  /// ranks[s * lanes + l]: the world rank that runs stage s's lane l.
  std::vector<int> ranks;
  /// This process's share of each micro-batch's loss seed (on the last stage): 1, or 0 where the lanes are
  /// one stage's tensor-parallel ranks, each holding the replicated loss, and only the first seeds it (the
  /// others still run the backward, which meets the collectives' adjoints; distributed::Backward's rule).
  double seed = 1;
};

/// What one Run did.
struct PipelineResult {
  /// The micro-batches' losses, detached, on the last stage's devices: losses[micro * lanes + lane]. With
  /// one stage lane per process: this lane's losses[micro] on the last stage, none on the others.
  std::vector<Tensor> losses;
  /// Per stage: the most micro-batches whose forward had run and whose backward had not (their
  /// activations alive at once).
  std::vector<int64_t> peak_live;
  /// The order the host issued the actions in, "s0:F0 s1:F0 s0:F1 ...".
  std::string trace;
  /// Activations and gradients sent between stages (lanes counted separately).
  int64_t transfers = 0;
  /// The mean of `losses`, read on the host (the loss of the whole batch when micro-batches and lanes
  /// hold equally many samples).
  double MeanLoss() const;
};

class Pipeline {
 public:
  /// Throws kInvalidArgument for no stages, a stage without lanes or forward, lane counts that differ,
  /// repeated devices or devices of different types.
  explicit Pipeline(std::vector<PipelineStage> stages);
  /// One stage lane per process: this process runs only `where.stage`'s forward for lane `where.lane`
  /// (the other stages' forwards are not called; their lanes' devices are the other processes'), in the
  /// schedule's order for its stage, receiving the previous stage's activations and the next stage's
  /// gradients from their processes (blocking, within the process group's timeout) and sending without
  /// waiting. Throws kInvalidArgument for a `where` that does not fit the stages.
  Pipeline(std::vector<PipelineStage> stages, PipelineProcesses where);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  int64_t num_stages() const { return static_cast<int64_t>(stages_.size()); }
  int64_t num_lanes() const { return static_cast<int64_t>(stages_[0].lanes.size()); }

  /// Forward and backward of `micro_batches` micro-batches under `schedule`; every micro-batch's loss is
  /// seeded with `loss_scale` (<= 0: 1 / micro_batches), gradients accumulate in the stages' leaves
  /// (parameters) as Tensor::backward does. Throws kInvalidArgument for micro_batches < 1 or a last-stage
  /// output that is not a scalar, and kInternal if the schedule cannot make progress.
  PipelineResult Run(PipelineSchedule schedule, int64_t micro_batches, double loss_scale = 0);

 private:
  // `t` (on stage `from`'s lane) onto stage `to`'s lane `lane`.
  Tensor Send(const Tensor& t, int64_t from, int64_t to, int64_t lane, PipelineResult& result);

  PipelineResult RunProcess(PipelineSchedule schedule, int64_t micro_batches, double loss_scale);

  std::vector<PipelineStage> stages_;
  std::unique_ptr<PipelineProcesses> processes_;  // set: one stage lane per process
  std::unique_ptr<Group> group_;  // over every device (rank = stage * lanes + lane); null without a CCL
};

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_PIPELINE_H_
