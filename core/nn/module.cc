#include "core/nn/module.h"

#include <set>

namespace oar::nn {

Tensor& Module::RegisterParameter(const std::string& name, Tensor value) {
  OAR_CHECK_ARG(value.defined(), "RegisterParameter('{}'): undefined tensor", name);
  OAR_CHECK_ARG(!parameters_.count(name) && !buffers_.count(name), "RegisterParameter: '{}' is registered twice", name);
  Tensor leaf = value.detach();
  leaf.set_requires_grad(true);
  parameter_order_.push_back(name);
  return parameters_[name] = leaf;
}

Tensor& Module::RegisterBuffer(const std::string& name, Tensor value) {
  OAR_CHECK_ARG(!parameters_.count(name) && !buffers_.count(name), "RegisterBuffer: '{}' is registered twice", name);
  buffer_order_.push_back(name);
  return buffers_[name] = value.detach();
}

void Module::Collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor*>>& out) {
  const auto& order = buffers ? buffer_order_ : parameter_order_;
  auto& slots = buffers ? buffers_ : parameters_;
  for (const std::string& name : order) out.emplace_back(prefix + name, &slots.at(name));
  for (auto& [name, child] : children_) child->Collect(prefix + name + ".", buffers, out);
}

std::vector<std::pair<std::string, Tensor*>> Module::NamedParameters() {
  std::vector<std::pair<std::string, Tensor*>> out;
  Collect("", false, out);
  return out;
}

std::vector<Tensor*> Module::Parameters() {
  std::vector<Tensor*> out;
  for (auto& [name, t] : NamedParameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::NamedBuffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  Collect("", true, out);
  return out;
}

void Module::Train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->Train(on);
}

void Module::To(Device device) {
  for (auto& [name, p] : NamedParameters()) {
    Tensor moved = p->detach().to(device);
    moved.set_requires_grad(true);
    *p = moved;
  }
  for (auto& [name, b] : NamedBuffers()) *b = b->to(device);
}

void Module::ZeroGrad() {
  for (Tensor* p : Parameters()) p->zero_grad();
}

int64_t Module::NumParameters() {
  int64_t n = 0;
  for (Tensor* p : Parameters()) n += p->numel();
  return n;
}

std::map<std::string, Tensor> Module::StateDict() {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : NamedParameters()) out[name] = t->detach();
  for (auto& [name, t] : NamedBuffers()) out[name] = *t;
  return out;
}

void Module::LoadStateDict(const std::map<std::string, Tensor>& state) {
  auto slots = NamedParameters();
  for (auto& b : NamedBuffers()) slots.push_back(b);
  std::set<std::string> expected;
  std::string problems;
  for (auto& [name, slot] : slots) {
    expected.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      problems += fmt::format("; missing '{}'", name);
    } else if (it->second.shape() != slot->shape() || it->second.dtype() != slot->dtype()) {
      problems += fmt::format("; '{}' is {}{} but the module expects {}{}", name, DTypeName(it->second.dtype()),
                              it->second.shape().ToString(), DTypeName(slot->dtype()), slot->shape().ToString());
    }
  }
  for (const auto& [name, t] : state) {
    if (!expected.count(name)) problems += fmt::format("; unexpected '{}'", name);
  }
  OAR_CHECK_ARG(problems.empty(), "LoadStateDict: the state does not match the module{}", problems);
  NoGradGuard no_grad;
  for (auto& [name, slot] : slots) slot->copy_(state.at(name));
}

void Module::Save(const std::filesystem::path& path, const std::map<std::string, std::string>& metadata) {
  SaveTensors(path, StateDict(), metadata);
}

void Module::Load(const std::filesystem::path& path) {
  const Tensor* any = nullptr;
  for (auto& [name, t] : NamedParameters()) {
    any = t;
    break;
  }
  const std::map<std::string, Tensor> state = LoadTensors(path, any ? any->device() : DefaultDevice());
  try {
    LoadStateDict(state);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path.string(), e.what()));  // which file does not fit
  }
}

}  // namespace oar::nn
