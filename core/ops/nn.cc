// Neural-network and indexing ops: thin wrappers over the kDirect primitives, and every composite op
// decomposed into primitives (their gradients flow through the primitives' VJPs, so they need none).
#include "core/ops/nn.h"

#include <fmt/ranges.h>

#include <array>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/ops/ops.h"
#include "core/ops/vjp.h"
#include "core/tensor/autograd_meta.h"

namespace oar {
namespace {

using ops::Op;
using Ints = std::vector<int64_t>;

Tensor Run1(Op op, std::span<const Tensor> inputs, ops::AttrValues attrs) { return ops::Run(op, inputs, std::move(attrs))[0]; }
Tensor Scalar(const Tensor& like, double v) { return full({}, v, like.dtype(), like.device()); }
int Axis(int64_t axis, int rank, const char* what) { return NormalizeAxis(axis, rank, what); }
Ints I2(std::array<int64_t, 2> v) { return {v[0], v[1]}; }

}  // namespace

// ---- convolution and pooling ---------------------------------------------------------------------------

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  const Tensor in[] = {x, w};
  Tensor y = Run1(Op::kConv2d, in, {I2(stride), I2(padding), I2(dilation), groups});
  if (!bias.defined()) return y;
  OAR_CHECK_ARG(bias.rank() == 1 && bias.dim(0) == w.dim(0), "conv2d: bias has shape {}, expected [{}]",
                bias.shape().ToString(), w.dim(0));
  return y + bias.view({1, -1, 1, 1});
}

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation) {
  return ops::Run(Op::kMaxPool2d, {&x, 1}, {I2(kernel), I2(stride), I2(padding), I2(dilation)})[0];
}

Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, bool count_include_pad) {
  return Run1(Op::kAvgPool2d, {&x, 1}, {I2(kernel), I2(stride), I2(padding), count_include_pad});
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  return Run1(Op::kAdaptiveAvgPool2d, {&x, 1}, {I2(output_size)});
}

// ---- normalisation ---------------------------------------------------------------------------------------

Tensor layer_norm(const Tensor& x, int normalized_ndim, const Tensor& weight, const Tensor& bias, double eps) {
  OAR_CHECK_ARG(normalized_ndim >= 1 && normalized_ndim <= x.rank(),
                "layer_norm: cannot normalise the last {} dims of a tensor of shape {}", normalized_ndim,
                x.shape().ToString());
  const int axis = x.rank() - normalized_ndim;
  const Dims shape(std::span<const int64_t>(x.shape().data() + axis, static_cast<size_t>(normalized_ndim)));
  const Tensor w = weight.defined() ? weight : ones(shape, x.dtype(), x.device());
  const Tensor b = bias.defined() ? bias : zeros(shape, x.dtype(), x.device());
  const Tensor in[] = {x, w, b};
  return ops::Run(Op::kLayerNorm, in, {int64_t{axis}, eps})[0];
}

Tensor rms_norm(const Tensor& x, int normalized_ndim, const Tensor& weight, double eps) {
  Ints axes;
  for (int d = x.rank() - normalized_ndim; d < x.rank(); ++d) axes.push_back(d);
  const Tensor y = x * rsqrt(mean(x * x, axes, true) + eps);
  return weight.defined() ? y * weight : y;
}

namespace {

// Whether batch_norm's training forward runs as batch_norm_train: with weight and bias (without them the
// composed ops' y differs from the op's in a zero's sign, y + 0), contiguous operands of one dtype the op
// takes, and its kernel on x's device (the simulators and the GPU plugins run the composed ops).
bool FusedBatchNormOn(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!weight.defined() || !bias.defined() || (x.rank() != 2 && x.rank() != 4)) return false;
  for (const Tensor* v : {&weight, &bias}) {
    if (v->rank() != 1 || v->dim(0) != x.dim(1) || v->dtype() != x.dtype() || !v->is_contiguous() ||
        v->device() != x.device()) {
      return false;
    }
  }
  const int32_t t = static_cast<int32_t>(x.dtype());
  const int32_t key[] = {t, t, t, t, t, t};
  return x.is_contiguous() && ops::Schema(Op::kBatchNormTrain).Accepts(x.dtype()) &&
         ops::vjp::KernelOn(Op::kBatchNormTrain, x.device(), key);
}

}  // namespace

