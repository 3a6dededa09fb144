#include "core/optim/optim.h"

#include <cmath>
#include <numbers>

namespace oar::optim {
namespace {

// p <- value, in place, without recording.
void Assign(Tensor* p, const Tensor& value) {
  NoGradGuard no_grad;
  p->copy_(value);
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor*> params, double lr) : params_(std::move(params)), lr_(lr) {
  OAR_CHECK_ARG(lr >= 0, "optimizer: learning rate {} is negative", lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    OAR_CHECK_ARG(params_[i] != nullptr && params_[i]->requires_grad(),
                  "optimizer: parameter {} does not require grad", i);
  }
}

void Optimizer::Step() {
  const std::vector<double> values = NextStepScalars();
  ApplyStep([&](size_t k, DType dtype, Device device) { return full({}, values.at(k), dtype, device); });
}

void Optimizer::ZeroGrad() {
  for (Tensor* p : params_) p->zero_grad();
}

SGD::SGD(std::vector<Tensor*> params, double lr, SgdOptions options)
    : Optimizer(std::move(params), lr), o_(options), velocity_(params_.size()) {
  OAR_CHECK_ARG(!o_.nesterov || o_.momentum > 0, "SGD: Nesterov needs momentum > 0");
}

std::vector<std::pair<std::string, Tensor*>> SGD::NamedState() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (size_t i = 0; i < velocity_.size(); ++i) out.emplace_back(fmt::format("sgd.velocity.{}", i), &velocity_[i]);
  return out;
}

void SGD::ApplyStep(const ScalarFn& scalar) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor* p = params_[i];
    Tensor g = p->grad();
    if (!g.defined()) continue;
    if (o_.weight_decay != 0) g = g + *p * o_.weight_decay;
    Tensor step = g;
    if (o_.momentum != 0) {
      velocity_[i] = velocity_[i].defined() ? velocity_[i] * o_.momentum + g : g.clone();
      step = o_.nesterov ? g + velocity_[i] * o_.momentum : velocity_[i];
    }
    Assign(p, *p - step * scalar(0, p->dtype(), p->device()));
  }
}

Adam::Adam(std::vector<Tensor*> params, double lr, AdamOptions options)
    : Optimizer(std::move(params), lr), o_(options), m_(params_.size()), v_(params_.size()) {
  OAR_CHECK_ARG(o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1,
                "Adam: betas ({}, {}) must be in [0, 1)", o_.beta1, o_.beta2);
}

std::vector<double> Adam::NextStepScalars() {
  ++t_;
  return {lr_, 1 - std::pow(o_.beta1, static_cast<double>(t_)), 1 - std::pow(o_.beta2, static_cast<double>(t_)),
          1 - lr_ * o_.weight_decay};
}

std::vector<std::pair<std::string, Tensor*>> Adam::NamedState() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (size_t i = 0; i < m_.size(); ++i) {
    out.emplace_back(fmt::format("adam.m.{}", i), &m_[i]);
    out.emplace_back(fmt::format("adam.v.{}", i), &v_[i]);
  }
  return out;
}

void Adam::ApplyStep(const ScalarFn& scalar) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor* p = params_[i];
    Tensor g = p->grad();
    if (!g.defined()) continue;
    Tensor value = *p;
    if (o_.weight_decay != 0) {
      if (o_.decoupled) value = value * scalar(3, p->dtype(), p->device());
      else g = g + *p * o_.weight_decay;
    }
    m_[i] = m_[i].defined() ? m_[i] * o_.beta1 + g * (1 - o_.beta1) : g * (1 - o_.beta1);
    v_[i] = v_[i].defined() ? v_[i] * o_.beta2 + g * g * (1 - o_.beta2) : g * g * (1 - o_.beta2);
    const Tensor update = (m_[i] / scalar(1, p->dtype(), p->device())) /
                          (sqrt(v_[i] / scalar(2, p->dtype(), p->device())) + o_.eps);
    Assign(p, value - update * scalar(0, p->dtype(), p->device()));
  }
}

AdamW::AdamW(std::vector<Tensor*> params, double lr, AdamOptions options) : Adam(std::move(params), lr, options) {}

double WarmupCosine(int64_t step, double base, int64_t warmup, int64_t total, double min_lr) {
  if (warmup > 0 && step < warmup) return base * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(total - warmup, 1));
  return min_lr + 0.5 * (base - min_lr) * (1 + std::cos(std::numbers::pi * progress));
}

double ClipGradNorm(const std::vector<Tensor*>& params, double max_norm) {
  OAR_CHECK_ARG(max_norm > 0, "ClipGradNorm: max_norm {} must be positive", max_norm);
  NoGradGuard no_grad;
  double total = 0;
  for (Tensor* p : params) {
    const Tensor g = p->grad();
    if (!g.defined()) continue;
    // Each tensor's sum of squares on its device, in float32 (float64 grads stay float64): casting to
    // float64 there would need a float64 kernel, which kunlun_sim and ascend_sim do not have and strict
    // mode (certification) forbids falling back for. Tensors are added up in double on the host.
    const Tensor w = g.dtype() == DType::kFloat64 ? g : cast(g, DType::kFloat32);
    total += sum(w * w).item<double>();
  }
  const double norm = std::sqrt(total);
  if (norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (Tensor* p : params) {
      if (!p->grad().defined()) continue;
      p->mutable_autograd_meta().grad = p->grad() * scale;
    }
  }
  return norm;
}

}  // namespace oar::optim
