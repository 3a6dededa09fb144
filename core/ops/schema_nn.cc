// Schemas of the neural-network and indexing primitives: convolution (and its two gradients), pooling,
// layer_norm, concat, gather, index_select, scatter_add, topk, pad. Kernel contracts:
// docs/ops-library-plan.md.
#include <algorithm>
#include <array>

#include "core/base/error.h"
#include "core/ops/decompose.h"
#include "core/ops/schema.h"
#include "core/ops/vjp.h"
#include "core/runtime/kernel_registry.h"

namespace oar::ops {
namespace {

constexpr uint32_t Bit(DType t) { return 1u << static_cast<int>(t); }
constexpr uint32_t kFloating = Bit(DType::kFloat32) | Bit(DType::kFloat64) | Bit(DType::kFloat16) | Bit(DType::kBFloat16);
constexpr uint32_t kNumeric = kFloating | Bit(DType::kInt8) | Bit(DType::kUInt8) | Bit(DType::kInt32) | Bit(DType::kInt64);
constexpr uint32_t kAll = kNumeric | Bit(DType::kBool);

using Metas = std::vector<TensorMeta>;
const std::vector<int64_t>& Ints(const OpSchema& s, const AttrValues& a, std::string_view name) {
  return std::get<std::vector<int64_t>>(a[s.AttrIndex(name)]);
}
int64_t Int(const OpSchema& s, const AttrValues& a, std::string_view name) { return std::get<int64_t>(a[s.AttrIndex(name)]); }

void CheckFloating(const OpSchema& s, int i, DType t) {
  OAR_CHECK_ARG(s.Accepts(t), "{}: argument '{}' has dtype {}; expected one of {}", s.name, s.inputs[i], DTypeName(t),
                DTypeMaskString(s.dtypes));
}
void CheckRank(const OpSchema& s, int i, const TensorMeta& m, int rank, const char* layout) {
  OAR_CHECK_ARG(m.shape.size() == rank, "{}: argument '{}' must be {}-D ({}), got shape {}", s.name, s.inputs[i], rank,
                layout, m.shape.ToString());
}
void CheckSameDType(const OpSchema& s, std::span<const TensorMeta> in, int a, int b) {
  OAR_CHECK_ARG(in[a].dtype == in[b].dtype, "{}: arguments '{}' ({}) and '{}' ({}) have different dtypes", s.name,
                s.inputs[a], DTypeName(in[a].dtype), s.inputs[b], DTypeName(in[b].dtype));
}
// Two positive (or non-negative) integers.
std::array<int64_t, 2> Pair(const OpSchema& s, const AttrValues& a, std::string_view name, int64_t min) {
  const auto& v = Ints(s, a, name);
  OAR_CHECK_ARG(v.size() == 2 && v[0] >= min && v[1] >= min, "{}: attribute '{}' must be two integers >= {}, got [{}]",
                s.name, name, min, fmt::join(v, ", "));
  return {v[0], v[1]};
}
int64_t WindowOut(const OpSchema& s, int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, const char* dim) {
  const int64_t span = dil * (k - 1) + 1;
  const int64_t out = (in + 2 * pad - span) / stride + 1;
  OAR_CHECK_ARG(in + 2 * pad >= span && out > 0,
                "{}: the {} extent {} (padding {}) is smaller than the window {} (kernel {}, dilation {})", s.name,
                dim, in, pad, span, k, dil);
  return out;
}

// Pooling: every window must hold at least one input position (padding may exceed half the kernel,
// as ONNX allows, but a window of only padding has nothing to pool: docs/ops.md).
int64_t PoolWindowOut(const OpSchema& s, int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil,
                      const char* dim) {
  const int64_t out = WindowOut(s, in, k, stride, pad, dil, dim);
  for (int64_t o = 0; o < out; ++o) {
    bool inside = false;
    for (int64_t t = 0; t < k && !inside; ++t) {
      const int64_t at = o * stride - pad + t * dil;
      inside = at >= 0 && at < in;
    }
    OAR_CHECK_ARG(inside,
                  "{}: the window of output {} {} covers only padding ({} extent {}, kernel {}, stride {}, padding "
                  "{}, dilation {}); nothing to pool: reduce the padding",
                  s.name, dim, o, dim, in, k, stride, pad, dil);
  }
  return out;
}

Metas InferConv(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckFloating(s, 0, in[0].dtype);
  CheckSameDType(s, in, 0, 1);
  CheckRank(s, 0, in[0], 4, "N, C, H, W");
  CheckRank(s, 1, in[1], 4, "O, C/groups, kH, kW");
  const auto stride = Pair(s, a, "stride", 1), pad = Pair(s, a, "padding", 0), dil = Pair(s, a, "dilation", 1);
  const int64_t groups = Int(s, a, "groups");
  const Dims& x = in[0].shape;
  const Dims& w = in[1].shape;
  OAR_CHECK_ARG(groups >= 1 && x[1] % groups == 0 && w[0] % groups == 0 && w[1] * groups == x[1],
                "conv2d: input has {} channels and weight {} expects {} input channels per group with groups={}; "
                "need C == weight.shape[1] * groups and O divisible by groups",
                x[1], w.ToString(), w[1], groups);
  return {{in[0].dtype,
           {x[0], w[0], WindowOut(s, x[2], w[2], stride[0], pad[0], dil[0], "height"),
            WindowOut(s, x[3], w[3], stride[1], pad[1], dil[1], "width")}}};
}
Metas InferConvGradInput(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckFloating(s, 0, in[0].dtype);
  CheckSameDType(s, in, 0, 1);
  return {{in[0].dtype, Dims(Ints(s, a, "input_shape"))}};
}
Metas InferConvGradWeight(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckFloating(s, 0, in[0].dtype);
  CheckSameDType(s, in, 0, 1);
  return {{in[0].dtype, Dims(Ints(s, a, "weight_shape"))}};
}
Metas InferMaxPool(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckFloating(s, 0, in[0].dtype);
  CheckRank(s, 0, in[0], 4, "N, C, H, W");
  const auto k = Pair(s, a, "kernel", 1), stride = Pair(s, a, "stride", 1), pad = Pair(s, a, "padding", 0),
             dil = Pair(s, a, "dilation", 1);
  const Dims& x = in[0].shape;
  Dims out{x[0], x[1], PoolWindowOut(s, x[2], k[0], stride[0], pad[0], dil[0], "height"),
           PoolWindowOut(s, x[3], k[1], stride[1], pad[1], dil[1], "width")};
  return {{in[0].dtype, out}, {DType::kInt64, out}};
}
Metas InferAvgPool(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckFloating(s, 0, in[0].dtype);
  CheckRank(s, 0, in[0], 4, "N, C, H, W");
  const auto k = Pair(s, a, "kernel", 1), stride = Pair(s, a, "stride", 1), pad = Pair(s, a, "padding", 0);
  const Dims& x = in[0].shape;
  return {{in[0].dtype,
           {x[0], x[1], PoolWindowOut(s, x[2], k[0], stride[0], pad[0], 1, "height"),
            PoolWindowOut(s, x[3], k[1], stride[1], pad[1], 1, "width")}}};
}
Metas InferPoolGrad(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckFloating(s, 0, in[0].dtype);
  return {{in[0].dtype, Dims(Ints(s, a, "input_shape"))}};
}
Metas InferAdaptive(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckFloating(s, 0, in[0].dtype);
  CheckRank(s, 0, in[0], 4, "N, C, H, W");
  const auto o = Pair(s, a, "output_size", 1);
  return {{in[0].dtype, {in[0].shape[0], in[0].shape[1], o[0], o[1]}}};
}
Metas InferLayerNorm(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckFloating(s, 0, in[0].dtype);
  const int rank = in[0].shape.size();
  const int64_t axis = Int(s, a, "axis");
  OAR_CHECK_ARG(axis >= 0 && axis < rank, "layer_norm: axis {} is out of range for shape {}", axis, in[0].shape.ToString());
  const Dims normalized(std::span<const int64_t>(in[0].shape.data() + axis, static_cast<size_t>(rank - axis)));
  for (int i = 1; i <= 2; ++i) {
    CheckSameDType(s, in, 0, i);
    OAR_CHECK_ARG(in[i].shape == normalized, "layer_norm: '{}' has shape {} but the normalised shape is {}", s.inputs[i],
                  in[i].shape.ToString(), normalized.ToString());
  }
  Dims stat = in[0].shape;
  for (int d = static_cast<int>(axis); d < rank; ++d) stat[d] = 1;
  const DType sd = (in[0].dtype == DType::kFloat16 || in[0].dtype == DType::kBFloat16) ? DType::kFloat32 : in[0].dtype;
  return {in[0], {sd, stat}, {sd, stat}};
}
Metas InferConcat(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  OAR_CHECK_ARG(!in.empty() && in.size() <= 15, "concat: expected 1 to 15 tensors per kernel call, got {}", in.size());
  const int rank = in[0].shape.size();
  const int axis = NormalizeAxis(Int(s, a, "axis"), rank, "concat");
  Dims out = in[0].shape;
  out[axis] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    OAR_CHECK_ARG(in[i].dtype == in[0].dtype, "concat: tensor {} has dtype {}, tensor 0 has {}", i,
                  DTypeName(in[i].dtype), DTypeName(in[0].dtype));
    OAR_CHECK_ARG(in[i].shape.size() == rank, "concat: tensor {} has shape {}, tensor 0 has {}", i,
                  in[i].shape.ToString(), in[0].shape.ToString());
    for (int d = 0; d < rank; ++d) {
      OAR_CHECK_ARG(d == axis || in[i].shape[d] == in[0].shape[d],
                    "concat: tensor {} has shape {} but tensor 0 has {}; only axis {} may differ", i,
                    in[i].shape.ToString(), in[0].shape.ToString(), axis);
    }
    out[axis] += in[i].shape[axis];
  }
  return {{in[0].dtype, out}};
}
void CheckIndex(const OpSchema& s, int i, const TensorMeta& m) {
  OAR_CHECK_ARG(m.dtype == DType::kInt64, "{}: '{}' must be int64, got {}", s.name, s.inputs[i], DTypeName(m.dtype));
}
Metas InferGather(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckIndex(s, 1, in[1]);
  const int rank = in[0].shape.size();
  const int axis = NormalizeAxis(Int(s, a, "axis"), rank, "gather");
  OAR_CHECK_ARG(in[1].shape.size() == rank, "gather: index has shape {} but x has shape {} (ranks must match)",
                in[1].shape.ToString(), in[0].shape.ToString());
  for (int d = 0; d < rank; ++d) {
    OAR_CHECK_ARG(d == axis || in[1].shape[d] <= in[0].shape[d],
                  "gather: index extent {} exceeds x extent {} in dimension {}", in[1].shape[d], in[0].shape[d], d);
  }
  return {{in[0].dtype, in[1].shape}};
}
Metas InferIndexSelect(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckIndex(s, 1, in[1]);
  OAR_CHECK_ARG(in[1].shape.size() == 1, "index_select: index must be 1-D, got shape {}", in[1].shape.ToString());
  const int axis = NormalizeAxis(Int(s, a, "axis"), in[0].shape.size(), "index_select");
  Dims out = in[0].shape;
  out[axis] = in[1].shape[0];
  return {{in[0].dtype, out}};
}
Metas InferScatterAdd(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckIndex(s, 1, in[1]);
  CheckSameDType(s, in, 0, 2);
  CheckFloating(s, 0, in[0].dtype);
  const int rank = in[0].shape.size();
  NormalizeAxis(Int(s, a, "axis"), rank, "scatter_add");
  OAR_CHECK_ARG(in[1].shape == in[2].shape && in[1].shape.size() == rank,
                "scatter_add: index {} and src {} must have the same shape and the rank of x {}", in[1].shape.ToString(),
                in[2].shape.ToString(), in[0].shape.ToString());
  return {in[0]};
}
Metas InferTopk(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  const int rank = in[0].shape.size();
  OAR_CHECK_ARG(rank > 0, "topk: the input must have at least one dimension");
  const int axis = NormalizeAxis(Int(s, a, "axis"), rank, "topk");
  const int64_t k = Int(s, a, "k");
  OAR_CHECK_ARG(k >= 0 && k <= in[0].shape[axis], "topk: k={} but axis {} has extent {}", k, axis, in[0].shape[axis]);
  Dims out = in[0].shape;
  out[axis] = k;
  return {{in[0].dtype, out}, {DType::kInt64, out}};
}
Metas InferPad(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  const auto& pads = Ints(s, a, "pads");
  const int rank = in[0].shape.size();
  OAR_CHECK_ARG(static_cast<int>(pads.size()) == 2 * rank, "pad: expected {} pads (before and after each dim), got {}",
                2 * rank, pads.size());
  Dims out = in[0].shape;
  for (int d = 0; d < rank; ++d) {
    OAR_CHECK_ARG(pads[2 * d] >= 0 && pads[2 * d + 1] >= 0, "pad: negative padding in dimension {}", d);
    out[d] += pads[2 * d] + pads[2 * d + 1];
  }
  return {{in[0].dtype, out}};
}

// fused_linear: x [..., K] (rank >= 2), w [K, N], bias [N] -> [..., N], one floating dtype; activation in
// [0, 3] (FusedActivation). Symbolic extents (negative) pass through; only static ones are compared.
Metas InferFusedLinear(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckFloating(s, 0, in[0].dtype);
  CheckSameDType(s, in, 0, 1);
  CheckSameDType(s, in, 0, 2);
  const Dims& x = in[0].shape;
  const Dims& w = in[1].shape;
  const Dims& b = in[2].shape;
  OAR_CHECK_ARG(x.size() >= 2, "fused_linear: argument 'x' must have rank >= 2 ([..., K]), got shape {}", x.ToString());
  CheckRank(s, 1, in[1], 2, "K, N");
  CheckRank(s, 2, in[2], 1, "N");
  const auto same = [](int64_t p, int64_t q) { return p == q || p < 0 || q < 0; };
  OAR_CHECK_ARG(same(x[x.size() - 1], w[0]), "fused_linear: x {} and w {} do not chain: x has {} columns but w has {} rows",
                x.ToString(), w.ToString(), x[x.size() - 1], w[0]);
  OAR_CHECK_ARG(same(b[0], w[1]), "fused_linear: bias {} must have w's {} columns (w {}): one bias per output column",
                b.ToString(), w[1], w.ToString());
  const int64_t act = Int(s, a, "activation");
  OAR_CHECK_ARG(act >= 0 && act <= 3, "fused_linear: activation {} is not one of 0 (none), 1 (relu), 2 (gelu), 3 (tanh)",
                act);
  Dims out = x;
  out[out.size() - 1] = w[1];
  return {{in[0].dtype, out}};
}

// Input `i` of shape `b` broadcasts against `to` without enlarging it (right-aligned, each extent equal or 1;
// symbolic extents pass).
void CheckBroadcastsAgainst(const OpSchema& s, int i, const Dims& b, const Dims& to, const char* what) {
  bool ok = b.size() <= to.size();
  for (int d = 0; ok && d < b.size(); ++d) {
    const int64_t want = to[to.size() - b.size() + d];
    ok = b[d] == 1 || b[d] == want || b[d] < 0 || want < 0;
  }
  OAR_CHECK_ARG(ok, "{}: argument '{}' of shape {} does not broadcast against {} {}", s.name, s.inputs[i],
                b.ToString(), what, to.ToString());
}

// fused_rotary (and fused_rotary_grad, its first input the gradient): x [..., 2h] (rank >= 1), cos and sin
// broadcasting against [..., h] (right-aligned, each extent equal or 1), one floating dtype -> x's shape.
// Symbolic extents pass.
Metas InferFusedRotary(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckFloating(s, 0, in[0].dtype);
  CheckSameDType(s, in, 0, 1);
  CheckSameDType(s, in, 0, 2);
  const Dims& x = in[0].shape;
  OAR_CHECK_ARG(x.size() >= 1 && (x[x.size() - 1] < 0 || x[x.size() - 1] % 2 == 0),
                "{}: argument '{}' must be [..., 2h] (an even last extent), got shape {}", s.name, s.inputs[0],
                x.ToString());
  Dims half = x;
  if (half[half.size() - 1] > 0) half[half.size() - 1] /= 2;
  for (int i = 1; i <= 2; ++i)
    CheckBroadcastsAgainst(s, i, in[i].shape, half, (std::string(s.inputs[0]) + "'s halves").c_str());
  return {in[0]};
}

// fused_rms_scale: x, then mean_square, eps and weight broadcasting against x (right-aligned, each extent
// equal or 1: they do not enlarge it), one floating dtype -> x's shape.
Metas InferFusedRmsScale(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckFloating(s, 0, in[0].dtype);
  const Dims& x = in[0].shape;
  for (int i = 1; i <= 3; ++i) {
    CheckSameDType(s, in, 0, i);
    CheckBroadcastsAgainst(s, i, in[i].shape, x, "x");
  }
  return {in[0]};
}

// relu_grad: grad and x of one floating dtype and one shape (symbolic extents pass) -> that shape.
Metas InferReluGrad(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckFloating(s, 0, in[0].dtype);
  CheckSameDType(s, in, 0, 1);
  const Dims &g = in[0].shape, &x = in[1].shape;
  bool same = g.size() == x.size();
  for (int d = 0; same && d < g.size(); ++d) same = g[d] == x[d] || g[d] < 0 || x[d] < 0;
  OAR_CHECK_ARG(same, "relu_grad: argument 'grad' has shape {}, expected x's {}", g.ToString(), x.ToString());
  Dims out = g;
  for (int d = 0; d < out.size(); ++d) out[d] = g[d] < 0 ? x[d] : g[d];  // a static extent of either side wins
  return {{in[0].dtype, out}};
}

// batch_norm_train: x [N, C] or [N, C, H, W], weight and bias [C], one dtype -> y (x's shape), mean and var
// (the keepdim statistics shape [1, C] or [1, C, 1, 1]).
Metas InferBatchNormTrain(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckFloating(s, 0, in[0].dtype);
  const Dims& x = in[0].shape;
  OAR_CHECK_ARG(x.size() == 2 || x.size() == 4, "{}: argument 'x' must be [N, C] or [N, C, H, W], got {}", s.name,
                x.ToString());
  static constexpr const char* kNames[] = {"x", "weight", "bias"};
  for (int i = 1; i <= 2; ++i) {
    OAR_CHECK_ARG(in[i].dtype == in[0].dtype, "{}: argument '{}' has dtype {}, x has {}", s.name, kNames[i],
                  DTypeName(in[i].dtype), DTypeName(in[0].dtype));
    const Dims& v = in[i].shape;
    OAR_CHECK_ARG(v.size() == 1 && (v[0] == x[1] || v[0] < 0 || x[1] < 0),
                  "{}: argument '{}' has shape {}, expected [C] with C = {} (x's dim 1)", s.name, kNames[i],
                  v.ToString(), x[1]);
  }
  Dims stat = Dims::Filled(x.size(), 1);
  stat[1] = x[1];
  if (s.op == Op::kBatchNormTrain) return {in[0], {in[0].dtype, stat}, {in[0].dtype, stat}};
  return {in[0], in[2], in[2]};
}

// batch_norm_train_grad: grad and x of one shape, weight [C], one dtype -> grad_x (x's shape), grad_weight and
// grad_bias ([C]).
Metas InferBatchNormTrainGrad(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& a) {
  CheckSameDType(s, in, 0, 1);
  const Dims &g = in[0].shape, &x = in[1].shape;
  bool same = g.size() == x.size();
  for (int d = 0; same && d < g.size(); ++d) same = g[d] == x[d] || g[d] < 0 || x[d] < 0;
  OAR_CHECK_ARG(same, "{}: argument 'grad' has shape {}, expected x's {}", s.name, g.ToString(), x.ToString());
  // x, weight and weight again stand for x, weight and bias: the same checks, and grad_weight and grad_bias
  // take the weight's meta.
  const TensorMeta as_forward[] = {in[1], in[2], in[2]};
  return InferBatchNormTrain(s, as_forward, a);
}

// fused_adam: param, grad, m, v of one shape (symbolic extents pass through) and nine 0-d scalars, all of one
// floating dtype -> the new param, m and v, of the param's type.
Metas InferFusedAdam(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckFloating(s, 0, in[0].dtype);
  const Dims& p = in[0].shape;
  for (int i = 1; i < static_cast<int>(in.size()); ++i) {
    CheckSameDType(s, in, 0, i);
    if (i >= 4) {
      OAR_CHECK_ARG(in[i].shape.size() == 0, "fused_adam: argument '{}' must be a 0-d scalar, got shape {}",
                    s.inputs[i], in[i].shape.ToString());
      continue;
    }
    const Dims& x = in[i].shape;
    bool same = x.size() == p.size();
    for (int d = 0; same && d < p.size(); ++d) same = x[d] == p[d] || x[d] < 0 || p[d] < 0;
    OAR_CHECK_ARG(same, "fused_adam: argument '{}' has shape {}, expected the param's {}", s.inputs[i], x.ToString(),
                  p.ToString());
  }
  return {in[0], in[0], in[0]};
}

// fused_tanh_grad, fused_sigmoid_grad: grad and the forward's result of one shape (symbolic extents pass
// through) and a 0-d scalar, one floating dtype -> grad's type.
Metas InferFusedActGrad(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckFloating(s, 0, in[0].dtype);
  CheckSameDType(s, in, 0, 1);
  CheckSameDType(s, in, 0, 2);
  const Dims& g = in[0].shape;
  const Dims& y = in[1].shape;
  bool same = y.size() == g.size();
  for (int d = 0; same && d < g.size(); ++d) same = y[d] == g[d] || y[d] < 0 || g[d] < 0;
  OAR_CHECK_ARG(same, "{}: argument '{}' has shape {}, expected the gradient's {}", s.name, s.inputs[1], y.ToString(),
                g.ToString());
  OAR_CHECK_ARG(in[2].shape.size() == 0, "{}: argument 'one' must be a 0-d scalar, got shape {}", s.name,
                in[2].shape.ToString());
  return {in[0]};
}

// fused_log_softmax: x of a floating dtype and an axis of it -> two results of x's type.
Metas InferFusedLogSoftmax(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  CheckFloating(s, 0, in[0].dtype);
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  const int64_t axis = Int(s, attrs, "axis");
  OAR_CHECK_ARG(rank == 0 ? (axis == 0 || axis == -1) : (axis >= -rank && axis < rank),
                "{}: axis {} is out of range for x of shape {}", s.name, axis, in[0].shape.ToString());
  return {in[0], in[0]};
}

// fused_masked_softmax: x (rank >= 1, floating), scale and fill 0-d of x's dtype, a bool mask broadcasting
// against x -> x's type. fused_masked_softmax_grad: grad and y of one floating type, a bool mask broadcasting
// against them, zero and scale 0-d of their dtype -> grad's type.
Metas InferFusedMaskedSoftmax(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  const bool grad = s.inputs.size() == 5;
  const int mask = 2;
  CheckFloating(s, 0, in[0].dtype);
  OAR_CHECK_ARG(in[0].shape.size() >= 1,
                "{}: argument '{}' must have rank >= 1 (softmax over its last axis), got "
                "a 0-d tensor",
                s.name, s.inputs[0]);
  const std::vector<int> scalars = grad ? std::vector<int>{3, 4} : std::vector<int>{1, 3};
  if (grad) {
    CheckSameDType(s, in, 0, 1);
    bool same = in[1].shape.size() == in[0].shape.size();
    for (int d = 0; same && d < in[0].shape.size(); ++d) {
      same = in[1].shape[d] == in[0].shape[d] || in[1].shape[d] < 0 || in[0].shape[d] < 0;
    }
    OAR_CHECK_ARG(same, "{}: argument 'y' has shape {}, expected the gradient's {}", s.name, in[1].shape.ToString(),
                  in[0].shape.ToString());
  }
  for (int i : scalars) {
    CheckSameDType(s, in, 0, i);
    OAR_CHECK_ARG(in[i].shape.size() == 0, "{}: argument '{}' must be a 0-d scalar, got shape {}", s.name, s.inputs[i],
                  in[i].shape.ToString());
  }
  OAR_CHECK_ARG(in[mask].dtype == DType::kBool, "{}: argument 'mask' must be bool, got {}", s.name,
                DTypeName(in[mask].dtype));
  CheckBroadcastsAgainst(s, mask, in[mask].shape, in[0].shape, s.inputs[0] == "x" ? "x" : "grad");
  return {in[0]};
}

AttrSpec Ints2(std::string_view name, int64_t v) { return {name, OAR_ATTR_INTS, std::vector<int64_t>{v, v}, ""}; }
AttrSpec IntsEmpty(std::string_view name) { return {name, OAR_ATTR_INTS, std::vector<int64_t>{}, ""}; }
AttrSpec IntA(std::string_view name, int64_t v) { return {name, OAR_ATTR_INT, v, ""}; }

}  // namespace

