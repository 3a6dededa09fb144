#include "core/jit/static_function.h"

#include <algorithm>
#include <map>

#include "core/base/error.h"
#include "core/ir/builder.h"
#include "core/passes/pass.h"
#include "core/runtime/allocator.h"
#include "core/runtime/runtime.h"
#include "core/scheduler/executor.h"
#include "core/tensor/autograd_meta.h"

namespace oar::jit {
namespace {

// One guard per line, so that a miss can name the first that differs.
std::string Describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return fmt::format("{} {} on {}", DTypeName(t.dtype()), t.shape().ToString(), t.device().str());
}

std::string FirstDifference(const std::string& now, const std::string& cached) {
  size_t a = 0, b = 0;
  while (a < now.size() && b < cached.size()) {
    const size_t ea = now.find('\n', a), eb = cached.find('\n', b);
    const std::string la = now.substr(a, ea - a), lb = cached.substr(b, eb - b);
    if (la != lb) return fmt::format("{} (cached: {})", la, lb.substr(lb.find(':') + 2));
    a = ea + 1;
    b = eb + 1;
  }
  return "different guards";
}

// A moved tensor's storage over its bytes of the one allocation Compact made: it keeps that allocation
// alive (context: a heap-held reference to it) and frees nothing itself.
void ReleaseStateBlock(void* context, void*, size_t) { delete static_cast<std::shared_ptr<Storage>*>(context); }

}  // namespace

/// What the guard key says of one tensor, kept to compare a call's tensors with a cached program's without
/// building the key's text (a replay's guard check was ~80k instructions of formatting for the mlp step's 30
/// tensors); the text is built only on a miss, to name the difference.
struct TensorGuard {
  bool defined = false;
  DType dtype = DType::kFloat32;
  Dims shape;
  Device device;
  explicit TensorGuard(const Tensor& t) : defined(t.defined()) {
    if (!defined) return;
    dtype = t.dtype();
    shape = t.shape();
    device = t.device();
  }
  bool Matches(const Tensor& t) const {
    if (!t.defined()) return !defined;
    return defined && t.dtype() == dtype && t.device() == device && t.shape() == shape;
  }
};

struct StaticFunction::Entry {
  std::string key;
  /// The key's content: grad mode, then one guard per input and per state slot (GuardKey's order).
  bool grad_mode = false;
  std::vector<TensorGuard> guards;
  std::unique_ptr<ir::Program> program;
  /// Compiled at the program's first replay, after Compact moved its constants: it binds them. Run on every
  /// hit.
  std::unique_ptr<scheduler::Executor> executor;
  scheduler::ExecutorOptions exec_options;
  std::vector<size_t> state_inputs;  // the state slots the program reads, as inputs after the function's own
  std::vector<std::string> updates;
  size_t num_outputs = 0;  // the function's own
  int64_t replays = 0;
};