std::vector<Tensor> batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const Tensor in[] = {x, weight, bias};
  return ops::Run(Op::kBatchNormTrain, in, {eps});
}
std::vector<Tensor> batch_norm_train_grad(const Tensor& grad, const Tensor& x, const Tensor& weight, double eps) {
  const Tensor in[] = {grad, x, weight};
  return ops::Run(Op::kBatchNormTrainGrad, in, {eps});
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  OAR_CHECK_ARG(x.rank() == 2 || x.rank() == 4, "batch_norm: expected [N, C] or [N, C, H, W], got {}",
                x.shape().ToString());
  const Ints axes = x.rank() == 4 ? Ints{0, 2, 3} : Ints{0};
  Dims stat = Dims::Filled(x.rank(), 1);
  stat[1] = x.dim(1);
  Tensor d, v, fused_y;
  if (training) {
    Tensor m;
    if (FusedBatchNormOn(x, weight, bias)) {  // the same values in one pass for y (and two for the statistics)
      std::vector<Tensor> out = batch_norm_train(x, weight, bias, eps);
      fused_y = out[0];
      m = out[1];
      v = out[2];
    } else {
      m = mean(x, axes, true);
      d = x - m;
      v = mean(d * d, axes, true);
    }
    if (running_mean.defined()) {
      NoGradGuard no_grad;
      const double n = static_cast<double>(x.numel() / x.dim(1));
      const Tensor unbiased = v.detach() * (n / std::max(1.0, n - 1));
      Tensor rm = running_mean;
      Tensor rv = running_var;
      rm.copy_(running_mean * (1 - momentum) + m.detach().reshape(running_mean.shape()) * momentum);
      rv.copy_(running_var * (1 - momentum) + unbiased.reshape(running_var.shape()) * momentum);
    }
    if (fused_y.defined()) return fused_y;
  } else {
    OAR_CHECK_ARG(running_mean.defined() && running_var.defined(), "batch_norm: inference needs running statistics");
    d = x - running_mean.reshape(stat);
    v = running_var.reshape(stat);
  }
  // The per-channel factors are combined first: one full-size multiply (and one in the backward pass)
  // instead of two, and x - mean is computed once.
  Tensor scale = rsqrt(v + eps);
  if (weight.defined()) scale = scale * weight.reshape(stat);
  const Tensor y = d * scale;
  return bias.defined() ? y + bias.reshape(stat) : y;
}

// ---- activations -----------------------------------------------------------------------------------------

Tensor gelu(const Tensor& x, bool approximate_tanh) {
  if (approximate_tanh) {
    const double c = std::sqrt(2.0 / std::numbers::pi);
    return x * 0.5 * (1.0 + tanh((x + x * x * x * 0.044715) * c));
  }
  return x * 0.5 * (1.0 + erf(x * (1.0 / std::numbers::sqrt2)));
}
Tensor silu(const Tensor& x) { return x * sigmoid(x); }
Tensor leaky_relu(const Tensor& x, double slope) { return where(gt(x, 0.0), x, x * slope); }
Tensor clip(const Tensor& x, double lo, double hi) {
  OAR_CHECK_ARG(lo <= hi, "clip: lower bound {} is above upper bound {}", lo, hi);
  // Selects, not minimum(maximum(...)): an element exactly at a bound keeps all of its gradient (as
  // torch.clamp), where maximum/minimum would split the tie; NaN stays NaN.
  const Tensor l = Scalar(x, lo), h = Scalar(x, hi);
  return where(lt(x, l), l, where(gt(x, h), h, x));
}

// ---- reductions ------------------------------------------------------------------------------------------

Tensor var(const Tensor& x, std::vector<int64_t> axes, int64_t correction, bool keepdim) {
  const std::vector<int64_t> norm = ops::NormalizeAxes(axes, x.rank(), "var");
  int64_t n = 1;
  for (int64_t a : norm) n *= x.dim(a);
  OAR_CHECK_ARG(n - correction > 0, "var: {} elements with correction {} leave no degrees of freedom", n, correction);
  const Tensor d = x - mean(x, norm, true);
  return sum(d * d, norm, keepdim) / static_cast<double>(n - correction);
}
Tensor stddev(const Tensor& x, std::vector<int64_t> axes, int64_t correction, bool keepdim) {
  // Where the variance is 0 the gradient is 0 (as torch), not sqrt's 1 / (2 * 0) times a zero: a
  // constant row must not turn a whole model's gradients into NaN. The double select keeps the unused
  // branch finite, so no inf * 0 reaches the gradient.
  const Tensor v = var(x, std::move(axes), correction, keepdim);
  const Tensor zero = eq(v, zeros_like(v));  // NaN is not 0: it stays NaN
  return where(zero, zeros_like(v), sqrt(where(zero, ones_like(v), v)));
}
Tensor logsumexp(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  const std::vector<int64_t> norm = ops::NormalizeAxes(axes, x.rank(), "logsumexp");
  // Shift by the (constant) maximum so exp never overflows; an all -inf row keeps a shift of 0.
  Tensor m = amax(x, norm, true).detach();
  m = where(isinf(m), zeros_like(m), m);
  Tensor r = log(sum(exp(x - m), norm, true)) + m;
  if (!keepdim) {
    for (auto it = norm.rbegin(); it != norm.rend(); ++it) r = r.squeeze(*it);
  }
  return r;
}

