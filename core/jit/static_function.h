// to_static: a function that captures itself on first use and runs the captured program afterwards, as
// Paddle's to_static and dynamo do. A captured program is valid only under what its capture assumed — the
// guards: each input's dtype, shape and device, each state slot's presence, dtype, shape and device, and
// the grad mode. A call whose guards match a cached program runs that program through the scheduler
// (scheduler::Executor, compiled once per program: streams, memory plan); any other call captures again,
// which runs the function eagerly, and caches the new program. The state a program reads is one of its
// inputs (after the function's own, in the order the program first reads it), not a parameter: the executor
// binds parameters when it compiles, and state changes every call. A state update is written into the bytes
// of the state it replaces where the program allows it (ExecutorOptions::donate), so a replayed step holds
// one copy of the state, as eager's in-place optimiser steps do: a tensor sharing a state tensor's storage
// sees the update (after a replay that fails part way, the state may be partly updated). The eager capture
// scattered the state and the tensors it lifted into program parameters (constants the function made) over
// segments its temporaries used, which they would otherwise keep reserved: before a program's first replay
// the constants of every cached program not yet replayed move into one allocation (one the caller still
// holds stays), and after it the state moves into one allocation of its own (after, so that it may share the
// segment of the executor's arena) and the device allocator's wholly free segments go back to the device; a
// tensor sharing the old state's storage no longer sees the updates. The cache is bounded (least recently
// used program evicted) and observable: hits, misses and the reason of every miss.
#ifndef OAR_CORE_JIT_STATIC_FUNCTION_H_
#define OAR_CORE_JIT_STATIC_FUNCTION_H_

#include <list>
#include <memory>
#include <string>
#include <vector>

#include "core/jit/capture.h"
#include "core/scheduler/profile.h"

namespace oar::scheduler {
class Executor;
}  // namespace oar::scheduler

namespace oar::jit {

class StaticFunction {
 public:
  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    /// Why each miss happened ("first call", "input 0 shape [4, 2] (cached: [8, 2])", ...), oldest first.
    std::vector<std::string> miss_reasons;
  };

  /// `fn` reads and may replace `state`; its inputs and results are tensors on `device`. At most `capacity`
  /// programs are kept.
  StaticFunction(Function fn, std::vector<StateSlot> state, Device device, size_t capacity = 8);
  ~StaticFunction();

  /// Run: the cached program when the guards match, else capture (running fn eagerly). State slots the
  /// function replaces are updated either way.
  std::vector<Tensor> operator()(std::span<const Tensor> inputs);

  const Stats& stats() const { return stats_; }
  /// Fill `profile` (null: none) on every later call that runs a cached program (the last one wins; a
  /// capturing call runs eagerly and leaves it as it was).
  void set_profile(scheduler::RunProfile* profile) { profile_ = profile; }
  /// Passes run on every program captured from now on, before kernel selection (a pipeline string, e.g.
  /// "decompose,cinn,dce" for CINN fusion, whose pass the caller registers). Empty: none.
  void set_fusion_passes(std::string pipeline) { fusion_passes_ = std::move(pipeline); }
  size_t cached() const { return cache_.size(); }
  /// The most recently used program (null before the first call).
  const ir::Program* program() const;
  /// The executor running it (its memory plan, stats); null before that program's first replay.
  const scheduler::Executor* executor() const;

 private:
  struct Entry;
  std::string GuardKey(std::span<const Tensor> inputs) const;
  /// `inputs` and the state now are what `e` was captured for (GuardKey would give e's key).
  bool Matches(const Entry& e, std::span<const Tensor> inputs) const;
  std::vector<Tensor> Replay(Entry& e, std::span<const Tensor> inputs);
  // Move `tensors` (those on the device owning all of their storage) into one allocation, each over its own
  // bytes, owning them as far as donation can tell. `keep_held`: a tensor whose old storage something else
  // still holds afterwards goes back to it.
  void Compact(std::vector<Tensor*> tensors, bool keep_held);

  Function fn_;
  std::vector<StateSlot> state_;
  Device device_;
  size_t capacity_;
  std::unique_ptr<ir::IrContext> ctx_;
  std::list<std::unique_ptr<Entry>> cache_;  // most recently used first
  Stats stats_;
  std::string fusion_passes_;
  scheduler::RunProfile* profile_ = nullptr;
};

/// The state a captured program reads enters as builtin.parameter ops, whose values an executor binds once
/// when it compiles; state changes every call. So every builtin.parameter naming a slot of `state`, at the
/// top level or inside cf.* regions, becomes a builtin.data input after the function's own `num_inputs`, in
/// program order (one inside a region is placed before the top-level op holding it). Returns the state slot
/// of each new input. (StaticFunction does this to every program it captures.)
std::vector<size_t> StateAsInputs(ir::IrContext& ctx, ir::Program& program, const std::vector<StateSlot>& state,
                                  size_t num_inputs);

}  // namespace oar::jit

#endif  // OAR_CORE_JIT_STATIC_FUNCTION_H_
