// The executor: compiles a kernel-dialect PIR program (the output of kernel selection) once into an
// instruction list, then runs it many times, from any number of threads at once.
//
// Compile: one instruction per op that does work (kernels, views, transfers, control flow); format casts
// and builtin.output name values and run nothing. Dependencies come from data (an operand's producer),
// from writes over a buffer others read (in-place results, `oar.inplace`), from memory reuse (a buffer
// placed over an earlier one in the arena follows every user of that one) and from side effects (ops
// without the `pure` trait, such as collectives, keep their program order). Every device gets a compute
// stream (kernels, views) and a copy stream (kernel.transfer, and program inputs that must be moved); an
// event is recorded only after an instruction some instruction on another stream depends on, and only
// cross-stream edges wait. cf.if / cf.while run their regions' instructions; the run's streams are
// synchronised at a region's entry and exit (a condition is read on the host anyway).
//
// Memory: with static shapes the buffers the program owns (kernel results that do not escape as outputs)
// are placed ahead of time in one arena per device (memory_plan.h), in-place results sharing their dying
// operand's bytes; with symbolic shapes the first run of each input-shape signature frees every buffer at
// its last use through the caching allocator and records the sizes, and the plan built from them serves
// every later run with that signature. A run with a planned signature allocates only its outputs.
//
// Results equal jit::Interpret's (the same kernels run on the same devices; in-place writes only where
// the kernel contract allows them). Run returns once the outputs are computed (every stream of the run is
// synchronised), so they may be used from any stream.
#ifndef OAR_CORE_SCHEDULER_EXECUTOR_H_
#define OAR_CORE_SCHEDULER_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/ir/builder.h"
#include "core/scheduler/profile.h"
#include "core/tensor/tensor.h"

namespace oar::scheduler {

/// Output `output` may be written into the bytes of input `input` (the caller donates the input), as XLA's
/// input/output aliasing and JAX's `donate_argnums`: a training step's state updates overwrite the state.
struct InputOutputAlias {
  size_t output = 0;
  size_t input = 0;
};

struct ExecutorOptions {
  /// Place owned buffers in a per-device arena (static plan); false: every buffer through the caching
  /// allocator, freed at its last use (the dynamic path, also used for symbolic shapes before their plan).
  bool plan_memory = true;
  /// Honour `oar.inplace` marks.
  bool inplace = true;
  /// Outputs written into donated inputs' bytes. Compile keeps an alias where the program allows it: the
  /// output is a kernel result whose bytes equal the input's, every reader of the input runs before the
  /// output's producer or the producer is an elementwise op reading the input as an operand of the result's
  /// type (written over it in place, as `oar.inplace`), and the input is not itself (a view of) an output.
  /// A run honours a kept alias when the input tensor allows it too (on the run's device, contiguous, owning
  /// all of its storage, which no other input shares); the output then shares the input's storage and the
  /// input's contents are the output's after the run (undefined after a failed run). Otherwise the output
  /// gets fresh bytes. Concurrent runs must not donate the same tensor.
  std::vector<InputOutputAlias> donate;
  /// Make small fills (a static shape of at most 4096 elements, not yielded, not written over in place; the
  /// scalars a capture records from eager code's full()) and transfers of presets once, when compiling, as
  /// constants are, instead of a launch or copy per run. Each is an allocation of its own that lives as long
  /// as the executor.
  bool preset_fills = true;
};

/// Counters of an executor (all runs so far).
struct ExecutorStats {
  uint64_t runs = 0;
  uint64_t plans_built = 0;       ///< memory plans made (one per input-shape signature)
  uint64_t run_contexts = 0;      ///< per-run states made (streams, events, arenas): at most the concurrency
  uint64_t donated_outputs = 0;   ///< outputs written into donated inputs' bytes (ExecutorOptions::donate)
  uint64_t planned_launches = 0;  ///< kernel and view instructions run from their plan (planned_launch.h)
};

/// What the executor's memory plan for one signature holds, per device.
struct MemoryPlanSummary {
  std::string device;
  uint64_t arena_bytes = 0;      ///< planned arena
  uint64_t unplanned_bytes = 0;  ///< the same buffers with no reuse at all
  size_t buffers = 0;
  size_t inplace = 0;            ///< results written over their operand
};

class Executor {
 public:
  /// Compile `program` for `device` (where builtin.data inputs and parameters go and op.* ops run; kernel.*
  /// ops run where they are bound). Parameters and constants are moved to the device once, here. The
  /// program is not referenced afterwards. Throws oar::Error naming the op and its position for anything
  /// the executor cannot run.
  Executor(const ir::Program& program, Device device, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// Run with `inputs` (by builtin.data index, checked as jit::Interpret checks them). Thread-safe: each
  /// concurrent call uses its own streams, events and arenas. With `profile`, fills it (profiling is
  /// process-wide: profile one run at a time). `donate` false: this run writes no output into a donated
  /// input (every output gets fresh bytes).
  std::vector<Tensor> Run(std::span<const Tensor> inputs, RunProfile* profile = nullptr, bool donate = true) const;

  /// The instruction list: one line per instruction with its device, stream, dependencies and waits.
  std::string Describe() const;
  size_t num_instructions() const;
  /// Cross-stream waits per run of the top-level block (events recorded and waited for).
  size_t num_cross_stream_edges() const;
  ExecutorStats stats() const;
  /// The aliases of ExecutorOptions::donate that compile kept (the program allows them), as given.
  std::vector<InputOutputAlias> donations() const;
  /// The memory plan for the inputs' signature (empty before a run made it, for symbolic shapes).
  std::vector<MemoryPlanSummary> MemoryPlan(std::span<const Tensor> inputs) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace oar::scheduler

#endif  // OAR_CORE_SCHEDULER_EXECUTOR_H_
