// Optimisers (SGD with momentum/Nesterov/weight decay, Adam, AdamW), learning-rate schedules and
// gradient clipping. Parameters are the slots a Module hands out (Module::Parameters()); updates run
// under NoGradGuard on each parameter's own device.
#ifndef OAR_CORE_OPTIM_OPTIM_H_
#define OAR_CORE_OPTIM_OPTIM_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd/autograd.h"

namespace oar::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor*> params, double lr);
  virtual ~Optimizer() = default;
  /// A 0-d tensor of the dtype asked for holding host number k of the step (see ApplyStep).
  using ScalarFn = std::function<Tensor(size_t k, DType dtype, Device device)>;

  /// Apply one update from the parameters' accumulated grad(); parameters without a gradient are skipped.
  /// The same as ApplyStep(NextStepScalars() made into tensors).
  void Step();
  /// Advance the host-side schedule (Adam's step count) and return the numbers the next update uses, the
  /// learning rate first. A captured training step takes them as program inputs, so that one program
  /// serves every step of a schedule.
  virtual std::vector<double> NextStepScalars() { return {lr_}; }
  /// The update, with host number k of NextStepScalars() given by scalar(k, dtype, device).
  virtual void ApplyStep(const ScalarFn& scalar) = 0;
  /// The optimiser's own state tensors (momentum, moments) by name, for capture (jit::StateSlot).
  virtual std::vector<std::pair<std::string, Tensor*>> NamedState() { return {}; }
  void ZeroGrad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }

 protected:
  std::vector<Tensor*> params_;
  double lr_;
};

struct SgdOptions {
  double momentum = 0;
  double weight_decay = 0;  // L2 term added to the gradient
  bool nesterov = false;
};

/// v = momentum v + (g + wd p); p -= lr (nesterov ? g + wd p + momentum v : v)  (PyTorch's convention).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor*> params, double lr, SgdOptions options = {});
  void ApplyStep(const ScalarFn& scalar) override;
  std::vector<std::pair<std::string, Tensor*>> NamedState() override;

 private:
  SgdOptions o_;
  std::vector<Tensor> velocity_;
};

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // true: AdamW (p -= lr wd p), false: L2 added to the gradient
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor*> params, double lr, AdamOptions options = {});
  /// lr, 1 - beta1^t, 1 - beta2^t, 1 - lr * weight_decay (after advancing t).
  std::vector<double> NextStepScalars() override;
  void ApplyStep(const ScalarFn& scalar) override;
  std::vector<std::pair<std::string, Tensor*>> NamedState() override;
  int64_t steps() const { return t_; }

 private:
  AdamOptions o_;
  int64_t t_ = 0;
  std::vector<Tensor> m_, v_;
};

/// AdamW: Adam with decoupled weight decay (default 0.01).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor*> params, double lr, AdamOptions options = {.weight_decay = 0.01, .decoupled = true});
};

/// Learning rate at `step` (0-based): linear warmup from 0 over `warmup` steps, then cosine decay from
/// `base` to `min_lr` at `total` steps (constant afterwards).
double WarmupCosine(int64_t step, double base, int64_t warmup, int64_t total, double min_lr = 0);

/// Scale every gradient so their global L2 norm is at most `max_norm`, as PyTorch's clip_grad_norm_ does:
/// every gradient is multiplied by min(1, max_norm / (norm + 1e-6)). Entirely on the device — no host
/// read, so a training step that clips can be captured into one program. Returns the norm before
/// clipping as a 0-d tensor (float32, or float64 when the first gradient is), on the first gradient's
/// device; undefined when no parameter has a gradient.
Tensor ClipGradNorm(const std::vector<Tensor*>& params, double max_norm);

}  // namespace oar::optim

#endif  // OAR_CORE_OPTIM_OPTIM_H_