void StaticFunction::Compact(std::vector<Tensor*> tensors, bool keep_held) {
  constexpr uint64_t kAlign = 256;
  auto align = [](uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  NoGradGuard no_grad;
  // Only tensors owning all of their storage, which no other moved tensor shares (views and tied tensors keep
  // their storage, so they stay tied).
  std::map<const Storage*, int> users;
  for (const Tensor* t : tensors) {
    if (t->defined() && t->storage() != nullptr) ++users[t->storage().get()];
  }
  std::erase_if(tensors, [&](const Tensor* t) {
    return !t->defined() || t->device() != device_ || t->nbytes() == 0 || !t->is_contiguous() || t->offset() != 0 ||
           t->storage() == nullptr || t->storage()->nbytes() != t->nbytes() || users[t->storage().get()] != 1;
  });
  if (tensors.empty()) return;
  uint64_t total = 0;
  for (const Tensor* t : tensors) total += align(t->nbytes());
  runtime::DeviceContext& dctx = runtime::Runtime::Get().Context(device_);
  std::shared_ptr<Storage> block = dctx.allocator().AllocateStorage(device_, total);
  std::vector<std::weak_ptr<Storage>> old;  // keep_held: the old storages, to tell which something else holds
  uint64_t at = 0;
  for (Tensor* p : tensors) {
    Tensor& t = *p;
    const bool requires_grad = t.requires_grad();
    auto storage = std::make_shared<Storage>(device_, static_cast<char*>(block->data()) + at, t.nbytes(),
                                             &ReleaseStateBlock, new std::shared_ptr<Storage>(block));
    Tensor moved(std::move(storage), t.dtype(), t.shape(), ContiguousStrides(t.shape()), 0);
    moved.copy_(t);
    if (keep_held) old.push_back(t.storage());
    t = moved;
    if (requires_grad) t.set_requires_grad(true);
    at += align(t.nbytes());
  }
  block.reset();
  dctx.Synchronize();  // the copies have read the old tensors
  for (size_t i = 0; i < old.size(); ++i) {
    // Something outside still holds the old bytes: they stay in use (moving would hold them twice).
    if (std::shared_ptr<Storage> kept = old[i].lock()) {
      Tensor& t = *tensors[i];
      t = Tensor(std::move(kept), t.dtype(), t.shape(), ContiguousStrides(t.shape()), 0);
    }
  }
}

std::vector<size_t> StateAsInputs(ir::IrContext& ctx, ir::Program& program, const std::vector<StateSlot>& state,
                                  size_t num_inputs) {
  std::vector<ir::Operation*> parameters;
  program.module()->Walk([&](ir::Operation* op) {
    if (op->name() == "builtin.parameter") parameters.push_back(op);
  });
  std::vector<size_t> slots;
  for (ir::Operation* op : parameters) {
    const std::string name = op->attr("name").AsString();
    const auto it = std::find_if(state.begin(), state.end(), [&](const StateSlot& s) { return s.name == name; });
    if (it == state.end()) continue;  // a value of the program's own: bound at compile time
    // Inputs are read at the top level: one inside a cf.* region goes before the top-level op holding it
    // (regions read values from outside).
    ir::Operation* at = op;
    while (at->parent_block() != &program.block()) {
      ir::Operation* parent = at->parent_block() != nullptr ? at->parent_block()->parent_op() : nullptr;
      OAR_CHECK(parent != nullptr, kInternal, "StaticFunction: state '{}' is read outside the program's block", name);
      at = parent;
    }
    ir::Builder b(ctx);
    b.SetInsertionPoint(at);
    const ir::Type type = op->result(0).type();
    const int64_t index = static_cast<int64_t>(num_inputs + slots.size());
    ir::Value input = b.Create("builtin.data", {}, {b.Attr("name", ctx.StringAttr(name)), b.Attr("index", ctx.IntAttr(index))},
                               {&type, 1})
                          ->result(0);
    op->result(0).ReplaceAllUsesWith(input);
    op->Erase();
    program.parameters.erase(name);
    slots.push_back(static_cast<size_t>(it - state.begin()));
  }
  return slots;
}

StaticFunction::StaticFunction(Function fn, std::vector<StateSlot> state, Device device, size_t capacity)
    : fn_(std::move(fn)), state_(std::move(state)), device_(device), capacity_(capacity),
      ctx_(std::make_unique<ir::IrContext>()) {
  OAR_CHECK_ARG(capacity_ > 0, "StaticFunction: the cache capacity must be positive");
  for (const StateSlot& s : state_) OAR_CHECK_ARG(s.tensor != nullptr, "StaticFunction: state '{}' has no tensor", s.name);
}

StaticFunction::~StaticFunction() = default;

const ir::Program* StaticFunction::program() const { return cache_.empty() ? nullptr : cache_.front()->program.get(); }

const scheduler::Executor* StaticFunction::executor() const {
  return cache_.empty() ? nullptr : cache_.front()->executor.get();
}

std::string StaticFunction::GuardKey(std::span<const Tensor> inputs) const {
  std::string key = fmt::format("grad mode: {}\n", GradModeEnabled() ? "on" : "off");
  for (size_t i = 0; i < inputs.size(); ++i) key += fmt::format("input {}: {}\n", i, Describe(inputs[i]));
  for (const StateSlot& s : state_) key += fmt::format("state '{}': {}\n", s.name, Describe(*s.tensor));
  return key;
}

std::vector<Tensor> StaticFunction::Replay(Entry& e, std::span<const Tensor> inputs) {
  std::vector<Tensor> args(inputs.begin(), inputs.end());
  for (size_t slot : e.state_inputs) args.push_back(*state_[slot].tensor);
  const bool first = e.replays++ == 0;
  if (first) {
    // The capture ran eagerly, so the tensors it lifted into the program's parameters lie between its
    // temporaries' blocks, each keeping a segment of them reserved for as long as the program is cached: the
    // constants of every program no executor has bound yet move into one allocation before this one binds
    // its own.
    std::vector<Tensor*> constants;
    for (const std::unique_ptr<Entry>& other : cache_) {
      if (other->executor != nullptr) continue;
      for (auto& [name, t] : other->program->parameters) constants.push_back(&t);
    }
    Compact(std::move(constants), /*keep_held=*/true);
    e.executor = std::make_unique<scheduler::Executor>(*e.program, device_, e.exec_options);
  }
  if (profile_ != nullptr) *profile_ = scheduler::RunProfile();
  // No grad recorded: the program holds its backward. Each update is written over the state it replaces.
  std::vector<Tensor> out = e.executor->Run(args, profile_);
  args.clear();  // do not keep the old state alive past its replacement
  for (size_t k = 0; k < e.updates.size(); ++k) {
    for (const StateSlot& s : state_) {
      if (s.name != e.updates[k]) continue;
      const bool requires_grad = s.tensor->defined() && s.tensor->requires_grad();
      *s.tensor = out[e.num_outputs + k];
      if (requires_grad) s.tensor->set_requires_grad(true);
    }
  }
  out.resize(e.num_outputs);
  if (first) {
    // The state too lies between the capture's temporaries: it moves into one allocation of its own, and the
    // segments the capture used go back to the device. After this replay rather than before, so that the
    // allocation may take the free tail of the segment of the executor's arena, which the replay allocated.
    std::vector<Tensor*> state;
    for (const StateSlot& slot : state_) state.push_back(slot.tensor);
    Compact(std::move(state), /*keep_held=*/false);
    runtime::DeviceContext& dctx = runtime::Runtime::Get().Context(device_);
    dctx.Synchronize();
    dctx.allocator().EmptyCache();
  }
  return out;
}

bool StaticFunction::Matches(const Entry& e, std::span<const Tensor> inputs) const {
  if (e.grad_mode != GradModeEnabled() || e.guards.size() != inputs.size() + state_.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!e.guards[i].Matches(inputs[i])) return false;
  }
  for (size_t i = 0; i < state_.size(); ++i) {
    if (!e.guards[inputs.size() + i].Matches(*state_[i].tensor)) return false;
  }
  return true;
}