// ---- linear, losses, embedding, dropout ------------------------------------------------------------------

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const Tensor y = matmul(x, w.transpose(-1, -2));
  return bias.defined() ? y + bias : y;
}

Tensor relu_grad(const Tensor& grad, const Tensor& x) { return Run1(Op::kReluGrad, std::vector<Tensor>{grad, x}, {}); }

Tensor fused_linear(const Tensor& x, const Tensor& w, const Tensor& bias, FusedActivation activation) {
  return Run1(Op::kFusedLinear, std::vector<Tensor>{x, w, bias}, {static_cast<int64_t>(activation)});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index) {
  OAR_CHECK_ARG(log_probs.rank() == 2 && target.rank() == 1 && target.dim(0) == log_probs.dim(0),
                "nll_loss: expected log_probs [N, C] and target [N], got {} and {}", log_probs.shape().ToString(),
                target.shape().ToString());
  OAR_CHECK_ARG(target.dtype() == DType::kInt64, "nll_loss: target must be int64, got {}", DTypeName(target.dtype()));
  const Tensor keep = ne(target, full({}, static_cast<double>(ignore_index), DType::kInt64, target.device()));
  const Tensor safe = where(keep, target, zeros_like(target));
  const Tensor picked = gather(log_probs, 1, safe.unsqueeze(1)).squeeze(1);
  const Tensor w = cast(keep, log_probs.dtype());
  return neg(sum(picked * w)) / maximum(sum(w), Scalar(w, 1));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing) {
  OAR_CHECK_ARG(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing {} is outside [0, 1]",
                label_smoothing);
  const Tensor logp = log_softmax(logits, 1);
  if (label_smoothing == 0) return nll_loss(logp, target, ignore_index);
  const Tensor keep = ne(target, full({}, static_cast<double>(ignore_index), DType::kInt64, target.device()));
  const Tensor safe = where(keep, target, zeros_like(target));
  const Tensor w = cast(keep, logits.dtype());
  const Tensor nll = neg(gather(logp, 1, safe.unsqueeze(1)).squeeze(1));
  const Tensor smooth = neg(mean(logp, {1}));
  const Tensor per = nll * (1 - label_smoothing) + smooth * label_smoothing;
  return sum(per * w) / maximum(sum(w), Scalar(w, 1));
}

Tensor mse_loss(const Tensor& a, const Tensor& b) {
  const Tensor d = a - b;
  return mean(d * d);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  OAR_CHECK_ARG(weight.rank() == 2, "embedding: weight must be [num_embeddings, dim], got {}", weight.shape().ToString());
  Dims out = indices.shape();
  out.push_back(weight.dim(1));
  return index_select(weight, 0, indices.reshape({-1})).reshape(out);
}

Tensor dropout(const Tensor& x, double p, Generator& gen, bool training) {
  OAR_CHECK_ARG(p >= 0 && p < 1, "dropout: p={} is outside [0, 1)", p);
  if (!training || p == 0) return x;
  const Tensor keep = ge(rand(x.shape(), gen, 0, 1, x.dtype(), x.device()), Scalar(x, p));
  return x * cast(keep, x.dtype()) * (1.0 / (1.0 - p));
}

// ---- attention pieces ------------------------------------------------------------------------------------

