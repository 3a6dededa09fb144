// The decompositions of composite ops (decompose.h) and the eager emitter that runs them.
//
// 16-bit floats are computed in float32 and rounded once at the end, as the kernels do (their statistics
// and sums are float32 or wider), so a decomposed program matches the kernel within the output dtype's
// rounding rather than accumulating 16-bit error through every step.
#include "core/ops/decompose.h"

#include <numbers>

#include "core/base/error.h"
#include "core/ops/ops.h"

namespace oar::ops {
namespace {

using Value = Emitter::Value;
using Values = std::vector<Value>;

// A value with the emitter it belongs to, so that rules read as arithmetic.
struct V {
  Emitter* e;
  Value id;
  TensorMeta meta() const { return e->Meta(id); }
  DType dtype() const { return meta().dtype; }
  int rank() const { return meta().shape.size(); }
};

V Emit1(Op op, std::initializer_list<V> in, AttrValues attrs) {
  Values ids;
  for (const V& v : in) ids.push_back(v.id);
  Emitter* e = in.begin()->e;
  return {e, e->Emit(op, ids, std::move(attrs))[0]};
}
V operator+(V a, V b) { return Emit1(Op::kAdd, {a, b}, {}); }
V operator-(V a, V b) { return Emit1(Op::kSub, {a, b}, {}); }
V operator*(V a, V b) { return Emit1(Op::kMul, {a, b}, {}); }
V operator/(V a, V b) { return Emit1(Op::kDiv, {a, b}, {}); }
V operator+(V a, double c) { return a + V{a.e, a.e->Constant(c, a.dtype())}; }
V operator*(V a, double c) { return a * V{a.e, a.e->Constant(c, a.dtype())}; }
V Exp(V x) { return Emit1(Op::kExp, {x}, {}); }
V Log(V x) { return Emit1(Op::kLog, {x}, {}); }
V Rsqrt(V x) { return Emit1(Op::kRsqrt, {x}, {}); }
V Cast(V x, DType t) { return x.dtype() == t ? x : Emit1(Op::kCast, {x}, {int64_t{static_cast<int>(t)}}); }
V Reduce(Op op, V x, std::vector<int64_t> axes, bool keepdim) { return Emit1(op, {x}, {std::move(axes), keepdim}); }

bool IsHalf(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }
// The dtype the computation runs in: float32 for the 16-bit floats.
DType ComputeType(DType t) { return IsHalf(t) ? DType::kFloat32 : t; }

// exp(x - max) / sum(exp(x - max)) (softmax) or (x - max) - log(sum(exp(x - max))) (log_softmax) along
// `axis`. The maximum is subtracted first so that no exponential overflows; a row of -inf (or with a
// NaN) gives NaN, as the kernels do.
Values Softmax(Emitter& e, std::span<const Value> in, const AttrValues& attrs, bool log) {
  const V x{&e, in[0]};
  const int64_t axis = std::get<int64_t>(attrs[0]);
  const V xs = Cast(x, ComputeType(x.dtype()));
  const V shifted = xs - Reduce(Op::kMax, xs, {axis}, true);
  const V ex = Exp(shifted);
  const V y = log ? shifted - Log(Reduce(Op::kSum, ex, {axis}, true)) : ex / Reduce(Op::kSum, ex, {axis}, true);
  return {Cast(y, x.dtype()).id};
}

}  // namespace

Values DecomposeSoftmax(Emitter& e, std::span<const Value> in, const AttrValues& attrs) {
  return Softmax(e, in, attrs, false);
}
Values DecomposeLogSoftmax(Emitter& e, std::span<const Value> in, const AttrValues& attrs) {
  return Softmax(e, in, attrs, true);
}

// y = (x - mean) * rsqrt(var + eps) * weight + bias over the trailing dims from `axis` (population
// variance, as the kernel), with the statistics (mean, rstd) as the kernel's second and third outputs:
// keepdim shape, float32 for 16-bit inputs.
Values DecomposeLayerNorm(Emitter& e, std::span<const Value> in, const AttrValues& attrs) {
  const V x{&e, in[0]}, w{&e, in[1]}, b{&e, in[2]};
  const int64_t axis = std::get<int64_t>(attrs[0]);
  const double eps = std::get<double>(attrs[1]);
  std::vector<int64_t> norm;
  for (int64_t d = axis; d < x.rank(); ++d) norm.push_back(d);
  const DType ct = ComputeType(x.dtype());
  const V xs = Cast(x, ct);
  const V mu = Reduce(Op::kMean, xs, norm, true);
  const V xc = xs - mu;
  const V rstd = Rsqrt(Reduce(Op::kMean, xc * xc, norm, true) + eps);
  const V y = xc * rstd * Cast(w, ct) + Cast(b, ct);
  return {Cast(y, x.dtype()).id, mu.id, rstd.id};
}

// act(matmul(x, w) + bias): the ops fuse-linear replaced, so a device without a fused_linear kernel runs the
// primitives it had before (gelu as nn.h's gelu: x * 0.5 * (1 + erf(x / sqrt(2)))).
Values DecomposeFusedLinear(Emitter& e, std::span<const Value> in, const AttrValues& attrs) {
  const V x{&e, in[0]}, w{&e, in[1]}, b{&e, in[2]};
  const V z = Emit1(Op::kMatmul, {x, w}, {}) + b;
  switch (std::get<int64_t>(attrs[0])) {
    case 1: return {Emit1(Op::kRelu, {z}, {}).id};
    case 2: return {(z * 0.5 * (Emit1(Op::kErf, {z * (1.0 / std::numbers::sqrt2)}, {}) + 1.0)).id};
    case 3: return {Emit1(Op::kTanh, {z}, {}).id};
    default: return {z.id};
  }
}

// grad * cast(gt(x, 0), dtype): the composed rule relu's VJP ran before relu_grad had a kernel (the same ops,
// so CINN fuses what it fused then).
Values DecomposeReluGrad(Emitter& e, std::span<const Value> in, const AttrValues&) {
  const V g{&e, in[0]}, x{&e, in[1]};
  const V positive = Emit1(Op::kGt, {x, V{&e, e.Constant(0.0, x.dtype())}}, {});
  return {(g * Cast(positive, x.dtype())).id};
}

namespace {

V Neg(V x) { return Emit1(Op::kNeg, {x}, {}); }
V View(V x, std::vector<int64_t> shape) { return Emit1(Op::kView, {x}, {std::move(shape)}); }
V Div(V a, double c) { return a / V{a.e, a.e->Constant(c, a.dtype())}; }

// batch_norm's shapes: the statistics' axes (every dim but 1), the axes SumTo(t, [1, C(, 1, 1)]) sums over
// (those of extent other than 1), the statistics' shape as a view's ([1, -1(, 1, 1)]) and their count n.
// Empty axes when an extent is symbolic (n unknown): the rules decline.
struct BatchNormShape {
  std::vector<int64_t> axes, sum_axes, stat;
  int64_t count = 1;
  explicit BatchNormShape(const Dims& x) {
    for (int d = 0; d < x.size(); ++d) {
      stat.push_back(d == 1 ? -1 : 1);
      if (d == 1) continue;
      if (x[d] < 0) {
        axes.clear();
        return;
      }
      axes.push_back(d);
      if (x[d] != 1) sum_axes.push_back(d);
      count *= x[d];
    }
  }
  V SumTo(V t) const { return sum_axes.empty() ? t : Reduce(Op::kSum, t, sum_axes, true); }
  double n() const { return static_cast<double>(std::max<int64_t>(count, 1)); }
};

}  // namespace

// The composed ops of nn.cc's batch_norm in training with weight and bias: mean = mean(x), d = x - mean,
// var = mean(d * d), y = (d * (rsqrt(var + eps) * weight)) + bias.
Values DecomposeBatchNormTrain(Emitter& e, std::span<const Value> in, const AttrValues& attrs) {
  const V x{&e, in[0]}, w{&e, in[1]}, b{&e, in[2]};
  const BatchNormShape s(x.meta().shape);
  if (s.axes.empty()) return {};
  const double eps = std::get<double>(attrs[0]);
  const V m = Reduce(Op::kMean, x, s.axes, true);
  const V d = x - m;
  const V v = Reduce(Op::kMean, d * d, s.axes, true);
  const V y = d * (Rsqrt(v + eps) * View(w, s.stat)) + View(b, s.stat);
  return {y.id, m.id, v.id};
}

// The VJP chain of those ops, as vjp.cc's BatchNormTrainComposed runs it.
Values DecomposeBatchNormTrainGrad(Emitter& e, std::span<const Value> in, const AttrValues& attrs) {
  const V g{&e, in[0]}, x{&e, in[1]}, w{&e, in[2]};
  const BatchNormShape s(x.meta().shape);
  if (s.axes.empty()) return {};
  const double eps = std::get<double>(attrs[0]);
  const V m = Reduce(Op::kMean, x, s.axes, true);
  const V d = x - m;
  const V t = Reduce(Op::kMean, d * d, s.axes, true) + eps;
  const V r = Rsqrt(t);
  const V wr = View(w, s.stat);
  const V grad_bias = View(s.SumTo(g), {-1});
  const V grad_scale = s.SumTo(g * d);
  const V grad_weight = View(grad_scale * r, {-1});
  const V grad_t = grad_scale * wr * Rsqrt(t) / t * -0.5;
  const V q = Div(grad_t, s.n()) * d;
  const V grad_d = g * (r * wr) + q + q;
  const V grad_x = grad_d + Div(s.SumTo(Neg(grad_d)), s.n());
  return {grad_x.id, grad_weight.id, grad_bias.id};
}

namespace {

// Eager: values are tensors, ops run through ops::Run.
class EagerEmitter : public Emitter {
 public:
  explicit EagerEmitter(Device device) : device_(device) {}
  Value Add(Tensor t) {
    values_.push_back(std::move(t));
    return static_cast<Value>(values_.size() - 1);
  }
  const Tensor& Get(Value v) const { return values_.at(static_cast<size_t>(v)); }