std::vector<Tensor> StaticFunction::operator()(std::span<const Tensor> inputs) {
  // The same test as comparing GuardKey's text (grad mode, each tensor's dtype, shape and device, or
  // undefined), without building it on a hit.
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (!Matches(**it, inputs)) continue;
    cache_.splice(cache_.begin(), cache_, it);
    ++stats_.hits;
    return Replay(*cache_.front(), inputs);
  }
  const std::string key = GuardKey(inputs);
  // The guards as the key has them: before the capture, which runs the function (and may change the state).
  const bool grad_mode = GradModeEnabled();
  std::vector<TensorGuard> guards;
  for (const Tensor& t : inputs) guards.emplace_back(t);
  for (const StateSlot& s : state_) guards.emplace_back(*s.tensor);
  ++stats_.misses;
  stats_.miss_reasons.push_back(cache_.empty() ? "first call" : FirstDifference(key, cache_.front()->key));
  std::vector<InputSpec> specs;
  for (size_t i = 0; i < inputs.size(); ++i) specs.push_back(InputSpec::Of(fmt::format("in{}", i), inputs[i]));
  CaptureOptions options;
  options.state = state_;
  Captured c = Capture(*ctx_, fn_, specs, inputs, device_, options);
  auto e = std::make_unique<Entry>();
  e->key = key;
  e->grad_mode = grad_mode;
  e->guards = std::move(guards);
  e->updates = c.state_updates;
  e->num_outputs = c.outputs.size();
  e->program = std::move(c.program);
  e->state_inputs = StateAsInputs(*ctx_, *e->program, state_, inputs.size());
  {
    // As the Predictor prepares its programs: bound to the device's kernels (explicit fallback transfers),
    // results written over dying operands where a kernel allows it. The values are the eager ones, bit for bit.
    passes::PassManager pm;
    pm.ConfigureFromEnvironment();  // OAR_IR_PRINT, as `oar ir` reads it
    pm.AddPipeline("canonicalize,cse,dce");
    pm.AddPipeline(fusion_passes_);
    // Unless CINN fuses (its groups take these chains, and hold their ops in regions a rewrite must not touch),
    // kernels that compute the same operations bit for bit replace chains of them: Adam's update per parameter
    // (fused_adam), the forward's matmul + bias + tanh / relu (fused_linear, where the backward does not read the
    // matmul's or the sum's own result), tanh's and sigmoid's backward (fused_tanh_grad, fused_sigmoid_grad),
    // cross_entropy's log_softmax with the softmax its backward recomputes (fused_log_softmax), and attention's
    // scaled, masked softmax and its backward (fused_masked_softmax, fused_masked_softmax_grad), and the rotary
    // rotation of the forward (fused_rotary: its products are used once, its backward reads only cos and sin)
    // and its backward (fused_rotary_grad).
    if (fusion_passes_.empty()) {
      pm.AddPipeline(
          fmt::format("fuse-adam{{device={0}}},fuse-linear{{device={0}}},fuse-act-grad{{device={0}}},fuse-log-softmax{{"
                      "device={0}}},fuse-masked-softmax{{device={0}}},fuse-masked-softmax-grad{{device={0}}},"
                      "fuse-rotary{{device={0}}},fuse-rotary-grad{{device={0}}},dce",
                      device_.str()));
    }
    pm.AddPipeline(fmt::format("kernel-select{{device={}}}", device_.str()));
    // Forward results the backward reads late are recomputed there where that lowers the step's peak bytes.
    pm.AddPipeline("remat");
    pm.AddPipeline("inplace");
    pm.Run(*e->program);
  }
  // The state updates overwrite the state they replace where the program allows it (the state's last reader
  // runs first): a step holds one copy of the state, as eager's in-place optimiser steps do.
  // The executor is compiled at the first replay (Replay), after the program's constants moved.
  // Fills stay per-run values of the arena: made as presets when the executor compiles (the first replay,
  // amid the capture's temporaries), they would each pin a segment the state's compaction returns (the
  // llama step's reserved peak rose from 56 % to 67 % of eager's; docs/PERFORMANCE.md, branch h16).
  e->exec_options.preset_fills = false;
  for (size_t k = 0; k < e->updates.size(); ++k) {
    for (size_t j = 0; j < e->state_inputs.size(); ++j) {
      if (state_[e->state_inputs[j]].name == e->updates[k]) {
        e->exec_options.donate.push_back({e->num_outputs + k, inputs.size() + j});
      }
    }
  }
  cache_.push_front(std::move(e));
  if (cache_.size() > capacity_) cache_.pop_back();
  return std::move(c.outputs);
}

}  // namespace oar::jit
