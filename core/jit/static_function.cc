#include "core/jit/static_function.h"

#include "core/base/error.h"
#include "core/jit/interpreter.h"
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

}  // namespace

struct StaticFunction::Entry {
  std::string key;
  std::unique_ptr<ir::Program> program;
  std::vector<std::string> updates;
  size_t num_outputs = 0;  // the function's own
};

StaticFunction::StaticFunction(Function fn, std::vector<StateSlot> state, Device device, size_t capacity)
    : fn_(std::move(fn)), state_(std::move(state)), device_(device), capacity_(capacity),
      ctx_(std::make_unique<ir::IrContext>()) {
  OAR_CHECK_ARG(capacity_ > 0, "StaticFunction: the cache capacity must be positive");
  for (const StateSlot& s : state_) OAR_CHECK_ARG(s.tensor != nullptr, "StaticFunction: state '{}' has no tensor", s.name);
}

StaticFunction::~StaticFunction() = default;

const ir::Program* StaticFunction::program() const { return cache_.empty() ? nullptr : cache_.front()->program.get(); }

std::string StaticFunction::GuardKey(std::span<const Tensor> inputs) const {
  std::string key = fmt::format("grad mode: {}\n", GradModeEnabled() ? "on" : "off");
  for (size_t i = 0; i < inputs.size(); ++i) key += fmt::format("input {}: {}\n", i, Describe(inputs[i]));
  for (const StateSlot& s : state_) key += fmt::format("state '{}': {}\n", s.name, Describe(*s.tensor));
  return key;
}

std::vector<Tensor> StaticFunction::Replay(Entry& e, std::span<const Tensor> inputs) {
  for (const StateSlot& s : state_) {
    if (e.program->parameters.count(s.name) != 0) e.program->parameters[s.name] = *s.tensor;
  }
  std::vector<Tensor> out;
  {
    NoGradGuard no_grad;  // the program holds its own backward: nothing to record
    out = Interpret(*e.program, inputs, device_);
  }
  for (size_t k = 0; k < e.updates.size(); ++k) {
    for (const StateSlot& s : state_) {
      if (s.name != e.updates[k]) continue;
      const bool requires_grad = s.tensor->defined() && s.tensor->requires_grad();
      *s.tensor = out[e.num_outputs + k];
      if (requires_grad) s.tensor->set_requires_grad(true);
    }
  }
  for (auto& [name, t] : e.program->parameters) {
    for (const StateSlot& s : state_) {
      if (s.name == name) t = Tensor();  // do not keep the state alive between calls
    }
  }
  out.resize(e.num_outputs);
  return out;
}

std::vector<Tensor> StaticFunction::operator()(std::span<const Tensor> inputs) {
  const std::string key = GuardKey(inputs);
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if ((*it)->key != key) continue;
    cache_.splice(cache_.begin(), cache_, it);
    ++stats_.hits;
    return Replay(*cache_.front(), inputs);
  }
  ++stats_.misses;
  stats_.miss_reasons.push_back(cache_.empty() ? "first call" : FirstDifference(key, cache_.front()->key));
  std::vector<InputSpec> specs;
  for (size_t i = 0; i < inputs.size(); ++i) specs.push_back(InputSpec::Of(fmt::format("in{}", i), inputs[i]));
  CaptureOptions options;
  options.state = state_;
  Captured c = Capture(*ctx_, fn_, specs, inputs, device_, options);
  auto e = std::make_unique<Entry>();
  e->key = key;
  e->updates = c.state_updates;
  e->num_outputs = c.outputs.size();
  e->program = std::move(c.program);
  for (auto& [name, t] : e->program->parameters) {
    for (const StateSlot& s : state_) {
      if (s.name == name) t = Tensor();
    }
  }
  cache_.push_front(std::move(e));
  if (cache_.size() > capacity_) cache_.pop_back();
  return std::move(c.outputs);
}

}  // namespace oar::jit