Tensor rotary_embedding(const Tensor& x, int64_t position_offset, double base) {
  const int64_t t = x.dim(-2), d = x.dim(-1);
  OAR_CHECK_ARG(d % 2 == 0, "rotary_embedding: the last dimension must be even, got {}", d);
  std::vector<double> c(static_cast<size_t>(t * d / 2)), s(c.size());
  for (int64_t p = 0; p < t; ++p) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = static_cast<double>(p + position_offset) * std::pow(base, -2.0 * i / static_cast<double>(d));
      c[p * (d / 2) + i] = std::cos(angle);
      s[p * (d / 2) + i] = std::sin(angle);
    }
  }
  // The tables are rounded to x's dtype on the host, then copied: a device without float64 (kunlun_sim,
  // ascend_sim) must not need a float64 cast, which strict mode (certification) forbids falling back for.
  const Device host("cpu");
  const Tensor cs = cast(FromVector<double>(c, {t, d / 2}, host), x.dtype()).to(x.device());
  const Tensor sn = cast(FromVector<double>(s, {t, d / 2}, host), x.dtype()).to(x.device());
  const Tensor x1 = x.slice(-1, 0, d / 2), x2 = x.slice(-1, d / 2, d);
  const Tensor parts[] = {x1 * cs - x2 * sn, x2 * cs + x1 * sn};
  return concat(parts, -1);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& mask) {
  const int64_t tq = q.dim(-2), tk = k.dim(-2);
  Tensor scores = matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(q.dim(-1))));
  if (causal) {
    // Query i (the last tq of tk positions) may see keys j <= i + (tk - tq).
    const Tensor qi = arange(0, static_cast<double>(tq), 1, DType::kInt64, q.device()).unsqueeze(1);
    const Tensor kj = arange(0, static_cast<double>(tk), 1, DType::kInt64, q.device()).unsqueeze(0);
    const Tensor allowed = le(kj, qi + static_cast<double>(tk - tq));
    scores = where(allowed, scores, Scalar(scores, -std::numeric_limits<double>::infinity()));
  }
  if (mask.defined()) scores = scores + mask;
  return matmul(softmax(scores, -1), v);
}

// ---- shape and indexing ----------------------------------------------------------------------------------

Tensor concat(std::span<const Tensor> tensors, int64_t axis) {
  OAR_CHECK_ARG(!tensors.empty(), "concat: no tensors");
  const int a = Axis(axis, tensors[0].rank(), "concat");
  if (tensors.size() <= 15) return Run1(Op::kConcat, tensors, {int64_t{a}});
  std::vector<Tensor> parts;  // more than one kernel call can take: join in groups of 15
  for (size_t i = 0; i < tensors.size(); i += 15) {
    parts.push_back(concat(tensors.subspan(i, std::min<size_t>(15, tensors.size() - i)), a));
  }
  return concat(parts, a);
}
Tensor stack(std::span<const Tensor> tensors, int64_t axis) {
  OAR_CHECK_ARG(!tensors.empty(), "stack: no tensors");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(axis));
  return concat(parts, axis);
}
std::vector<Tensor> split(const Tensor& x, std::span<const int64_t> sizes, int64_t axis) {
  const int a = Axis(axis, x.rank(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    OAR_CHECK_ARG(s >= 0, "split: negative size {}", s);
    total += s;
  }
  OAR_CHECK_ARG(total == x.dim(a), "split: sizes add up to {} but axis {} has extent {}", total, a, x.dim(a));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.slice(a, start, start + s));
    start += s;
  }
  return out;
}
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis) {
  OAR_CHECK_ARG(chunks > 0, "chunk: chunks must be positive, got {}", chunks);
  const int a = Axis(axis, x.rank(), "chunk");
  const int64_t step = (x.dim(a) + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < x.dim(a); start += step) sizes.push_back(std::min(step, x.dim(a) - start));
  return split(x, sizes, a);
}
Tensor flatten(const Tensor& x, int64_t start, int64_t end) {
  if (x.rank() == 0) return x.reshape({1});
  const int s = Axis(start, x.rank(), "flatten"), e = Axis(end, x.rank(), "flatten");
  OAR_CHECK_ARG(s <= e, "flatten: start {} is after end {}", s, e);
  Dims shape;
  for (int d = 0; d < s; ++d) shape.push_back(x.dim(d));
  int64_t n = 1;
  for (int d = s; d <= e; ++d) n *= x.dim(d);
  shape.push_back(n);
  for (int d = e + 1; d < x.rank(); ++d) shape.push_back(x.dim(d));
  return x.reshape(shape);
}
namespace {
// gather and index_select with Python-style negative indices (as ONNX Gather): -1 is the last element.
// The kernels take [0, extent) only (docs/ops.md), so negative indices are wrapped here first; one still
// out of range after that is the kernel's OUT_OF_RANGE, told in terms of the user's range.
Tensor GatherLike(Op op, const char* name, const Tensor& x, int64_t axis, const Tensor& index) {
  const int a = Axis(axis, x.rank(), name);
  OAR_CHECK_ARG(index.dtype() == DType::kInt64, "{}: the index must be int64, got {}", name, DTypeName(index.dtype()));
  const int64_t extent = x.rank() == 0 ? 1 : x.dim(a);
  // Only indices in [-extent, 0) are wrapped: one below keeps its value, so the kernel's message (which
  // may arrive asynchronously, past the catch below) names the index the user wrote. le rather than
  // lt/ge: the comparisons a device without int64 arithmetic falls back for stay the ones the label
  // masks of cross-entropy already need.
  const Tensor negative = logical_and(le(index, full({}, -1, DType::kInt64, index.device())),
                                      le(full({}, static_cast<double>(-extent), DType::kInt64, index.device()), index));
  const Tensor wrapped = where(negative, index + static_cast<double>(extent), index);
  const Tensor in[] = {x, wrapped};
  try {
    return Run1(op, in, {int64_t{a}});
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kOutOfRange) throw;
    Throw(ErrorCode::kOutOfRange,
          "{} (negative indices count from the end: the valid range of the index as given is [{}, {}))", e.what(),
          -extent, extent);
  }
}
}  // namespace

