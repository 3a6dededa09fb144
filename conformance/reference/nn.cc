#include "conformance/reference/nn.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "conformance/reference/elementwise.h"
#include "conformance/reference/internal.h"
#include "conformance/reference/linalg.h"
#include "conformance/reference/shape.h"
#include "core/base/error.h"

namespace oar::reference {
namespace {

using internal::CheckArray;
using internal::CheckRank;
using internal::PlanReduce;
using internal::ReducePlan;

constexpr double kInf = std::numeric_limits<double>::infinity();

// The lanes of x along one axis (rank >= 1): each group lists the flat indices of one lane in order.
ReducePlan Lanes(const Array& x, int64_t axis, std::string_view op) {
  CheckArray(x, op, "x");
  OAR_CHECK_ARG(x.rank() >= 1, "{}: needs rank >= 1, got a scalar", op);
  return PlanReduce(x, {axis}, true, op);
}

// max over a lane, ignoring NaN (a NaN then spreads through exp(x - max) on its own).
double LaneMax(const Array& x, const std::vector<int64_t>& lane) {
  double m = -kInf;
  for (int64_t i : lane) m = std::max(m, x.data[i]);
  return m;
}

// sum(exp(x - m)) over a lane.
double LaneExpSum(const Array& x, const std::vector<int64_t>& lane, double m) {
  internal::Accumulator s;
  for (int64_t i : lane) s.Add(std::exp(x.data[i] - m));
  return s.Value();
}

// sum(a[i] * b[i]) over a lane (b may be null: sum of a).
double LaneDot(const Array& a, const Array* b, const std::vector<int64_t>& lane) {
  internal::Accumulator s;
  for (int64_t i : lane) s.Add(b ? a.data[i] * b->data[i] : a.data[i]);
  return s.Value();
}

// Groups over the trailing `normalized_ndim` dimensions, with the affine parameters checked against
// the normalised shape.
ReducePlan NormGroups(const Array& x, int64_t normalized_ndim, const std::optional<Array>& weight,
                      const std::optional<Array>& bias, std::string_view op) {
  CheckArray(x, op, "x");
  OAR_CHECK_ARG(normalized_ndim >= 1 && normalized_ndim <= x.rank(),
                "{}: normalized_ndim must be in [1, {}] for x {}, got {}", op, x.rank(), ShapeString(x.shape),
                normalized_ndim);
  const std::vector<int64_t> normalized(x.shape.end() - normalized_ndim, x.shape.end());
  for (const auto& [param, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!*param) continue;
    CheckArray(**param, op, name);
    OAR_CHECK_ARG((*param)->shape == normalized, "{}: {} {} must have the normalised shape {}", op, name,
                  ShapeString((*param)->shape), ShapeString(normalized));
  }
  std::vector<int64_t> axes;
  for (int64_t d = x.rank() - normalized_ndim; d < x.rank(); ++d) axes.push_back(d);
  return PlanReduce(x, axes, true, op);
}

double ParamOr(const std::optional<Array>& p, int64_t j, double fallback) { return p ? p->data[j] : fallback; }

struct Moments {
  double mean;
  double rstd;
};
Moments GroupMoments(const Array& x, const std::vector<int64_t>& group, double eps) {
  const double n = static_cast<double>(group.size());
  const double m = LaneDot(x, nullptr, group) / n;
  internal::Accumulator ss;
  for (int64_t i : group) ss.Add((x.data[i] - m) * (x.data[i] - m));
  return {m, 1.0 / std::sqrt(ss.Value() / n + eps)};
}

// dx for y = xhat·w over one group, xhat = (x - mean)·rstd with the group's own (biased) statistics,
// given gh = grad_y·w per element: dx = rstd·(gh - mean(gh) - xhat·mean(gh·xhat)).
void NormalizedBackward(const Array& x, const std::vector<int64_t>& group, const Moments& mo,
                        const std::vector<double>& gh, Array* dx) {
  const double n = static_cast<double>(group.size());
  internal::Accumulator sum_gh, sum_gh_xhat;
  for (size_t j = 0; j < group.size(); ++j) {
    sum_gh.Add(gh[j]);
    sum_gh_xhat.Add(gh[j] * (x.data[group[j]] - mo.mean) * mo.rstd);
  }
  const double mean_gh = sum_gh.Value() / n, mean_gh_xhat = sum_gh_xhat.Value() / n;
  for (size_t j = 0; j < group.size(); ++j) {
    const double xhat = (x.data[group[j]] - mo.mean) * mo.rstd;
    dx->data[group[j]] = mo.rstd * (gh[j] - mean_gh - xhat * mean_gh_xhat);
  }
}

void CheckEps(double eps, std::string_view op) {
  OAR_CHECK_ARG(eps >= 0 && std::isfinite(eps), "{}: eps must be finite and >= 0, got {}", op, eps);
}

double GroupRms(const Array& x, const std::vector<int64_t>& group, double eps) {
  return 1.0 / std::sqrt(LaneDot(x, &x, group) / static_cast<double>(group.size()) + eps);
}

// Channel layout of batch norm: x [N, C, ...].
void CheckChannelParam(const std::optional<Array>& p, int64_t channels, std::string_view op, std::string_view name) {
  if (!p) return;
  CheckRank(*p, 1, op, name);
  OAR_CHECK_ARG(p->shape[0] == channels, "{}: {} {} must have C = {} elements", op, name, ShapeString(p->shape),
                channels);
}

// Class-index loss layout: logits [N, C, d...] or [C]; sample s and class c -> flat logits index.
struct ClassLayout {
  int64_t samples, classes, inner;
  int64_t Flat(int64_t s, int64_t c) const { return ((s / inner) * classes + c) * inner + s % inner; }
};

ClassLayout PlanClassLoss(const Array& input, const Array& target, int64_t ignore_index, std::string_view op) {
  CheckArray(input, op, "input");
  CheckArray(target, op, "target");
  OAR_CHECK_ARG(input.rank() >= 1, "{}: input must have rank >= 1 ([C] or [N, C, ...]), got a scalar", op);
  std::vector<int64_t> expected;
  ClassLayout layout{1, input.shape[0], 1};
  if (input.rank() >= 2) {
    expected = input.shape;
    expected.erase(expected.begin() + 1);
    layout = {NumElements(expected), input.shape[1],
              NumElements(std::vector<int64_t>(input.shape.begin() + 2, input.shape.end()))};
  }
  OAR_CHECK_ARG(target.shape == expected, "{}: target {} must have input {}'s shape without the class dimension ({})",
                op, ShapeString(target.shape), ShapeString(input.shape), ShapeString(expected));
  for (int64_t s = 0; s < layout.samples; ++s) {
    const int64_t t = internal::ToInt(target.data[s], op, "target");
    OAR_CHECK(t == ignore_index || (t >= 0 && t < layout.classes), kOutOfRange,
              "{}: target {} at position {} is outside [0, {}) and is not ignore_index ({})", op, t, s, layout.classes,
              ignore_index);
  }
  return layout;
}

bool Ignored(const Array& target, int64_t s, int64_t ignore_index) {
  return static_cast<int64_t>(target.data[s]) == ignore_index;
}

int64_t CountValid(const Array& target, int64_t ignore_index) {
  int64_t n = 0;
  for (int64_t s = 0; s < target.numel(); ++s) n += Ignored(target, s, ignore_index) ? 0 : 1;
  return n;
}

Array Reduce(const std::vector<double>& losses, const std::vector<int64_t>& shape, double mean_count,
             Reduction reduction) {
  if (reduction == Reduction::kNone) return Array{shape, losses};
  internal::Accumulator s;
  for (double l : losses) s.Add(l);
  return Array::Scalar(reduction == Reduction::kSum ? s.Value() : s.Value() / mean_count);
}

// The upstream gradient reaching element s of the unreduced losses.
double LossGradAt(const Array& grad_loss, int64_t s, double mean_count, Reduction reduction) {
  if (reduction == Reduction::kNone) return grad_loss.data[s];
  return reduction == Reduction::kSum ? grad_loss.data[0] : grad_loss.data[0] / mean_count;
}

void CheckLossGrad(const Array& grad_loss, const std::vector<int64_t>& unreduced, Reduction reduction,
                   std::string_view op) {
  CheckArray(grad_loss, op, "grad_loss");
  const std::vector<int64_t> expected = reduction == Reduction::kNone ? unreduced : std::vector<int64_t>{};
  OAR_CHECK_ARG(grad_loss.shape == expected, "{}: grad_loss {} must have the loss's shape {}", op,
                ShapeString(grad_loss.shape), ShapeString(expected));
}

void CheckSmoothing(double s, std::string_view op) {
  OAR_CHECK_ARG(s >= 0.0 && s <= 1.0, "{}: label_smoothing must be in [0, 1], got {}", op, s);
}

// Softmax probabilities and log-probabilities of sample s over the classes.
void ClassLogProbs(const Array& logits, const ClassLayout& layout, int64_t s, std::vector<double>* log_probs) {
  log_probs->assign(static_cast<size_t>(layout.classes), 0.0);
  double m = -kInf;
  for (int64_t c = 0; c < layout.classes; ++c) m = std::max(m, logits.data[layout.Flat(s, c)]);
  internal::Accumulator z;
  for (int64_t c = 0; c < layout.classes; ++c) z.Add(std::exp(logits.data[layout.Flat(s, c)] - m));
  const double log_z = std::log(z.Value());
  for (int64_t c = 0; c < layout.classes; ++c) (*log_probs)[c] = logits.data[layout.Flat(s, c)] - m - log_z;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Softmax and normalisation
// ---------------------------------------------------------------------------------------------------

Array softmax(const Array& x, int64_t axis) {
  const ReducePlan lanes = Lanes(x, axis, "softmax");
  Array y = x;
  for (const std::vector<int64_t>& lane : lanes.groups) {
    const double m = LaneMax(x, lane);
    const double z = LaneExpSum(x, lane, m);
    for (int64_t i : lane) y.data[i] = std::exp(x.data[i] - m) / z;
  }
  return y;
}

Array log_softmax(const Array& x, int64_t axis) {
  const ReducePlan lanes = Lanes(x, axis, "log_softmax");
  Array y = x;
  for (const std::vector<int64_t>& lane : lanes.groups) {
    const double m = LaneMax(x, lane);
    const double lse = std::log(LaneExpSum(x, lane, m));
    for (int64_t i : lane) y.data[i] = x.data[i] - m - lse;
  }
  return y;
}

Array layer_norm(const Array& x, int64_t normalized_ndim, const std::optional<Array>& weight,
                 const std::optional<Array>& bias, double eps) {
  const ReducePlan groups = NormGroups(x, normalized_ndim, weight, bias, "layer_norm");
  CheckEps(eps, "layer_norm");
  Array y = x;
  for (const std::vector<int64_t>& group : groups.groups) {
    const Moments mo = GroupMoments(x, group, eps);
    for (size_t j = 0; j < group.size(); ++j) {
      const int64_t i = group[j];
      y.data[i] = (x.data[i] - mo.mean) * mo.rstd * ParamOr(weight, j, 1.0) + ParamOr(bias, j, 0.0);
    }
  }
  return y;
}

LayerNormStats layer_norm_stats(const Array& x, int64_t normalized_ndim, double eps) {
  const ReducePlan groups = NormGroups(x, normalized_ndim, std::nullopt, std::nullopt, "layer_norm_stats");
  CheckEps(eps, "layer_norm_stats");
  LayerNormStats stats{Array::Full(groups.keep_shape, 0.0), Array::Full(groups.keep_shape, 0.0)};
  for (size_t g = 0; g < groups.groups.size(); ++g) {
    const Moments mo = GroupMoments(x, groups.groups[g], eps);
    stats.mean.data[g] = mo.mean;
    stats.rstd.data[g] = mo.rstd;
  }
  return stats;
}

Array rms_norm(const Array& x, int64_t normalized_ndim, const std::optional<Array>& weight, double eps) {
  const ReducePlan groups = NormGroups(x, normalized_ndim, weight, std::nullopt, "rms_norm");
  CheckEps(eps, "rms_norm");
  Array y = x;
  for (const std::vector<int64_t>& group : groups.groups) {
    const double r = GroupRms(x, group, eps);
    for (size_t j = 0; j < group.size(); ++j) y.data[group[j]] = x.data[group[j]] * r * ParamOr(weight, j, 1.0);
  }
  return y;
}

Array batch_norm(const Array& x, const Array& running_mean, const Array& running_var,
                 const std::optional<Array>& weight, const std::optional<Array>& bias, double eps) {
  CheckArray(x, "batch_norm", "x");
  OAR_CHECK_ARG(x.rank() >= 2, "batch_norm: x must be [N, C, ...], got {}", ShapeString(x.shape));
  CheckEps(eps, "batch_norm");
  const int64_t channels = x.shape[1];
  CheckChannelParam(running_mean, channels, "batch_norm", "running_mean");
  CheckChannelParam(running_var, channels, "batch_norm", "running_var");
  CheckChannelParam(weight, channels, "batch_norm", "weight");
  CheckChannelParam(bias, channels, "batch_norm", "bias");
  const int64_t spatial = NumElements(std::vector<int64_t>(x.shape.begin() + 2, x.shape.end()));
  Array y = x;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / spatial) % channels;
    y.data[i] = (x.data[i] - running_mean.data[c]) / std::sqrt(running_var.data[c] + eps) * ParamOr(weight, c, 1.0) +
                ParamOr(bias, c, 0.0);
  }
  return y;
}

BatchNormTrainResult batch_norm_train(const Array& x, const std::optional<Array>& weight,
                                      const std::optional<Array>& bias, double eps) {
  CheckArray(x, "batch_norm_train", "x");
  OAR_CHECK_ARG(x.rank() >= 2, "batch_norm_train: x must be [N, C, ...], got {}", ShapeString(x.shape));
  CheckEps(eps, "batch_norm_train");
  const int64_t channels = x.shape[1];
  CheckChannelParam(weight, channels, "batch_norm_train", "weight");
  CheckChannelParam(bias, channels, "batch_norm_train", "bias");
  std::vector<int64_t> axes{0};
  for (int64_t d = 2; d < x.rank(); ++d) axes.push_back(d);
  const ReducePlan groups = PlanReduce(x, axes, false, "batch_norm_train");
  OAR_CHECK_ARG(groups.group_size > 1, "batch_norm_train: needs more than one value per channel, x is {}",
                ShapeString(x.shape));
  BatchNormTrainResult r{x, Array::Full({channels}, 0.0), Array::Full({channels}, 0.0)};
  const double n = static_cast<double>(groups.group_size);
  for (int64_t c = 0; c < channels; ++c) {
    const Moments mo = GroupMoments(x, groups.groups[c], eps);
    internal::Accumulator ss;
    for (int64_t i : groups.groups[c]) ss.Add((x.data[i] - mo.mean) * (x.data[i] - mo.mean));
    r.batch_mean.data[c] = mo.mean;
    r.batch_var_unbiased.data[c] = ss.Value() / (n - 1.0);
    for (int64_t i : groups.groups[c]) {
      r.y.data[i] = (x.data[i] - mo.mean) * mo.rstd * ParamOr(weight, c, 1.0) + ParamOr(bias, c, 0.0);
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------------------------------

Array cross_entropy(const Array& logits, const Array& target, int64_t ignore_index, double label_smoothing,
                    Reduction reduction) {
  CheckSmoothing(label_smoothing, "cross_entropy");
  const ClassLayout layout = PlanClassLoss(logits, target, ignore_index, "cross_entropy");
  std::vector<double> losses(static_cast<size_t>(layout.samples), 0.0);
  std::vector<double> log_probs;
  const double c_count = static_cast<double>(layout.classes);
  for (int64_t s = 0; s < layout.samples; ++s) {
    if (Ignored(target, s, ignore_index)) continue;
    ClassLogProbs(logits, layout, s, &log_probs);
    internal::Accumulator all;
    for (double lp : log_probs) all.Add(-lp);
    const double nll = -log_probs[static_cast<int64_t>(target.data[s])];
    losses[s] = (1.0 - label_smoothing) * nll + label_smoothing / c_count * all.Value();
  }
  return Reduce(losses, target.shape, static_cast<double>(CountValid(target, ignore_index)), reduction);
}

Array nll_loss(const Array& log_probs, const Array& target, int64_t ignore_index, Reduction reduction) {
  const ClassLayout layout = PlanClassLoss(log_probs, target, ignore_index, "nll_loss");
  std::vector<double> losses(static_cast<size_t>(layout.samples), 0.0);
  for (int64_t s = 0; s < layout.samples; ++s) {
    if (!Ignored(target, s, ignore_index)) {
      losses[s] = -log_probs.data[layout.Flat(s, static_cast<int64_t>(target.data[s]))];
    }
  }
  return Reduce(losses, target.shape, static_cast<double>(CountValid(target, ignore_index)), reduction);
}

Array mse_loss(const Array& a, const Array& b, Reduction reduction) {
  CheckArray(a, "mse_loss", "a");
  CheckArray(b, "mse_loss", "b");
  OAR_CHECK_ARG(a.shape == b.shape, "mse_loss: shapes {} and {} differ", ShapeString(a.shape), ShapeString(b.shape));
  std::vector<double> losses(a.data.size());
  for (size_t i = 0; i < losses.size(); ++i) losses[i] = (a.data[i] - b.data[i]) * (a.data[i] - b.data[i]);
  return Reduce(losses, a.shape, static_cast<double>(a.numel()), reduction);
}

// ---------------------------------------------------------------------------------------------------
// Embedding and attention
// ---------------------------------------------------------------------------------------------------

Array embedding(const Array& weight, const Array& indices) {
  CheckRank(weight, 2, "embedding", "weight");
  CheckArray(indices, "embedding", "indices");
  const int64_t rows = weight.shape[0], dim = weight.shape[1];
  std::vector<int64_t> shape = indices.shape;
  shape.push_back(dim);
  Array out = Array::Full(shape, 0.0);
  for (int64_t p = 0; p < indices.numel(); ++p) {
    const int64_t r = internal::ToInt(indices.data[p], "embedding", "indices");
    OAR_CHECK(r >= 0 && r < rows, kOutOfRange, "embedding: index {} at position {} is outside [0, {})", r, p, rows);
    for (int64_t d = 0; d < dim; ++d) out.data[p * dim + d] = weight.data[r * dim + d];
  }
  return out;
}

Array rotary_embedding(const Array& x, const Array& positions, double base) {
  CheckArray(x, "rotary_embedding", "x");
  CheckArray(positions, "rotary_embedding", "positions");
  OAR_CHECK_ARG(x.rank() >= 2 && x.shape.back() % 2 == 0, "rotary_embedding: x must be [..., T, D] with D even, got {}",
                ShapeString(x.shape));
  OAR_CHECK_ARG(base > 0 && std::isfinite(base), "rotary_embedding: base must be positive, got {}", base);
  const std::vector<int64_t> rows_shape(x.shape.begin(), x.shape.end() - 1);
  const Array pos = internal::BroadcastTo(positions, rows_shape, "rotary_embedding");
  const int64_t d = x.shape.back(), half = d / 2;
  Array out = x;
  for (int64_t r = 0; r < pos.numel(); ++r) {
    for (int64_t i = 0; i < half; ++i) {
      const double theta = pos.data[r] * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const double a = x.data[r * d + i], b = x.data[r * d + i + half];
      out.data[r * d + i] = a * std::cos(theta) - b * std::sin(theta);
      out.data[r * d + i + half] = b * std::cos(theta) + a * std::sin(theta);
    }
  }
  return out;
}

Array scaled_dot_product_attention(const Array& q, const Array& k, const Array& v, bool causal,
                                   const std::optional<Array>& mask, std::optional<double> scale) {
  constexpr std::string_view kOp = "scaled_dot_product_attention";
  CheckArray(q, kOp, "q");
  CheckArray(k, kOp, "k");
  CheckArray(v, kOp, "v");
  OAR_CHECK_ARG(q.rank() >= 2 && k.rank() >= 2 && v.rank() >= 2, "{}: q, k, v must have rank >= 2, got {}, {}, {}", kOp,
                ShapeString(q.shape), ShapeString(k.shape), ShapeString(v.shape));
  OAR_CHECK_ARG(q.shape.back() == k.shape.back() && q.shape.back() >= 1,
                "{}: q {} and k {} must share a nonzero head dimension", kOp, ShapeString(q.shape),
                ShapeString(k.shape));
  OAR_CHECK_ARG(k.shape[k.rank() - 2] == v.shape[v.rank() - 2], "{}: k {} and v {} must have the same length", kOp,
                ShapeString(k.shape), ShapeString(v.shape));
  OAR_CHECK_ARG(!(causal && mask), "{}: causal and an explicit mask cannot be combined", kOp);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.shape.back())));
  Array scores = mul(matmul(q, transpose(k, -1, -2)), Array::Scalar(s));
  if (mask) {
    CheckArray(*mask, kOp, "mask");
    OAR_CHECK_ARG(internal::BroadcastShape(scores.shape, mask->shape, kOp) == scores.shape,
                  "{}: mask {} must broadcast to the score shape {}", kOp, ShapeString(mask->shape),
                  ShapeString(scores.shape));
    scores = add(scores, *mask);
  }
  if (causal) {
    const int64_t tq = scores.shape[scores.rank() - 2], tk = scores.shape.back();
    for (int64_t i = 0; i < scores.numel(); ++i) {
      if ((i % tk) > (i / tk) % tq) scores.data[i] = -kInf;
    }
  }
  return matmul(softmax(scores, -1), v);
}

// ---------------------------------------------------------------------------------------------------
// Gradients
// ---------------------------------------------------------------------------------------------------

Array softmax_grad(const Array& x, const Array& grad_y, int64_t axis) {
  CheckArray(grad_y, "softmax_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == x.shape, "softmax_grad: grad_y {} must have x's shape {}", ShapeString(grad_y.shape),
                ShapeString(x.shape));
  const Array y = softmax(x, axis);
  const ReducePlan lanes = Lanes(x, axis, "softmax_grad");
  Array dx = x;
  for (const std::vector<int64_t>& lane : lanes.groups) {
    const double dot = LaneDot(grad_y, &y, lane);
    for (int64_t i : lane) dx.data[i] = y.data[i] * (grad_y.data[i] - dot);
  }
  return dx;
}

Array log_softmax_grad(const Array& x, const Array& grad_y, int64_t axis) {
  CheckArray(grad_y, "log_softmax_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == x.shape, "log_softmax_grad: grad_y {} must have x's shape {}",
                ShapeString(grad_y.shape), ShapeString(x.shape));
  const Array p = softmax(x, axis);
  const ReducePlan lanes = Lanes(x, axis, "log_softmax_grad");
  Array dx = x;
  for (const std::vector<int64_t>& lane : lanes.groups) {
    const double total = LaneDot(grad_y, nullptr, lane);
    for (int64_t i : lane) dx.data[i] = grad_y.data[i] - p.data[i] * total;
  }
  return dx;
}

LayerNormGrads layer_norm_grad(const Array& x, const Array& grad_y, int64_t normalized_ndim,
                               const std::optional<Array>& weight, double eps) {
  const ReducePlan groups = NormGroups(x, normalized_ndim, weight, std::nullopt, "layer_norm_grad");
  CheckEps(eps, "layer_norm_grad");
  CheckArray(grad_y, "layer_norm_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == x.shape, "layer_norm_grad: grad_y {} must have x's shape {}", ShapeString(grad_y.shape),
                ShapeString(x.shape));
  const std::vector<int64_t> normalized(x.shape.end() - normalized_ndim, x.shape.end());
  LayerNormGrads g{x, Array::Full(normalized, 0.0), Array::Full(normalized, 0.0)};
  std::vector<internal::Accumulator> dw(g.dweight.data.size()), db(g.dbias.data.size());
  std::vector<double> gh;
  for (const std::vector<int64_t>& group : groups.groups) {
    const Moments mo = GroupMoments(x, group, eps);
    gh.clear();
    for (size_t j = 0; j < group.size(); ++j) {
      gh.push_back(grad_y.data[group[j]] * ParamOr(weight, j, 1.0));
      dw[j].Add(grad_y.data[group[j]] * (x.data[group[j]] - mo.mean) * mo.rstd);
      db[j].Add(grad_y.data[group[j]]);
    }
    NormalizedBackward(x, group, mo, gh, &g.dx);
  }
  for (size_t j = 0; j < dw.size(); ++j) g.dweight.data[j] = dw[j].Value();
  for (size_t j = 0; j < db.size(); ++j) g.dbias.data[j] = db[j].Value();
  return g;
}

RmsNormGrads rms_norm_grad(const Array& x, const Array& grad_y, int64_t normalized_ndim,
                           const std::optional<Array>& weight, double eps) {
  const ReducePlan groups = NormGroups(x, normalized_ndim, weight, std::nullopt, "rms_norm_grad");
  CheckEps(eps, "rms_norm_grad");
  CheckArray(grad_y, "rms_norm_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == x.shape, "rms_norm_grad: grad_y {} must have x's shape {}", ShapeString(grad_y.shape),
                ShapeString(x.shape));
  const std::vector<int64_t> normalized(x.shape.end() - normalized_ndim, x.shape.end());
  RmsNormGrads g{x, Array::Full(normalized, 0.0)};
  std::vector<internal::Accumulator> dw(g.dweight.data.size());
  for (const std::vector<int64_t>& group : groups.groups) {
    const double r = GroupRms(x, group, eps);
    const double n = static_cast<double>(group.size());
    // y = x·r·w with r = (mean(x^2) + eps)^(-1/2), dr/dx_i = -r^3 x_i / n:
    // dx = r·gh - x·r^3·mean(gh·x), gh = grad_y·w.
    internal::Accumulator sum_gh_x;
    for (size_t j = 0; j < group.size(); ++j) {
      sum_gh_x.Add(grad_y.data[group[j]] * ParamOr(weight, j, 1.0) * x.data[group[j]]);
      dw[j].Add(grad_y.data[group[j]] * x.data[group[j]] * r);
    }
    const double mean_gh_x = sum_gh_x.Value() / n;
    for (size_t j = 0; j < group.size(); ++j) {
      const double gh = grad_y.data[group[j]] * ParamOr(weight, j, 1.0);
      g.dx.data[group[j]] = r * gh - x.data[group[j]] * r * r * r * mean_gh_x;
    }
  }
  for (size_t j = 0; j < dw.size(); ++j) g.dweight.data[j] = dw[j].Value();
  return g;
}

Array cross_entropy_grad(const Array& logits, const Array& target, const Array& grad_loss, int64_t ignore_index,
                         double label_smoothing, Reduction reduction) {
  CheckSmoothing(label_smoothing, "cross_entropy_grad");
  const ClassLayout layout = PlanClassLoss(logits, target, ignore_index, "cross_entropy_grad");
  CheckLossGrad(grad_loss, target.shape, reduction, "cross_entropy_grad");
  const double valid = static_cast<double>(CountValid(target, ignore_index));
  const double c_count = static_cast<double>(layout.classes);
  Array d = Array::Full(logits.shape, 0.0);
  std::vector<double> log_probs;
  for (int64_t s = 0; s < layout.samples; ++s) {
    if (Ignored(target, s, ignore_index)) continue;
    const double g = LossGradAt(grad_loss, s, valid, reduction);
    ClassLogProbs(logits, layout, s, &log_probs);
    const int64_t t = static_cast<int64_t>(target.data[s]);
    for (int64_t c = 0; c < layout.classes; ++c) {
      const double smoothed_target = (c == t ? 1.0 - label_smoothing : 0.0) + label_smoothing / c_count;
      d.data[layout.Flat(s, c)] = g * (std::exp(log_probs[c]) - smoothed_target);
    }
  }
  return d;
}

Array nll_loss_grad(const Array& log_probs, const Array& target, const Array& grad_loss, int64_t ignore_index,
                    Reduction reduction) {
  const ClassLayout layout = PlanClassLoss(log_probs, target, ignore_index, "nll_loss_grad");
  CheckLossGrad(grad_loss, target.shape, reduction, "nll_loss_grad");
  const double valid = static_cast<double>(CountValid(target, ignore_index));
  Array d = Array::Full(log_probs.shape, 0.0);
  for (int64_t s = 0; s < layout.samples; ++s) {
    if (Ignored(target, s, ignore_index)) continue;
    d.data[layout.Flat(s, static_cast<int64_t>(target.data[s]))] = -LossGradAt(grad_loss, s, valid, reduction);
  }
  return d;
}

MseLossGrads mse_loss_grad(const Array& a, const Array& b, const Array& grad_loss, Reduction reduction) {
  mse_loss(a, b, Reduction::kNone);  // validates a and b
  CheckLossGrad(grad_loss, a.shape, reduction, "mse_loss_grad");
  MseLossGrads g{a, b};
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d =
        2.0 * (a.data[i] - b.data[i]) * LossGradAt(grad_loss, i, static_cast<double>(a.numel()), reduction);
    g.da.data[i] = d;
    g.db.data[i] = -d;
  }
  return g;
}

