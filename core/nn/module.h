// nn::Module: named parameters, buffers and sub-modules; train/eval; moving to a device; state dicts
// saved and loaded as safetensors.
//
// Parameters and buffers live in the module that registers them; Parameters() hands out pointers to those
// slots, so an optimiser built before To(device) keeps working after it (the slots get new tensors).
#ifndef OAR_CORE_NN_MODULE_H_
#define OAR_CORE_NN_MODULE_H_

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd/autograd.h"

namespace oar::nn {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Every parameter, depth first in registration order, named "child.grandchild.name".
  std::vector<std::pair<std::string, Tensor*>> NamedParameters();
  std::vector<Tensor*> Parameters();
  std::vector<std::pair<std::string, Tensor*>> NamedBuffers();

  void Train(bool on = true);
  void Eval() { Train(false); }
  bool training() const { return training_; }

  /// Move every parameter and buffer to `device` (parameters stay leaves that require grad).
  void To(Device device);
  /// Drop every parameter's gradient.
  void ZeroGrad();
  int64_t NumParameters();

  /// Parameters and buffers by name (the tensors themselves, not copies).
  std::map<std::string, Tensor> StateDict();
  /// Copy values in by name. Every expected entry must be present with the same shape and dtype, and no
  /// unexpected entry may appear; otherwise oar::Error names them all. Values move to each slot's device.
  void LoadStateDict(const std::map<std::string, Tensor>& state);
  void Save(const std::filesystem::path& path, const std::map<std::string, std::string>& metadata = {});
  void Load(const std::filesystem::path& path);

 protected:
  /// Register a trainable parameter (made a leaf that requires grad); returns the slot.
  Tensor& RegisterParameter(const std::string& name, Tensor value);
  /// Register state that is saved but not trained (running statistics).
  Tensor& RegisterBuffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> RegisterModule(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void Collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor*>>& out);

  // std::map keeps slot addresses stable while more are registered.
  std::vector<std::string> parameter_order_, buffer_order_;
  std::map<std::string, Tensor> parameters_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

/// A module with one input and one output.
class UnaryModule : public Module {
 public:
  virtual Tensor Forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return Forward(x); }
};

}  // namespace oar::nn

#endif  // OAR_CORE_NN_MODULE_H_