Tensor gather(const Tensor& x, int64_t axis, const Tensor& index) {
  return GatherLike(Op::kGather, "gather", x, axis, index);
}
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  return GatherLike(Op::kIndexSelect, "index_select", x, axis, index);
}
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  const Tensor in[] = {x, index, src};
  return Run1(Op::kScatterAdd, in, {int64_t{Axis(axis, x.rank(), "scatter_add")}});
}
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis, bool largest) {
  std::vector<Tensor> r = ops::Run(Op::kTopk, {&x, 1}, {k, int64_t{Axis(axis, x.rank(), "topk")}, largest});
  return {r[0], r[1]};
}
Tensor pad(const Tensor& x, std::span<const int64_t> pads, double value) {
  return Run1(Op::kPad, {&x, 1}, {Ints(pads.begin(), pads.end()), value});
}
Tensor one_hot(const Tensor& x, int64_t classes) {
  OAR_CHECK_ARG(x.dtype() == DType::kInt64, "one_hot: indices must be int64, got {}", DTypeName(x.dtype()));
  OAR_CHECK_ARG(classes > 0, "one_hot: classes must be positive, got {}", classes);
  // An index outside [0, classes) would give a silent all-zero row: refuse it, naming the first one
  // (this reads the indices on the host; label tensors are small).
  const std::vector<int64_t> values = x.ToVector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] >= 0 && values[i] < classes) continue;
    std::vector<int64_t> at(static_cast<size_t>(x.rank()));
    int64_t rest = static_cast<int64_t>(i);
    for (int d = x.rank() - 1; d >= 0; --d) {
      at[static_cast<size_t>(d)] = rest % x.dim(d);
      rest /= x.dim(d);
    }
    Throw(ErrorCode::kOutOfRange, "one_hot: index {} at position [{}] is out of range for {} classes (valid: [0, {}))",
          values[i], fmt::join(at, ", "), classes, classes);
  }
  const Tensor range = arange(0, static_cast<double>(classes), 1, DType::kInt64, x.device());
  return cast(eq(x.unsqueeze(-1), range), DType::kInt64);
}
namespace {
Tensor TriMask(const Tensor& x, int64_t k, bool lower) {
  OAR_CHECK_ARG(x.rank() >= 2, "{}: needs at least 2 dimensions, got {}", lower ? "tril" : "triu", x.shape().ToString());
  const Tensor r = arange(0, static_cast<double>(x.dim(-2)), 1, DType::kInt64, x.device()).unsqueeze(1);
  const Tensor c = arange(0, static_cast<double>(x.dim(-1)), 1, DType::kInt64, x.device()).unsqueeze(0);
  const Tensor diag = r + static_cast<double>(k);
  return where(lower ? le(c, diag) : ge(c, diag), x, zeros_like(x));
}
}  // namespace
Tensor tril(const Tensor& x, int64_t k) { return TriMask(x, k, true); }
Tensor triu(const Tensor& x, int64_t k) { return TriMask(x, k, false); }
Tensor zeros_like(const Tensor& x) { return zeros(x.shape(), x.dtype(), x.device()); }
Tensor ones_like(const Tensor& x) { return ones(x.shape(), x.dtype(), x.device()); }
Tensor full_like(const Tensor& x, double value) { return full(x.shape(), value, x.dtype(), x.device()); }

}  // namespace oar
