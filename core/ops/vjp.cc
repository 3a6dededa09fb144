// VJP rules (vjp.h) that the schema records bind: the gradient of every differentiable op but the unary
// elementwise ones (whose one-line rules are in their records, schema.cc), written with eager ops so that
// each rule is itself differentiable (grad of grad needs nothing more). Rules use the op's inputs, never its outputs: saving
// outputs would tie a tensor to the node that produced it and leak the graph.
#include <algorithm>
#include <cmath>

#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/ops/vjp.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/runtime.h"
#include "core/tensor/autograd_meta.h"

namespace oar::ops::vjp {

using Grads = std::vector<Tensor>;

const Tensor& G(const VjpArgs& a) { return a.grads[0]; }
const Tensor& In(const VjpArgs& a, int i) { return a.inputs[i]; }
Tensor Like(const Tensor& t, double v) { return full({}, v, t.dtype(), t.device()); }
// Zeros of `shape` in `like`'s dtype and device as a broadcast view of one element: what scatter_add
// starts from, filled as it is packed into the output instead of written and read back in full.
Tensor ZerosView(const Dims& shape, const Tensor& like) { return Like(like, 0).expand(shape); }
// A float tensor 1.0 where `mask`, else 0.0, in `like`'s dtype.
Tensor Mask(const Tensor& mask, const Tensor& like) { return cast(mask, like.dtype()); }
int64_t IntAttr(const VjpArgs& a, int i) { return std::get<int64_t>(a.attrs[i]); }
const std::vector<int64_t>& IntsAttr(const VjpArgs& a, int i) { return std::get<std::vector<int64_t>>(a.attrs[i]); }

// ---- binary ----------------------------------------------------------------------------------------------
Grads Add(const VjpArgs& a) { return {SumTo(G(a), In(a, 0).shape()), SumTo(G(a), In(a, 1).shape())}; }
Grads Sub(const VjpArgs& a) { return {SumTo(G(a), In(a, 0).shape()), SumTo(neg(G(a)), In(a, 1).shape())}; }
Grads Mul(const VjpArgs& a) {
  const Tensor &x = In(a, 0), &y = In(a, 1);
  if (x.impl() == y.impl()) {  // x * x (batch_norm's and rms_norm's squares): both gradients are G * x, computed once
    const Tensor g = SumTo(G(a) * x, x.shape());
    return {g, g};
  }
  return {SumTo(G(a) * y, x.shape()), SumTo(G(a) * x, y.shape())};
}
Grads Div(const VjpArgs& a) {
  const Tensor& x = In(a, 0);
  const Tensor& y = In(a, 1);
  return {SumTo(G(a) / y, x.shape()), SumTo(neg(G(a)) * x / (y * y), y.shape())};
}
Grads Pow(const VjpArgs& a) {
  const Tensor& x = In(a, 0);
  const Tensor& y = In(a, 1);
  // d/dx x^y = y x^(y-1), which is 0 where y == 0 (x^0 is constant; at x == 0 the formula would give
  // 0 * inf); d/dy x^y = x^y log x (taken as 0 where x == 0, the limit for y > 0).
  const Tensor gx = where(eq(y, Like(y, 0)), Like(x, 0), G(a) * y * pow(x, y - 1.0));
  const Tensor safe_log = log(where(eq(x, Like(x, 0)), Like(x, 1), x));
  const Tensor gy = G(a) * pow(x, y) * safe_log;
  return {SumTo(gx, x.shape()), SumTo(gy, y.shape())};
}
// The larger operand gets the gradient; ties split it evenly (as torch does).
Grads MaxMin(const VjpArgs& a, bool is_max) {
  const Tensor& x = In(a, 0);
  const Tensor& y = In(a, 1);
  const Tensor wins = Mask(is_max ? gt(x, y) : lt(x, y), x);
  const Tensor ties = Mask(eq(x, y), x) * 0.5;
  const Tensor wx = wins + ties;
  const Tensor wy = Mask(is_max ? lt(x, y) : gt(x, y), x) + ties;
  return {SumTo(G(a) * wx, x.shape()), SumTo(G(a) * wy, y.shape())};
}
Grads Maximum(const VjpArgs& a) { return MaxMin(a, true); }
Grads Minimum(const VjpArgs& a) { return MaxMin(a, false); }
Grads Where(const VjpArgs& a) {
  const Tensor& cond = In(a, 0);
  const Tensor zero = Like(G(a), 0);
  return {Tensor(), SumTo(where(cond, G(a), zero), In(a, 1).shape()), SumTo(where(cond, zero, G(a)), In(a, 2).shape())};
}

// ---- matmul --------------------------------------------------------------------------------------------
Grads Matmul(const VjpArgs& a) {
  Tensor x = In(a, 0), y = In(a, 1), g = G(a);
  const bool x_vec = x.rank() == 1, y_vec = y.rank() == 1;
  // Give g the promoted shape [..., M, N]: a vector operand's dropped dimension comes back as extent 1
  // (a dot product's 0-d gradient becomes [1, 1]).
  if (x_vec && y_vec) {
    g = g.reshape({1, 1});
  } else if (x_vec) {
    g = g.unsqueeze(-2);
  } else if (y_vec) {
    g = g.unsqueeze(-1);
  }
  if (x_vec) x = x.unsqueeze(0);
  if (y_vec) y = y.unsqueeze(-1);
  Tensor gx = matmul(g, y.transpose(-1, -2));
  Tensor gy = matmul(x.transpose(-1, -2), g);
  gx = SumTo(gx, x.shape());
  gy = SumTo(gy, y.shape());
  if (x_vec) gx = gx.squeeze(0);
  if (y_vec) gy = gy.squeeze(-1);
  return {gx, gy};
}

// ---- reductions ----------------------------------------------------------------------------------------
// Bring a reduced gradient back to the input's shape (broadcast over the reduced axes).
Tensor Unreduce(const Tensor& g, const Tensor& x, const std::vector<int64_t>& axes_attr, bool keepdim) {
  const std::vector<int64_t> axes = NormalizeAxes(axes_attr, x.rank(), "reduction VJP");
  Tensor r = g;
  if (!keepdim) {
    for (int64_t ax : axes) r = r.unsqueeze(ax);
  }
  return r.expand(x.shape());
}
Grads Sum(const VjpArgs& a) {
  return {Unreduce(G(a), In(a, 0), IntsAttr(a, 0), std::get<bool>(a.attrs[1]))};
}
Grads Mean(const VjpArgs& a) {
  const Tensor& x = In(a, 0);
  const std::vector<int64_t> axes = NormalizeAxes(IntsAttr(a, 0), x.rank(), "mean VJP");
  int64_t n = 1;
  for (int64_t ax : axes) n *= x.shape()[static_cast<int>(ax)];
  // Divide the reduced gradient, then broadcast it (a view): not a full-size division.
  return {Unreduce(G(a) / static_cast<double>(std::max<int64_t>(n, 1)), x, IntsAttr(a, 0), std::get<bool>(a.attrs[1]))};
}
// amax/amin: the gradient is shared evenly among the elements equal to the extremum.
Grads Extremum(const VjpArgs& a, bool is_max) {
  const Tensor& x = In(a, 0);
  const std::vector<int64_t>& axes = IntsAttr(a, 0);
  const Tensor m = is_max ? amax(x, axes, true) : amin(x, axes, true);
  const Tensor hit = Mask(eq(x, m), x);
  const Tensor count = sum(hit, axes, true);
  return {Unreduce(G(a), x, axes, std::get<bool>(a.attrs[1])) * hit / count};
}
Grads Max(const VjpArgs& a) { return Extremum(a, true); }
Grads Min(const VjpArgs& a) { return Extremum(a, false); }
// The product of the factors before (prefix) or after (suffix) each position along the last axis,
// excluding the position itself: a Hillis-Steele scan of log2(n) shifted multiplies, written with eager
// ops (slice, pad, mul) so that it is differentiable too.
Tensor ExclusiveProducts(const Tensor& x, bool prefix) {
  const int last = x.rank() - 1;
  const int64_t n = x.dim(last);
  std::vector<int64_t> pads(static_cast<size_t>(2 * x.rank()), 0);
  auto shift = [&](const Tensor& t, int64_t s) {  // t moved s places along the last axis, filled with 1
    pads[2 * last] = prefix ? s : 0;
    pads[2 * last + 1] = prefix ? 0 : s;
    return pad(prefix ? t.slice(last, 0, n - s) : t.slice(last, s, n), pads, 1.0);
  };
  Tensor r = shift(x, 1);
  for (int64_t s = 1; s < n; s *= 2) r = r * shift(r, s);
  return r;
}
Grads Prod(const VjpArgs& a) {
  // d prod / d x_i is the product of the other factors: exclusive prefix times exclusive suffix
  // products over the reduced elements, so that zeros (one or several) give the exact gradient rather
  // than the 0/0 of prod / x_i.
  const Tensor& x = In(a, 0);
  const std::vector<int64_t> axes = NormalizeAxes(IntsAttr(a, 0), x.rank(), "prod VJP");
  const Tensor g = Unreduce(G(a), x, IntsAttr(a, 0), std::get<bool>(a.attrs[1]));
  if (axes.empty() || x.numel() == 0) return {g};  // a scalar's product is itself; empty: nothing to do
  // Move the reduced axes last and flatten them into one.
  std::vector<int64_t> order, inverse(static_cast<size_t>(x.rank()));
  Dims kept;
  for (int d = 0; d < x.rank(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
      order.push_back(d);
      kept.push_back(x.dim(d));
    }
  }
  order.insert(order.end(), axes.begin(), axes.end());
  for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  Dims flat = kept;
  flat.push_back(-1);
  const Tensor rows = x.permute(order).reshape(flat);
  const Tensor others = ExclusiveProducts(rows, true) * ExclusiveProducts(rows, false);
  Dims permuted = kept;
  for (int64_t ax : axes) permuted.push_back(x.dim(ax));
  return {g * others.reshape(permuted).permute(inverse)};
}

// ---- softmax ---------------------------------------------------------------------------------------------
Grads Softmax(const VjpArgs& a) {
  const int64_t axis = IntAttr(a, 0);
  const Tensor y = softmax(In(a, 0), axis);
  return {y * (G(a) - sum(G(a) * y, {axis}, true))};
}
Grads LogSoftmax(const VjpArgs& a) {
  const int64_t axis = IntAttr(a, 0);
  const Tensor p = softmax(In(a, 0), axis);
  return {G(a) - p * sum(G(a), {axis}, true)};
}

Grads Cast(const VjpArgs& a) {
  if (!IsFloating(In(a, 0).dtype()) || !IsFloating(G(a).dtype())) return {Tensor()};
  return {cast(G(a), In(a, 0).dtype())};
}

// ---- views -----------------------------------------------------------------------------------------------
Grads View(const VjpArgs& a) { return {G(a).reshape(In(a, 0).shape())}; }
Grads Permute(const VjpArgs& a) {
  const std::vector<int64_t>& dims = IntsAttr(a, 0);
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
  return {G(a).permute(inverse)};
}
Grads Slice(const VjpArgs& a) {
  return {SliceScatter(G(a), In(a, 0).shape(), IntAttr(a, 0), IntAttr(a, 1), IntAttr(a, 2), IntAttr(a, 3))};
}
Grads Expand(const VjpArgs& a) { return {SumTo(G(a), In(a, 0).shape())}; }
Grads Squeeze(const VjpArgs& a) { return {G(a).reshape(In(a, 0).shape())}; }
Grads Identity(const VjpArgs& a) { return {G(a)}; }
Grads SliceScatterVjp(const VjpArgs& a) {
  return {G(a).slice(IntAttr(a, 1), IntAttr(a, 2), IntAttr(a, 3), IntAttr(a, 4))};
}

// ---- convolution, pooling, normalisation ----------------------------------------------------------------
std::vector<int64_t> ShapeVec(const Tensor& t) { return std::vector<int64_t>(t.shape().begin(), t.shape().end()); }
// conv2d's attributes (stride, padding, dilation, groups) plus one shape attribute.
AttrValues ConvAttrs(const VjpArgs& a, const Tensor& shape_of) {
  return {a.attrs[0], a.attrs[1], a.attrs[2], a.attrs[3], ShapeVec(shape_of)};
}
AttrValues ConvAttrsOnly(const VjpArgs& a) { return {a.attrs[0], a.attrs[1], a.attrs[2], a.attrs[3]}; }
Tensor RunOp(Op op, std::initializer_list<Tensor> in, AttrValues attrs) {
  return Run(op, std::span<const Tensor>(in.begin(), in.size()), std::move(attrs))[0];
}
Grads Conv2d(const VjpArgs& a) {
  const Tensor &x = In(a, 0), &w = In(a, 1);
  return {RunOp(Op::kConv2dGradInput, {G(a), w}, ConvAttrs(a, x)), RunOp(Op::kConv2dGradWeight, {G(a), x}, ConvAttrs(a, w))};
}
// grad_x = convᵀ(g, w) is linear in g and in w: <gg, convᵀ(g, w)> = <conv(gg, w), g>.
Grads Conv2dGradInput(const VjpArgs& a) {
  const Tensor &g = In(a, 0), &w = In(a, 1);
  return {RunOp(Op::kConv2d, {G(a), w}, ConvAttrsOnly(a)), RunOp(Op::kConv2dGradWeight, {g, G(a)}, ConvAttrs(a, w))};
}
// grad_w = conv_w(g, x): <gg, conv_w(g, x)> = <conv(x, gg), g>.
Grads Conv2dGradWeight(const VjpArgs& a) {
  const Tensor &g = In(a, 0), &x = In(a, 1);
  return {RunOp(Op::kConv2d, {x, G(a)}, ConvAttrsOnly(a)), RunOp(Op::kConv2dGradInput, {g, G(a)}, ConvAttrs(a, x))};
}
Grads MaxPool2d(const VjpArgs& a) {
  const Tensor& x = In(a, 0);
  Tensor indices;
  {
    NoGradGuard no_grad;  // recompute the argmax positions (outputs are never saved)
    indices = Run(Op::kMaxPool2d, {&x, 1}, {a.attrs[0], a.attrs[1], a.attrs[2], a.attrs[3]})[1];
  }
  const int64_t n = x.dim(0), c = x.dim(1);
  const Tensor flat = ZerosView({n, c, x.dim(2) * x.dim(3)}, x);
  return {scatter_add(flat, 2, indices.reshape({n, c, -1}), G(a).reshape({n, c, -1})).reshape(x.shape())};
}
Grads AvgPool2d(const VjpArgs& a) {
  return {RunOp(Op::kAvgPool2dGrad, {G(a)}, {a.attrs[0], a.attrs[1], a.attrs[2], a.attrs[3], ShapeVec(In(a, 0))})};
}
Grads AvgPool2dGrad(const VjpArgs& a) {
  return {RunOp(Op::kAvgPool2d, {G(a)}, {a.attrs[0], a.attrs[1], a.attrs[2], a.attrs[3]})};
}
Grads AdaptiveAvgPool2d(const VjpArgs& a) {
  return {RunOp(Op::kAdaptiveAvgPool2dGrad, {G(a)}, {a.attrs[0], ShapeVec(In(a, 0))})};
}
Grads AdaptiveAvgPool2dGrad(const VjpArgs& a) { return {RunOp(Op::kAdaptiveAvgPool2d, {G(a)}, {a.attrs[0]})}; }
Grads LayerNorm(const VjpArgs& a) {
  const Tensor &x = In(a, 0), &w = In(a, 1);
  const int64_t axis = IntAttr(a, 0);
  const double eps = std::get<double>(a.attrs[1]);
  std::vector<int64_t> norm, batch;
  for (int d = 0; d < x.rank(); ++d) (d >= axis ? norm : batch).push_back(d);
  // Recompute the statistics with differentiable ops so that this rule has a gradient too.
  const Tensor mu = mean(x, norm, true);
  const Tensor xc = x - mu;
  const Tensor rstd = rsqrt(mean(xc * xc, norm, true) + eps);
  const Tensor xhat = xc * rstd;
  const Tensor& dy = G(a);
  const Tensor dxhat = dy * w;
  const Tensor dx = rstd * (dxhat - mean(dxhat, norm, true) - xhat * mean(dxhat * xhat, norm, true));
  const Tensor dw = batch.empty() ? dy * xhat : sum(dy * xhat, batch);
  const Tensor db = batch.empty() ? dy : sum(dy, batch);
  return {dx, dw, db};
}

// ---- indexing ----------------------------------------------------------------------------------------------
Grads Concat(const VjpArgs& a) {
  const int64_t axis = IntAttr(a, 0);
  Grads out;
  int64_t start = 0;
  for (const Tensor& t : a.inputs) {
    out.push_back(G(a).slice(axis, start, start + t.dim(axis)));
    start += t.dim(axis);
  }
  return out;
}
Grads Gather(const VjpArgs& a) {
  const Tensor& x = In(a, 0);
  return {scatter_add(ZerosView(x.shape(), G(a)), IntAttr(a, 0), In(a, 1), G(a)), Tensor()};
}
Grads IndexSelect(const VjpArgs& a) {
  const Tensor& x = In(a, 0);
  const int64_t axis = IntAttr(a, 0);
  Dims view = Dims::Filled(x.rank(), 1);
  view[static_cast<int>(axis)] = -1;
  const Tensor index = In(a, 1).reshape(view).expand(G(a).shape());
  return {scatter_add(ZerosView(x.shape(), G(a)), axis, index, G(a)), Tensor()};
}
Grads ScatterAdd(const VjpArgs& a) { return {G(a), Tensor(), gather(G(a), IntAttr(a, 0), In(a, 1))}; }
Grads Topk(const VjpArgs& a) {
  const Tensor& x = In(a, 0);
  Tensor indices;
  {
    NoGradGuard no_grad;
    indices = Run(Op::kTopk, {&x, 1}, {a.attrs[0], a.attrs[1], a.attrs[2]})[1];
  }
  return {scatter_add(ZerosView(x.shape(), G(a)), IntAttr(a, 1), indices, G(a))};
}
Grads Pad(const VjpArgs& a) {
  const std::vector<int64_t>& pads = IntsAttr(a, 0);
  Tensor g = G(a);
  for (int d = 0; d < In(a, 0).rank(); ++d) g = g.slice(d, pads[2 * d], pads[2 * d] + In(a, 0).dim(d));
  return {g};
}

// ---- fused ops -----------------------------------------------------------------------------------------------
// relu_grad(G, x) is G * Mask(gt(x, 0), x) in one kernel, bit for bit. Where x's device has no relu_grad
// kernel for the dtype (it would fall back to the cpu), and for a gradient of another shape or dtype than x
// (none reaches a unary op's rule from the engine), the composed form runs: the same values.
bool KernelOn(Op op, Device device, std::span<const int32_t> key) {
  return runtime::Runtime::Get().Context(device).plugin().kernels().Find(Schema(op).kernel_id, key, OAR_FORMAT_PLAIN) !=
         nullptr;
}
Tensor ReluGradOf(const Tensor& g, const Tensor& x) {
  const int32_t t = static_cast<int32_t>(x.dtype());
  const int32_t key[] = {t, t, t};
  if (g.dtype() == x.dtype() && g.shape() == x.shape() && Schema(Op::kReluGrad).Accepts(x.dtype()) &&
      KernelOn(Op::kReluGrad, x.device(), key)) {
    return relu_grad(g, x);
  }
  return g * Mask(gt(x, 0.0), x);
}
Grads Relu(const VjpArgs& a) { return {ReluGradOf(G(a), In(a, 0))}; }
// Linear in grad with the same mask; x gets no gradient (the mask is piecewise constant), as through gt.
Grads ReluGrad(const VjpArgs& a) { return {ReluGradOf(G(a), In(a, 1)), Tensor()}; }

// fused_linear: z = x @ w + bias is recomputed (with fused_linear itself, activation none, so the rule stays
// differentiable), dz = g * act'(z), then the linear's gradients: dx = dz wᵀ, dw = xᵀ dz over the rows of every
// leading dim, dbias = dz summed over them.
// batch_norm_train's VJP: the chain of VJPs the composed ops of nn.cc's batch_norm record, in the order the
// engine runs them and adds their contributions (y = d * scale + bias, d = x - m, scale = rsqrt(v + eps) *
// weight, v = mean(d * d), m = mean(x)):
//   bias: SumTo(G); scale: SumTo(G * d); weight: scale's gradient * rsqrt(v + eps); v: rsqrt's rule on
//   scale's gradient * weight, then / n (mean's); d: (G * scale + q) + q with q = (v's gradient) * d, the two
//   gradients of d * d; m: SumTo(-(d's gradient)) / n; x: d's gradient + m's (broadcast).
// batch_norm_train_grad computes exactly this in one kernel; it runs when the chain is not itself recorded
// (no create_graph) and the device has the kernel, the composed ops otherwise: the same values.
Grads BatchNormTrainComposed(const Tensor& g, const Tensor& x, const Tensor& weight, double eps) {
  const std::vector<int64_t> axes = x.rank() == 4 ? std::vector<int64_t>{0, 2, 3} : std::vector<int64_t>{0};
  Dims stat = Dims::Filled(x.rank(), 1);
  stat[1] = x.dim(1);
  int64_t count = 1;
  for (int64_t ax : axes) count *= x.dim(static_cast<int>(ax));
  const double n = static_cast<double>(std::max<int64_t>(count, 1));  // as mean's VJP divides
  const Tensor m = mean(x, axes, true);
  const Tensor d = x - m;
  const Tensor t = mean(d * d, axes, true) + eps;
  const Tensor r = rsqrt(t);
  const Tensor wr = weight.reshape(stat);
  const Tensor grad_bias = SumTo(g, stat).reshape(weight.shape());
  const Tensor grad_scale = SumTo(g * d, stat);
  const Tensor grad_weight = SumTo(grad_scale * r, stat).reshape(weight.shape());
  const Tensor grad_t = grad_scale * wr * rsqrt(t) / t * -0.5;
  const Tensor q = (grad_t / n).expand(x.shape()) * d;
  const Tensor grad_d = g * (r * wr) + q + q;
  const Tensor grad_m = SumTo(neg(grad_d), stat);
  return {grad_d + (grad_m / n).expand(x.shape()), grad_weight, grad_bias};
}
Grads BatchNormTrain(const VjpArgs& a) {
  const Tensor &g = G(a), &x = In(a, 0), &w = In(a, 1);
  const double eps = std::get<double>(a.attrs[0]);
  const int32_t t = static_cast<int32_t>(x.dtype());
  const int32_t key[] = {t, t, t, t, t, t};
  if (!GradModeEnabled() && g.dtype() == x.dtype() && g.shape() == x.shape() && g.is_contiguous() &&
      x.is_contiguous() && w.is_contiguous() && KernelOn(Op::kBatchNormTrainGrad, x.device(), key)) {
    return batch_norm_train_grad(g, x, w, eps);
  }
  return BatchNormTrainComposed(g, x, w, eps);
}

Grads FusedLinear(const VjpArgs& a) {
  const Tensor &x = In(a, 0), &w = In(a, 1), &b = In(a, 2);
  const int64_t act = IntAttr(a, 0);
  Tensor dz = G(a);
  if (act != 0) {
    const Tensor z = fused_linear(x, w, b, FusedActivation::kNone);
    if (act == 1) {
      dz = ReluGradOf(dz, z);
    } else if (act == 2) {  // d/dz z Φ(z) = Φ(z) + z φ(z)
      const Tensor cdf = (erf(z * (1.0 / std::sqrt(2.0))) + 1.0) * 0.5;
      const Tensor pdf = exp(square(z) * -0.5) * (1.0 / std::sqrt(2.0 * M_PI));
      dz = dz * (cdf + z * pdf);
    } else {
      dz = dz * (1.0 - square(tanh(z)));
    }
  }
  const int64_t k = w.dim(0), n = w.dim(1);
  const Tensor dx = matmul(dz, w.transpose(0, 1));
  const Tensor dw = matmul(x.reshape({-1, k}).transpose(0, 1), dz.reshape({-1, n}));
  return {dx, dw, SumTo(dz, b.shape())};
}

}  // namespace oar::ops::vjp