void AppendNnSchemas(std::vector<OpSchema>& t) {
  auto direct = [&](Op op, std::string_view name, std::vector<std::string_view> in, std::vector<std::string_view> out,
                    std::vector<AttrSpec> attrs, uint32_t dtypes, auto infer, std::string_view doc, VjpFn vjp) {
    OpSchema s{op, name, OpKind::kDirect, std::move(in), std::move(out), std::move(attrs), dtypes, doc, 0, vjp};
    s.infer = infer;
    t.push_back(std::move(s));
  };
  const std::vector<AttrSpec> conv = {Ints2("stride", 1), Ints2("padding", 0), Ints2("dilation", 1), IntA("groups", 1)};
  auto with = [](std::vector<AttrSpec> base, AttrSpec extra) {
    base.push_back(std::move(extra));
    return base;
  };
  direct(Op::kConv2d, "conv2d", {"x", "w"}, {"out"}, conv, kFloating, InferConv, "2-D convolution (NCHW, no bias)",
         vjp::Conv2d);
  direct(Op::kConv2dGradInput, "conv2d_grad_input", {"grad_out", "w"}, {"grad_x"}, with(conv, IntsEmpty("input_shape")),
         kFloating, InferConvGradInput, "gradient of conv2d with respect to its input", vjp::Conv2dGradInput);
  direct(Op::kConv2dGradWeight, "conv2d_grad_weight", {"grad_out", "x"}, {"grad_w"},
         with(conv, IntsEmpty("weight_shape")), kFloating, InferConvGradWeight,
         "gradient of conv2d with respect to its weight", vjp::Conv2dGradWeight);
  direct(Op::kMaxPool2d, "max_pool2d", {"x"}, {"y", "indices"},
         {Ints2("kernel", 2), Ints2("stride", 2), Ints2("padding", 0), Ints2("dilation", 1)}, kFloating, InferMaxPool,
         "max pooling with the flat index of each maximum", vjp::MaxPool2d);
  const std::vector<AttrSpec> avg = {Ints2("kernel", 2), Ints2("stride", 2), Ints2("padding", 0),
                                     {"count_include_pad", OAR_ATTR_BOOL, true, ""}};
  direct(Op::kAvgPool2d, "avg_pool2d", {"x"}, {"y"}, avg, kFloating, InferAvgPool, "average pooling", vjp::AvgPool2d);
  direct(Op::kAvgPool2dGrad, "avg_pool2d_grad", {"grad_y"}, {"grad_x"}, with(avg, IntsEmpty("input_shape")), kFloating,
         InferPoolGrad, "gradient of avg_pool2d", vjp::AvgPool2dGrad);
  direct(Op::kAdaptiveAvgPool2d, "adaptive_avg_pool2d", {"x"}, {"y"}, {Ints2("output_size", 1)}, kFloating,
         InferAdaptive, "average pooling to a fixed output size", vjp::AdaptiveAvgPool2d);
  direct(Op::kAdaptiveAvgPool2dGrad, "adaptive_avg_pool2d_grad", {"grad_y"}, {"grad_x"},
         {Ints2("output_size", 1), IntsEmpty("input_shape")}, kFloating, InferPoolGrad,
         "gradient of adaptive_avg_pool2d", vjp::AdaptiveAvgPool2dGrad);
  direct(Op::kLayerNorm, "layer_norm", {"x", "weight", "bias"}, {"y", "mean", "rstd"},
         {IntA("axis", 1), {"eps", OAR_ATTR_FLOAT, 1e-5, ""}}, kFloating, InferLayerNorm,
         "normalise over the trailing dims from axis, then scale and shift", vjp::LayerNorm);
  t.back().decompose = DecomposeLayerNorm;
  direct(Op::kConcat, "concat", {"tensors"}, {"out"}, {IntA("axis", 0)}, kAll, InferConcat,
         "join tensors along an axis", vjp::Concat);
  t.back().variadic = true;
  direct(Op::kGather, "gather", {"x", "index"}, {"out"}, {IntA("axis", 0)}, kAll, InferGather,
         "out[..i..] = x[..index[..i..]..] along axis", vjp::Gather);
  direct(Op::kIndexSelect, "index_select", {"x", "index"}, {"out"}, {IntA("axis", 0)}, kAll, InferIndexSelect,
         "the entries of x at a 1-D list of indices along axis", vjp::IndexSelect);
  direct(Op::kScatterAdd, "scatter_add", {"x", "index", "src"}, {"out"}, {IntA("axis", 0)}, kFloating, InferScatterAdd,
         "x with src added at index along axis (deterministic order)", vjp::ScatterAdd);
  direct(Op::kTopk, "topk", {"x"}, {"values", "indices"},
         {IntA("k", 1), IntA("axis", -1), {"largest", OAR_ATTR_BOOL, true, ""}}, kNumeric, InferTopk,
         "the k largest (or smallest) values along an axis, sorted, with their indices", vjp::Topk);
  direct(Op::kPad, "pad", {"x"}, {"out"}, {IntsEmpty("pads"), {"value", OAR_ATTR_FLOAT, 0.0, ""}}, kAll, InferPad,
         "constant padding before and after each dimension", vjp::Pad);
  direct(Op::kFusedLinear, "fused_linear", {"x", "w", "bias"}, {"out"},
         {{"activation", OAR_ATTR_INT, int64_t{0}, "0 none, 1 relu, 2 gelu (erf), 3 tanh"}},
         Bit(DType::kFloat32) | Bit(DType::kFloat64), InferFusedLinear,
         "act(x @ w + bias): x [..., K], w [K, N], bias [N]; activation 0 none, 1 relu, 2 gelu (erf), 3 tanh",
         vjp::FusedLinear);
  t.back().decompose = DecomposeFusedLinear;
  // fused_rotary and fused_rms_scale: inference only (the Predictor's fuse-rotary and fuse-rms-scale, which it
  // leaves out when CINN fuses the same chains itself): no VJP, no decomposition.
  direct(Op::kFusedRotary, "fused_rotary", {"x", "cos", "sin"}, {"out"}, {},
         Bit(DType::kFloat32) | Bit(DType::kFloat64), InferFusedRotary,
         "rotary position embedding with the rows given: x [..., 2h], cos and sin broadcasting against [..., h]; "
         "out = concat(x1 * cos - x2 * sin, x2 * cos + x1 * sin) (x1, x2 the halves of x), each operation rounded to "
         "the dtype",
         nullptr);
  direct(Op::kFusedRmsScale, "fused_rms_scale", {"x", "mean_square", "eps", "weight"}, {"out"}, {},
         Bit(DType::kFloat32) | Bit(DType::kFloat64), InferFusedRmsScale,
         "the end of rms_norm: x * rsqrt(mean_square + eps) * weight, mean_square, eps and weight broadcasting "
         "against x, each operation rounded to the dtype (rsqrt as 1 / sqrt)",
         nullptr);
  // relu's VJP as one kernel; its decomposition (what CINN fuses) is the composed rule it replaces, which relu's
  // VJP still runs on a device without the kernel.
  direct(Op::kReluGrad, "relu_grad", {"grad", "x"}, {"grad_x"}, {}, kFloating, InferReluGrad,
         "relu's gradient: grad * (x > 0 ? 1 : 0) per element (grad * cast(gt(x, 0))), grad and x of one shape",
         vjp::ReluGrad);
  t.back().decompose = DecomposeReluGrad;
  // batch_norm's training forward in one kernel (statistics, normalisation, scale and shift) and the gradients
  // of its VJP chain in another, each bit for bit the composed ops (nn.cc's batch_norm and the VJPs those ops
  // record), which are their decompositions; batch_norm runs them where the device has the kernels.
  direct(Op::kBatchNormTrain, "batch_norm_train", {"x", "weight", "bias"}, {"y", "mean", "var"},
         {{"eps", OAR_ATTR_FLOAT, 1e-5, ""}}, Bit(DType::kFloat32) | Bit(DType::kFloat64), InferBatchNormTrain,
         "batch normalisation with batch statistics over every dim but 1 of x [N, C] or [N, C, H, W]: mean = mean(x), "
         "var = mean((x - mean)^2) (population), y = ((x - mean) * (rsqrt(var + eps) * weight)) + bias, each "
         "operation rounded to the dtype and summed as `mean` sums; mean and var in the keepdim shape carry no "
         "gradient",
         vjp::BatchNormTrain);
  t.back().decompose = DecomposeBatchNormTrain;
  // Not differentiated again (vjp null): batch_norm_train's VJP runs the composed chain when it is recorded.
  direct(Op::kBatchNormTrainGrad, "batch_norm_train_grad", {"grad", "x", "weight"},
         {"grad_x", "grad_weight", "grad_bias"}, {{"eps", OAR_ATTR_FLOAT, 1e-5, ""}},
         Bit(DType::kFloat32) | Bit(DType::kFloat64), InferBatchNormTrainGrad,
         "the gradients of batch_norm_train's y (grad) with respect to x, weight and bias, the statistics "
         "recomputed from x: the VJP chain of the composed ops, each operation rounded to the dtype, the "
         "contributions added in the order autograd adds them",
         nullptr);
  t.back().decompose = DecomposeBatchNormTrainGrad;
  // Not differentiable (vjp null): an optimiser update is not part of what a training step differentiates.
  direct(Op::kFusedAdam, "fused_adam",
         {"param", "grad", "m", "v", "decay", "beta1", "one_minus_beta1", "beta2", "one_minus_beta2",
          "bias_correction1", "bias_correction2", "eps", "lr"},
         {"param_out", "m_out", "v_out"}, {{"with_decay", OAR_ATTR_INT, int64_t{1}, "1: param * decay; 0: param"}},
         Bit(DType::kFloat32) | Bit(DType::kFloat64), InferFusedAdam,
         "Adam's update of one parameter, elementwise: m_out = m * beta1 + grad * one_minus_beta1, v_out = v * beta2 + "
         "(grad * grad) * one_minus_beta2, param_out = value - ((m_out / bias_correction1) / (sqrt(v_out / "
         "bias_correction2) + eps)) * lr with value = param * decay (with_decay 1, AdamW) or param (with_decay 0, "
         "Adam: decay is not read), each operation rounded to the dtype; the scalars are 0-d",
         nullptr);
  // The backward of tanh and sigmoid in one pass each (fuse-act-grad in static training programs): not
  // differentiated again (vjp null), as a training step's backward is not.
  direct(Op::kFusedTanhGrad, "fused_tanh_grad", {"grad", "y", "one"}, {"grad_x"}, {},
         Bit(DType::kFloat32) | Bit(DType::kFloat64), InferFusedActGrad,
         "tanh's backward with y = tanh(x): grad * (-(y * y) + one), one a 0-d 1, each operation rounded to the dtype "
         "(the ops tanh's VJP records: mul, neg, add, mul)",
         nullptr);
  direct(Op::kFusedSigmoidGrad, "fused_sigmoid_grad", {"grad", "s", "one"}, {"grad_x"}, {},
         Bit(DType::kFloat32) | Bit(DType::kFloat64), InferFusedActGrad,
         "sigmoid's backward with s = sigmoid(x): (grad * s) * (-s + one), one a 0-d 1, each operation rounded to "
         "the dtype (the ops sigmoid's VJP records: mul, neg, add, mul)",
         nullptr);
  // cross_entropy's log_softmax and the softmax its VJP recomputes, from one maximum and one sum of
  // exponentials per row (fuse-log-softmax in static training programs); not differentiated again.
  direct(Op::kFusedLogSoftmax, "fused_log_softmax", {"x"}, {"log_softmax", "softmax"},
         {{"axis", OAR_ATTR_INT, int64_t{-1}, "the axis"}}, Bit(DType::kFloat32) | Bit(DType::kFloat64),
         InferFusedLogSoftmax,
         "log_softmax(x, axis) and softmax(x, axis), bitwise those two ops' results: the maximum, the exponentials "
         "of the differences and their sum computed once where the two kernels compute them alike",
         nullptr);
  // attention's softmax(where(mask, x * scale, fill)) over the last axis and its backward in one pass each
  // (fuse-masked-softmax in static training programs); not differentiated again.
  direct(Op::kFusedMaskedSoftmax, "fused_masked_softmax", {"x", "scale", "mask", "fill"}, {"out"}, {},
         Bit(DType::kFloat32) | Bit(DType::kFloat64), InferFusedMaskedSoftmax,
         "softmax(where(mask, x * scale, fill)) over x's last axis, mask (bool) broadcasting against x, scale and "
         "fill 0-d: bitwise the mul, where and softmax kernels",
         nullptr);
  direct(Op::kFusedMaskedSoftmaxGrad, "fused_masked_softmax_grad", {"grad", "y", "mask", "zero", "scale"}, {"grad_x"},
         {}, Bit(DType::kFloat32) | Bit(DType::kFloat64), InferFusedMaskedSoftmax,
         "fused_masked_softmax's backward as the VJPs record it, y its result: where(mask, y * (grad - sum(grad * y, "
         "last axis, keepdim)), zero) * scale; bitwise the mul, sum, sub, mul, where and mul kernels",
         nullptr);
  // rotary_embedding's backward with the rows given (fuse-rotary-grad in static training programs): the
  // products, negation and sums its VJP records and the slice_scatter + add that join the halves; not
  // differentiated again.
  direct(Op::kFusedRotaryGrad, "fused_rotary_grad", {"grad", "cos", "sin"}, {"grad_x"}, {},
         Bit(DType::kFloat32) | Bit(DType::kFloat64), InferFusedRotary,
         "the rotary rotation's backward: grad [..., 2h], cos and sin broadcasting against [..., h]; grad_x = "
         "concat(0 + (g2 * sin + g1 * cos), (g2 * cos + (-g1) * sin) + 0) (g1, g2 the halves of grad), each "
         "operation rounded to the dtype in this order (the ops the VJP records: slice, mul, neg, add, "
         "slice_scatter, add)",
         nullptr);
}

}  // namespace oar::ops
