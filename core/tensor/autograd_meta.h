// Per-tensor autograd state and the thread-local grad mode. The tape itself (Node, the engine) lives in
// core/autograd; this layer only stores what a tensor must carry so that every layer above can see it.
#ifndef OAR_CORE_TENSOR_AUTOGRAD_META_H_
#define OAR_CORE_TENSOR_AUTOGRAD_META_H_

#include <memory>
#include <span>

#include "core/tensor/tensor.h"

namespace oar {

namespace autograd {
class Node;  // defined in core/autograd/node.h
}

struct AutogradMeta {
  bool requires_grad = false;
  /// The op that produced this tensor (null for leaves and for tensors made under NoGradGuard).
  std::shared_ptr<autograd::Node> grad_fn;
  /// Which output of grad_fn this tensor is.
  int output_nr = 0;
  /// Accumulated gradient of a leaf (undefined until the first backward reaches it).
  Tensor grad;
};

/// Whether ops record the tape on this thread (true by default).
bool GradModeEnabled();
void SetGradMode(bool enabled);

/// Disables recording for its lifetime (inference, optimiser updates), restoring the previous mode.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradModeEnabled()) { SetGradMode(false); }
  ~NoGradGuard() { SetGradMode(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// Sets grad mode to `enabled` for its lifetime (the engine uses it for create_graph).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(GradModeEnabled()) { SetGradMode(enabled); }
  ~GradModeGuard() { SetGradMode(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

/// Called for every metadata view (permute, slice, view, expand, squeeze, unsqueeze) of a tensor that
/// requires grad while grad mode is on, so the autograd layer can record it. Installed by core/autograd.
/// `args`: permute -> the dims; slice -> dim, start, end, step (normalised); squeeze/unsqueeze -> the dim;
/// view/expand -> empty (the shapes say everything).
enum class ViewOp { kView, kPermute, kSlice, kExpand, kSqueeze, kUnsqueeze };
using ViewRecorder = void (*)(const Tensor& base, Tensor& view, ViewOp op, std::span<const int64_t> args);
void SetViewRecorder(ViewRecorder recorder);

}  // namespace oar

#endif  // OAR_CORE_TENSOR_AUTOGRAD_META_H_