  std::vector<Value> Emit(Op op, std::span<const Value> inputs, AttrValues attrs) override {
    std::vector<Tensor> in;
    for (Value v : inputs) in.push_back(Get(v));
    // A view is no kernel: the tensor's own view (batch_norm's rules give weight the statistics' shape).
    if (op == Op::kView) return {Add(in.at(0).view(Dims(std::get<std::vector<int64_t>>(attrs.at(0)))))};
    std::vector<Value> out;
    for (Tensor& t : Run(op, in, std::move(attrs))) out.push_back(Add(std::move(t)));
    return out;
  }
  Value Constant(double value, DType dtype) override { return Add(full({}, value, dtype, device_)); }
  TensorMeta Meta(Value v) const override { return {Get(v).dtype(), Get(v).shape()}; }

 private:
  Device device_;
  std::vector<Tensor> values_;
};

}  // namespace

std::vector<Tensor> RunDecomposition(Op op, std::span<const Tensor> inputs, AttrValues attrs) {
  const OpSchema& s = Schema(op);
  OAR_CHECK_ARG(s.decompose != nullptr, "{}: has no decomposition (it is a primitive)", s.name);
  OAR_CHECK_ARG(inputs.size() == s.inputs.size() && !inputs.empty(), "{}: expected {} inputs, got {}", s.name,
                s.inputs.size(), inputs.size());
  OAR_CHECK_ARG(attrs.size() <= s.attrs.size(), "{}: expected at most {} attributes, got {}", s.name, s.attrs.size(),
                attrs.size());
  for (size_t i = attrs.size(); i < s.attrs.size(); ++i) attrs.push_back(s.attrs[i].default_value);
  for (size_t i = 0; i < s.attrs.size(); ++i) {
    OAR_CHECK_ARG(attrs[i].index() == s.attrs[i].default_value.index(), "{}: attribute '{}' has the wrong type", s.name,
                  s.attrs[i].name);
  }
  std::vector<TensorMeta> metas;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OAR_CHECK_ARG(inputs[i].defined(), "{}: argument '{}' is an undefined tensor", s.name, s.InputName(i));
    metas.push_back({inputs[i].dtype(), inputs[i].shape()});
  }
  s.Infer(metas, attrs);  // the op's own checks and messages
  EagerEmitter e(inputs[0].device());
  std::vector<Value> in;
  for (const Tensor& t : inputs) in.push_back(e.Add(t));
  const std::vector<Value> out = s.decompose(e, in, attrs);
  OAR_CHECK_ARG(!out.empty(), "{}: the decomposition does not apply to these inputs", s.name);
  std::vector<Tensor> results;
  for (Value v : out) results.push_back(e.Get(v));
  return results;
}

}  // namespace oar::ops