Array embedding_grad(const Array& weight, const Array& indices, const Array& grad_y) {
  const Array y = embedding(weight, indices);  // validates weight and indices
  CheckArray(grad_y, "embedding_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == y.shape, "embedding_grad: grad_y {} must have the output shape {}",
                ShapeString(grad_y.shape), ShapeString(y.shape));
  const int64_t dim = weight.shape[1];
  Array dw = Array::Full(weight.shape, 0.0);
  for (int64_t p = 0; p < indices.numel(); ++p) {
    const int64_t r = static_cast<int64_t>(indices.data[p]);
    for (int64_t d = 0; d < dim; ++d) dw.data[r * dim + d] += grad_y.data[p * dim + d];
  }
  return dw;
}

BatchNormGrads batch_norm_train_grad(const Array& x, const Array& grad_y, const std::optional<Array>& weight,
                                     double eps) {
  batch_norm_train(x, weight, std::nullopt, eps);  // validates
  CheckArray(grad_y, "batch_norm_train_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == x.shape, "batch_norm_train_grad: grad_y {} must have x's shape {}",
                ShapeString(grad_y.shape), ShapeString(x.shape));
  const int64_t channels = x.shape[1];
  std::vector<int64_t> axes{0};
  for (int64_t d = 2; d < x.rank(); ++d) axes.push_back(d);
  const ReducePlan groups = PlanReduce(x, axes, false, "batch_norm_train_grad");
  BatchNormGrads g{x, Array::Full({channels}, 0.0), Array::Full({channels}, 0.0)};
  std::vector<double> gh;
  for (int64_t c = 0; c < channels; ++c) {
    const std::vector<int64_t>& group = groups.groups[c];
    const Moments mo = GroupMoments(x, group, eps);
    internal::Accumulator dw, db;
    gh.clear();
    for (int64_t i : group) {
      gh.push_back(grad_y.data[i] * ParamOr(weight, c, 1.0));
      dw.Add(grad_y.data[i] * (x.data[i] - mo.mean) * mo.rstd);
      db.Add(grad_y.data[i]);
    }
    NormalizedBackward(x, group, mo, gh, &g.dx);
    g.dweight.data[c] = dw.Value();
    g.dbias.data[c] = db.Value();
  }
  return g;
}

Array rotary_embedding_grad(const Array& x, const Array& positions, const Array& grad_y, double base) {
  rotary_embedding(x, positions, base);  // validates
  CheckArray(grad_y, "rotary_embedding_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == x.shape, "rotary_embedding_grad: grad_y {} must have x's shape {}",
                ShapeString(grad_y.shape), ShapeString(x.shape));
  return rotary_embedding(grad_y, neg(positions), base);
}

}  // namespace oar::reference
