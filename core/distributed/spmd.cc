#include "core/distributed/spmd.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "core/base/error.h"
#include "core/distributed/dist_tensor.h"

namespace oar::distributed {
namespace {

using ops::Op;
using ReduceOp = runtime::ReduceOp;

thread_local ExplainScope* g_explain = nullptr;

const std::vector<ReduceOp> kLinear = {ReduceOp::kSum, ReduceOp::kAvg};
const std::vector<ReduceOp> kAllReductions = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

// Attribute `name` of `s`, or its default when the call left it out.
template <typename T>
T AttrOf(const ops::OpSchema& s, const ops::AttrValues& attrs, std::string_view name) {
  const int i = s.AttrIndex(name);
  const ops::AttrValue& v = static_cast<size_t>(i) < attrs.size() ? attrs[static_cast<size_t>(i)]
                                                                 : s.attrs[static_cast<size_t>(i)].default_value;
  return std::get<T>(v);
}

int64_t NormDim(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

std::vector<int> Identity(SpmdRule& r, const Dims& shape) {
  std::vector<int> f;
  for (int64_t d : shape) f.push_back(r.AddFactor(d));
  return f;
}

void PassPartial(SpmdRule& r, std::vector<bool> inputs, std::vector<ReduceOp> ops) {
  r.partial.push_back({std::move(inputs), std::move(ops)});
}

// Right-aligned broadcasting of `inputs` (extent-1 dims that broadcast are replicated).
void Broadcast(SpmdRule& r, std::span<const Dims> inputs) {
  int rank = 0;
  for (const Dims& d : inputs) rank = std::max(rank, d.size());
  Dims out = Dims::Filled(rank, 1);
  for (const Dims& d : inputs) {
    for (int i = 0; i < d.size(); ++i) {
      const int o = rank - d.size() + i;
      if (d[i] != 1) out[o] = d[i];
    }
  }
  const std::vector<int> f = Identity(r, out);
  for (const Dims& d : inputs) {
    std::vector<int> in;
    for (int i = 0; i < d.size(); ++i) {
      const int o = rank - d.size() + i;
      in.push_back(d[i] == out[o] ? f[static_cast<size_t>(o)] : -1);
    }
    r.inputs.push_back(in);
  }
  r.outputs.push_back(f);
}

SpmdRule Matmul(const Dims& a, const Dims& b) {
  SpmdRule r{"matmul", "matmul"};
  const int ra = a.size(), rb = b.size();
  OAR_CHECK_ARG(ra >= 1 && rb >= 1, "matmul: SPMD rule needs inputs of rank >= 1, got {} and {}", a.ToString(),
                b.ToString());
  const int ba = std::max(ra - 2, 0), bb = std::max(rb - 2, 0), bo = std::max(ba, bb);
  std::vector<int> batch;
  for (int i = 0; i < bo; ++i) {
    const int ia = i - (bo - ba), ib = i - (bo - bb);
    int64_t size = 1;
    if (ia >= 0) size = std::max(size, a[ia]);
    if (ib >= 0) size = std::max(size, b[ib]);
    batch.push_back(r.AddFactor(size));
  }
  const int k = r.AddFactor(a[ra - 1]);
  r.contraction[static_cast<size_t>(k)] = ReduceOp::kSum;
  const int m = ra >= 2 ? r.AddFactor(a[ra - 2]) : -1;
  const int n = rb >= 2 ? r.AddFactor(b[rb - 1]) : -1;
  std::vector<int> fa, fb, out;
  for (int i = 0; i < ba; ++i) fa.push_back(a[i] == r.factor_size[static_cast<size_t>(batch[static_cast<size_t>(i + bo - ba)])] ? batch[static_cast<size_t>(i + bo - ba)] : -1);
  for (int i = 0; i < bb; ++i) fb.push_back(b[i] == r.factor_size[static_cast<size_t>(batch[static_cast<size_t>(i + bo - bb)])] ? batch[static_cast<size_t>(i + bo - bb)] : -1);
  if (ra >= 2) fa.push_back(m);
  fa.push_back(k);
  fb.push_back(k);
  if (rb >= 2) fb.push_back(n);
  out = batch;
  if (ra >= 2) out.push_back(m);
  if (rb >= 2) out.push_back(n);
  r.inputs = {fa, fb};
  r.outputs = {out};
  PassPartial(r, {true, false}, kLinear);
  PassPartial(r, {false, true}, kLinear);
  return r;
}

// Reduce `axes` of x (empty: all); reduced factors are contractions of kind `op` (none: blocked).
SpmdRule Reduction(const std::string& name, const Dims& x, std::vector<int64_t> axes, bool keepdim,
                   std::optional<ReduceOp> op, bool even) {
  SpmdRule r{name, "reduction"};
  const std::vector<int> f = Identity(r, x);
  if (axes.empty()) {
    axes.resize(static_cast<size_t>(x.size()));
    std::iota(axes.begin(), axes.end(), 0);
  }
  std::vector<bool> reduced(static_cast<size_t>(x.size()), false);
  for (int64_t a : axes) reduced[static_cast<size_t>(NormDim(a, x.size()))] = true;
  std::vector<int> out;
  for (int d = 0; d < x.size(); ++d) {
    const auto fd = static_cast<size_t>(f[static_cast<size_t>(d)]);
    if (reduced[static_cast<size_t>(d)]) {
      r.contraction[fd] = op;
      r.even[fd] = even;
      if (!op) r.blocked[fd] = true;
      if (keepdim) out.push_back(-1);
    } else {
      out.push_back(f[static_cast<size_t>(d)]);
    }
  }
  r.inputs = {f};
  r.outputs = {out};
  return r;
}

// Dims from `axis` on are blocked (softmax's axis, an arg-reduction's axis, normalised dims).
SpmdRule Axiswise(const std::string& name, const Dims& x, int64_t axis, int64_t count, bool drop) {
  SpmdRule r{name, "axiswise"};
  std::vector<int> f = Identity(r, x);
  std::vector<int> out;
  for (int d = 0; d < x.size(); ++d) {
    const bool hit = d >= axis && d < axis + count;
    if (hit) {
      r.blocked[static_cast<size_t>(f[static_cast<size_t>(d)])] = true;
      if (!drop) out.push_back(-1);
    } else {
      out.push_back(f[static_cast<size_t>(d)]);
    }
  }
  for (int d = 0; d < x.size(); ++d) {
    if (d >= axis && d < axis + count) f[static_cast<size_t>(d)] = -1;
  }
  r.inputs = {f};
  r.outputs = {out};
  return r;
}

// Reshape: dims grouped by equal products; in a group that splits or merges dims, its leftmost input dim's
// sharding moves to the leftmost output dim, and in a group of one dim and several, each other dim of the
// several is a strided factor of the one (SpmdRule::strided); all only evenly.
SpmdRule Reshape(const Dims& in, const Dims& out) {
  SpmdRule r{"view", "view"};
  std::vector<int> fi(static_cast<size_t>(in.size()), -1), fo(static_cast<size_t>(out.size()), -1);
  if (in.Product() != 0) {
    int i = 0, j = 0;
    while (i < in.size() || j < out.size()) {
      // A unit dim the other side does not have at this point is a group of its own (no factor), so a
      // sharded dim next to it keeps its sharding: [1, 128, 64] S(1) -> [128, 64] S(0).
      const bool in_unit = i < in.size() && in[i] == 1, out_unit = j < out.size() && out[j] == 1;
      if (in_unit != out_unit) {
        (in_unit ? i : j)++;
        continue;
      }
      const int i0 = i, j0 = j;
      int64_t pa = i < in.size() ? in[i++] : 1, pb = j < out.size() ? out[j++] : 1;
      while (pa != pb) {
        if (pa < pb && i < in.size()) {
          pa *= in[i++];
        } else if (j < out.size()) {
          pb *= out[j++];
        } else {
          break;
        }
      }
      if (i - i0 == 1 && j - j0 == 1) {
        const int f = r.AddFactor(in[i0]);
        fi[static_cast<size_t>(i0)] = f;
        fo[static_cast<size_t>(j0)] = f;
      } else if (i > i0 && j > j0) {
        const int f = r.AddFactor(std::gcd(in[i0], out[j0]));
        r.even[static_cast<size_t>(f)] = true;
        fi[static_cast<size_t>(i0)] = f;
        fo[static_cast<size_t>(j0)] = f;
        // One dim split into several (or several merged into one): every other dim of the several is a
        // factor of the one at the stride of the extents before it, so its sharding survives as a strided
        // shard of the one ([b, t, 3 · heads · hd] S(2,3) <-> [b, t, 3, heads, hd] S(3)).
        const bool split = i - i0 == 1;
        if (split != (j - j0 == 1)) {
          const Dims& many = split ? out : in;
          std::vector<int>& fm = split ? fo : fi;
          const int first = split ? j0 : i0, last = split ? j : i;
          int64_t stride = many[first];
          for (int q = first + 1; q < last; stride *= many[q++]) {
            const int g = r.AddFactor(many[q]);
            r.even[static_cast<size_t>(g)] = true;
            fm[static_cast<size_t>(q)] = g;
            r.strided.push_back({split ? false : true, 0, split ? i0 : j0, g, stride});
          }
        }
      }
    }
  }
  r.inputs = {fi};
  r.outputs = {fo};
  PassPartial(r, {true}, kAllReductions);
  return r;
}

std::vector<int> Unused(int rank) { return std::vector<int>(static_cast<size_t>(rank), -1); }

}  // namespace

int SpmdRule::AddFactor(int64_t size, bool blocked_factor) {
  factor_size.push_back(size);
  contraction.emplace_back();
  blocked.push_back(blocked_factor);
  even.push_back(false);
  return static_cast<int>(factor_size.size()) - 1;
}

bool HasSpmdRule(ops::Op op) {
  // Every op of the table falls into one of the families of SpmdRuleFor (its switch has no default, so
  // a new Op without a rule does not compile); kCount_ is not an op.
  return op != Op::kCount_;
}

SpmdRule SpmdRuleFor(ops::Op op, std::span<const ops::TensorMeta> in, const ops::AttrValues& attrs) {
  const ops::OpSchema& s = ops::Schema(op);
  std::vector<Dims> shapes;
  for (const ops::TensorMeta& m : in) shapes.push_back(m.shape);
  auto shape = [&](size_t i) { return i < shapes.size() ? shapes[i] : Dims(); };
  SpmdRule r{std::string(s.name), "elementwise"};
  switch (op) {
    case Op::kAdd:
    case Op::kSub:
      Broadcast(r, shapes);
      PassPartial(r, {true, true}, kLinear);
      return r;
    case Op::kMul:
      Broadcast(r, shapes);
      PassPartial(r, {true, false}, kLinear);
      PassPartial(r, {false, true}, kLinear);
      return r;
    case Op::kDiv:
    case Op::kReluGrad:  // linear in its first operand (grad), as a mask multiplies it
      Broadcast(r, shapes);
      PassPartial(r, {true, false}, kLinear);
      return r;
    case Op::kMaximum:
    case Op::kMinimum:
    case Op::kPow:
    case Op::kEq:
    case Op::kNe:
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe:
    case Op::kLogicalAnd:
    case Op::kLogicalOr:
    case Op::kWhere:
      Broadcast(r, shapes);
      return r;
    case Op::kNeg:
      r.inputs = {Identity(r, shape(0))};
      r.outputs = r.inputs;
      PassPartial(r, {true}, kLinear);
      return r;
    case Op::kLogicalNot:
    case Op::kIsNan:
    case Op::kIsInf:
    case Op::kExp:
    case Op::kRelu:
    case Op::kAbs:
    case Op::kSign:
    case Op::kLog:
    case Op::kLog1p:
    case Op::kExpm1:
    case Op::kSqrt:
    case Op::kRsqrt:
    case Op::kSin:
    case Op::kCos:
    case Op::kTanh:
    case Op::kSigmoid:
    case Op::kErf:
    case Op::kReciprocal:
    case Op::kCast:
    case Op::kCopy:
      r.inputs = {Identity(r, shape(0))};
      r.outputs = r.inputs;
      return r;
    case Op::kClone:
      r.family = "view";
      r.inputs = {Identity(r, shape(0))};
      r.outputs = r.inputs;
      PassPartial(r, {true}, kAllReductions);
      return r;
    case Op::kMatmul:
      return Matmul(shape(0), shape(1));
    case Op::kSum:
    case Op::kMean:
    case Op::kMax:
    case Op::kMin:
    case Op::kProd: {
      const auto axes = AttrOf<std::vector<int64_t>>(s, attrs, "axes");
      const bool keepdim = AttrOf<bool>(s, attrs, "keepdim");
      std::optional<ReduceOp> c;
      std::vector<ReduceOp> pass;
      if (op == Op::kSum) c = ReduceOp::kSum, pass = kLinear;
      if (op == Op::kMean) c = ReduceOp::kAvg, pass = kLinear;
      if (op == Op::kMax) c = ReduceOp::kMax, pass = {ReduceOp::kMax};
      if (op == Op::kMin) c = ReduceOp::kMin, pass = {ReduceOp::kMin};
      SpmdRule red = Reduction(r.name, shape(0), axes, keepdim, c, op == Op::kMean);
      if (!pass.empty()) PassPartial(red, {true}, pass);
      return red;
    }
    case Op::kArgmax:
    case Op::kArgmin: {
      const int64_t axis = NormDim(AttrOf<int64_t>(s, attrs, "axis"), shape(0).size());
      return Axiswise(r.name, shape(0), axis, 1, !AttrOf<bool>(s, attrs, "keepdim"));
    }
    case Op::kSoftmax:
    case Op::kLogSoftmax:
      return Axiswise(r.name, shape(0), NormDim(AttrOf<int64_t>(s, attrs, "axis"), shape(0).size()), 1, false);
    case Op::kFusedLogSoftmax: {  // softmax's rule, for each of the two results
      SpmdRule a = Axiswise(r.name, shape(0), NormDim(AttrOf<int64_t>(s, attrs, "axis"), shape(0).size()), 1, false);
      a.outputs.push_back(a.outputs[0]);
      return a;
    }
    case Op::kFill: {
      r.family = "creation";
      const Dims out(AttrOf<std::vector<int64_t>>(s, attrs, "shape"));
      r.outputs = {Unused(out.size())};
      return r;
    }
    case Op::kView: {
      const std::vector<ops::TensorMeta> out = s.Infer(in, attrs);
      SpmdRule v = Reshape(shape(0), out[0].shape);
      return v;
    }
    case Op::kPermute: {
      r.family = "view";
      const auto dims = AttrOf<std::vector<int64_t>>(s, attrs, "dims");
      const std::vector<int> f = Identity(r, shape(0));
      std::vector<int> out;
      for (int64_t d : dims) out.push_back(f[static_cast<size_t>(NormDim(d, shape(0).size()))]);
      r.inputs = {f};
      r.outputs = {out};
      PassPartial(r, {true}, kAllReductions);
      return r;
    }
    case Op::kSlice:
    case Op::kSliceScatter: {
      r.family = "view";
      const Dims x = shape(0);
      const int64_t dim = NormDim(AttrOf<int64_t>(s, attrs, "dim"), x.size());
      std::vector<int> f = Identity(r, x);
      r.blocked[static_cast<size_t>(f[static_cast<size_t>(dim)])] = true;
      f[static_cast<size_t>(dim)] = -1;
      r.inputs = {f};
      r.outputs = {f};
      PassPartial(r, {true}, op == Op::kSlice ? kAllReductions : kLinear);
      return r;
    }
    case Op::kExpand: {
      r.family = "view";
      const std::vector<ops::TensorMeta> out = s.Infer(in, attrs);
      const Dims x = shape(0), o = out[0].shape;
      std::vector<int> fi, fo(static_cast<size_t>(o.size()), -1);
      for (int i = 0; i < x.size(); ++i) {
        const int oi = o.size() - x.size() + i;
        if (x[i] == o[oi] && x[i] != 1) {
          fi.push_back(r.AddFactor(x[i]));
          fo[static_cast<size_t>(oi)] = fi.back();
        } else {
          fi.push_back(-1);
        }
      }
      r.inputs = {fi};
      r.outputs = {fo};
      return r;
    }
    case Op::kSqueeze:
    case Op::kUnsqueeze: {
      r.family = "view";
      const Dims x = shape(0);
      const std::vector<int> f = Identity(r, x);
      std::vector<int> out = f;
      if (op == Op::kSqueeze) {
        const int64_t d = NormDim(AttrOf<int64_t>(s, attrs, "dim"), x.size());
        out.erase(out.begin() + d);
      } else {
        const int64_t d = NormDim(AttrOf<int64_t>(s, attrs, "dim"), x.size() + 1);
        out.insert(out.begin() + d, -1);
      }
      r.inputs = {f};
      r.outputs = {out};
      PassPartial(r, {true}, kAllReductions);
      return r;
    }
    case Op::kConv2d:
    case Op::kConv2dGradInput:
    case Op::kConv2dGradWeight: {
      // The batch shards (and contracts, for the weight gradient); channels and space stay whole.
      r.family = "convolution";
      const int n = r.AddFactor(shape(0)[0]);
      auto batch_only = [&](const Dims& d) {
        std::vector<int> f = Unused(d.size());
        f[0] = n;
        return f;
      };
      r.inputs = {batch_only(shape(0)), op == Op::kConv2dGradWeight ? batch_only(shape(1)) : Unused(shape(1).size())};
      r.outputs = {op == Op::kConv2dGradWeight ? Unused(4) : batch_only(Dims::Filled(4, 1))};
      if (op == Op::kConv2dGradWeight) r.contraction[static_cast<size_t>(n)] = ReduceOp::kSum;
      return r;
    }
    case Op::kMaxPool2d:
    case Op::kAvgPool2d:
    case Op::kAvgPool2dGrad:
    case Op::kAdaptiveAvgPool2d:
    case Op::kAdaptiveAvgPool2dGrad: {
      r.family = "pooling";
      const Dims x = shape(0);
      const int n = r.AddFactor(x[0]), c = r.AddFactor(x[1]);
      const std::vector<int> f = {n, c, -1, -1};
      r.inputs = {f};
      r.outputs = {f};
      if (op == Op::kMaxPool2d) r.outputs.push_back(f);
      return r;
    }
    case Op::kLayerNorm: {
      r.family = "normalisation";
      const Dims x = shape(0);
      const int64_t axis = NormDim(AttrOf<int64_t>(s, attrs, "axis"), x.size());
      std::vector<int> f = Identity(r, x);
      for (int d = static_cast<int>(axis); d < x.size(); ++d) {
        r.blocked[static_cast<size_t>(f[static_cast<size_t>(d)])] = true;
        f[static_cast<size_t>(d)] = -1;
      }
      r.inputs = {f, Unused(shape(1).size()), Unused(shape(2).size())};
      const std::vector<ops::TensorMeta> out = s.Infer(in, attrs);
      r.outputs = {f};
      for (size_t o = 1; o < out.size(); ++o) {
        std::vector<int> g = Unused(out[o].shape.size());
        for (int d = 0; d < std::min<int>(static_cast<int>(axis), out[o].shape.size()); ++d) g[static_cast<size_t>(d)] = f[static_cast<size_t>(d)];
        r.outputs.push_back(g);
      }
      return r;
    }
    case Op::kBatchNormTrain:
    case Op::kBatchNormTrainGrad: {
      // The statistics sum over every dim but the channels: only the channels shard (a batch split would
      // need the sums across ranks, a synchronised batch norm); weight, bias and their gradients go with them.
      r.family = "normalisation";
      const bool grad = op == Op::kBatchNormTrainGrad;
      const Dims x = shape(grad ? 1 : 0);
      const int c = r.AddFactor(x.size() > 1 ? x[1] : 1);
      std::vector<int> f = Unused(x.size());
      if (x.size() > 1) f[1] = c;
      const std::vector<int> v = {c};
      r.inputs = grad ? std::vector<std::vector<int>>{f, f, v} : std::vector<std::vector<int>>{f, v, v};
      r.outputs = grad ? std::vector<std::vector<int>>{f, v, v} : std::vector<std::vector<int>>{f, f, f};
      return r;
    }
    case Op::kConcat: {
      r.family = "concat";
      const Dims x = shape(0);
      const int64_t axis = NormDim(AttrOf<int64_t>(s, attrs, "axis"), x.size());
      std::vector<int> f = Identity(r, x);
      r.blocked[static_cast<size_t>(f[static_cast<size_t>(axis)])] = true;
      f[static_cast<size_t>(axis)] = -1;
      for (size_t i = 0; i < shapes.size(); ++i) r.inputs.push_back(f);
      r.outputs = {f};
      PassPartial(r, std::vector<bool>(shapes.size(), true), kLinear);
      return r;
    }
    case Op::kGather:
    case Op::kScatterAdd: {
      r.family = "indexing";
      // gather(x, index) -> index's shape; scatter_add(x, index, src) -> x's shape. Dims other than the
      // axis shard together where their extents agree.
      const Dims x = shape(0), idx = shape(1);
      const int64_t axis = NormDim(AttrOf<int64_t>(s, attrs, "axis"), x.size());
      std::vector<int> fx = Unused(x.size()), fi = Unused(idx.size());
      for (int d = 0; d < std::min(x.size(), idx.size()); ++d) {
        if (d != axis && x[d] == idx[d]) fx[static_cast<size_t>(d)] = fi[static_cast<size_t>(d)] = r.AddFactor(x[d]);
      }
      if (op == Op::kScatterAdd && axis < idx.size()) {
        // The rows scattered (index and src along the axis) contract: each rank scatters its rows into its
        // Partial(sum) share of x (the embedding's backward under data parallelism scatters locally).
        const int rows = r.AddFactor(idx[static_cast<int>(axis)]);
        fi[static_cast<size_t>(axis)] = rows;
        r.contraction[static_cast<size_t>(rows)] = ReduceOp::kSum;
        r.accumulates.resize(static_cast<size_t>(rows) + 1);
        r.accumulates[static_cast<size_t>(rows)] = {true, false, false};
      }
      if (op == Op::kGather) {
        r.inputs = {fx, fi};
        r.outputs = {fi};
      } else {
        r.inputs = {fx, fi, fi};
        r.outputs = {fx};
      }
      return r;
    }
    case Op::kIndexSelect: {
      r.family = "indexing";
      const Dims x = shape(0);
      const int64_t axis = NormDim(AttrOf<int64_t>(s, attrs, "axis"), x.size());
      std::vector<int> fx = Identity(r, x), out = fx;
      const int rows = r.AddFactor(shape(1).size() ? shape(1)[0] : 1);
      r.blocked[static_cast<size_t>(fx[static_cast<size_t>(axis)])] = true;
      fx[static_cast<size_t>(axis)] = -1;
      out[static_cast<size_t>(axis)] = rows;
      r.inputs = {fx, {rows}};
      r.outputs = {out};
      return r;
    }
    case Op::kTopk: {
      const int64_t axis = NormDim(AttrOf<int64_t>(s, attrs, "axis"), shape(0).size());
      SpmdRule t = Axiswise(r.name, shape(0), axis, 1, false);
      t.outputs.push_back(t.outputs[0]);
      return t;
    }
    case Op::kPad: {
      r.family = "indexing";
      const Dims x = shape(0);
      const auto pads = AttrOf<std::vector<int64_t>>(s, attrs, "pads");
      std::vector<int> f = Identity(r, x);
      // pads[2d], pads[2d + 1]: before and after dim d; a padded dim stays whole.
      for (int d = 0; d < x.size() && static_cast<size_t>(2 * d + 1) < pads.size(); ++d) {
        if (pads[static_cast<size_t>(2 * d)] != 0 || pads[static_cast<size_t>(2 * d + 1)] != 0) {
          f[static_cast<size_t>(d)] = -1;
        }
      }
      r.inputs = {f};
      r.outputs = {f};
      return r;
    }
    case Op::kFusedLinear: {
      // out[..., n] = act(sum_k x[..., k] w[k, n] + bias[n]): the activation is not linear, so the
      // contraction dim k may not be split (no Partial output); leading dims and n shard freely.
      r.family = "matmul";
      const Dims x = shape(0);
      std::vector<int> fx;
      for (int d = 0; d + 1 < x.size(); ++d) fx.push_back(r.AddFactor(x[d]));
      const int k = r.AddFactor(x[x.size() - 1], /*blocked_factor=*/true), n = r.AddFactor(shape(1)[1]);
      std::vector<int> out = fx;
      out.push_back(n);
      fx.push_back(k);
      r.inputs = {fx, {k, n}, {n}};
      r.outputs = {out};
      return r;
    }
    case Op::kFusedRotary:
    case Op::kFusedRotaryGrad: {
      // out[..., i] and out[..., i + h] mix x[..., i] and x[..., i + h]: the last dim stays whole; the leading
      // dims shard freely, with cos and sin (right-aligned) sharing a dim's factor where they do not broadcast.
      r.family = "elementwise";
      const Dims x = shape(0);
      std::vector<int> fx;
      for (int d = 0; d + 1 < x.size(); ++d) fx.push_back(r.AddFactor(x[d]));
      fx.push_back(-1);
      r.inputs = {fx};
      for (size_t i = 1; i <= 2; ++i) {
        const Dims c = shape(i);
        std::vector<int> fc(static_cast<size_t>(c.size()), -1);
        for (int d = 0; d + 1 < c.size(); ++d) {
          const int dx = d + x.size() - c.size();
          if (c[d] == x[dx]) fc[static_cast<size_t>(d)] = fx[static_cast<size_t>(dx)];
        }
        r.inputs.push_back(fc);
      }
      r.outputs = {fx};
      return r;
    }
    case Op::kFusedRmsScale: {
      // Elementwise with broadcasting (mean_square, eps and weight against x); not linear in mean_square.
      SpmdRule t = ElementwiseRule(r.name, std::vector<Dims>{shape(0), shape(1), shape(2), shape(3)}, false);
      return t;
    }
    case Op::kFusedAdam: {
      // Elementwise over param, grad, m and v (one factor per dim, shared by the three results); the nine
      // scalars are 0-d (replicated). Not linear in its operands: a Partial input is not passed through.
      r.family = "elementwise";
      const std::vector<int> f = Identity(r, shape(0));
      r.inputs = {f, f, f, f};
      for (int i = 4; i < 13; ++i) r.inputs.push_back({});
      r.outputs = {f, f, f};
      return r;
    }
    case Op::kFusedTanhGrad:
    case Op::kFusedSigmoidGrad: {
      // Elementwise over grad and the forward's result (one factor per dim); `one` is 0-d (replicated). Not
      // passed through as Partial: the result is not linear in the forward's result.
      r.family = "elementwise";
      const std::vector<int> f = Identity(r, shape(0));
      r.inputs = {f, f, {}};
      r.outputs = {f};
      return r;
    }
    case Op::kFusedMaskedSoftmax:
    case Op::kFusedMaskedSoftmaxGrad: {
      // A softmax over the last dim (it stays whole); the leading dims shard freely, the mask (right-aligned)
      // sharing a dim's factor where it does not broadcast; the 0-d scalars are replicated. Not linear.
      r.family = "axiswise";
      const bool grad = op == Op::kFusedMaskedSoftmaxGrad;
      const Dims x = shape(0);
      std::vector<int> fx;
      for (int d = 0; d + 1 < x.size(); ++d) fx.push_back(r.AddFactor(x[d]));
      fx.push_back(-1);
      const Dims m = shape(2);
      std::vector<int> fm(static_cast<size_t>(m.size()), -1);
      for (int d = 0; d + 1 < m.size(); ++d) {
        const int dx = d + x.size() - m.size();
        if (m[d] == x[dx]) fm[static_cast<size_t>(d)] = fx[static_cast<size_t>(dx)];
      }
      r.inputs =
          grad ? std::vector<std::vector<int>>{fx, fx, fm, {}, {}} : std::vector<std::vector<int>>{fx, {}, fm, {}};
      r.outputs = {fx};
      return r;
    }
    case Op::kCount_:
      break;
  }
  Throw(ErrorCode::kInternal, "SPMD: op {} has no rule", static_cast<int>(op));
}

SpmdRule ElementwiseRule(const std::string& name, std::span<const Dims> inputs, bool linear) {
  SpmdRule r{name, "elementwise"};
  Broadcast(r, inputs);
  if (linear) PassPartial(r, std::vector<bool>(inputs.size(), true), kLinear);
  return r;
}

SpmdRule LinearRule(const Dims& x, const Dims& w, bool bias) {
  // y[..., o] = sum_i x[..., i] w[o, i] (+ b[o]).
  SpmdRule r{"linear", "matmul"};
  std::vector<int> fx;
  for (int d = 0; d + 1 < x.size(); ++d) fx.push_back(r.AddFactor(x[d]));
  const int i = r.AddFactor(x[x.size() - 1]), o = r.AddFactor(w[0]);
  // A contraction with a bias would add the bias on every rank: only without one.
  if (!bias) r.contraction[static_cast<size_t>(i)] = ReduceOp::kSum;
  std::vector<int> out = fx;
  out.push_back(o);
  fx.push_back(i);
  r.inputs = {fx, {o, i}};
  if (bias) r.inputs.push_back({o});
  r.outputs = {out};
  if (!bias) PassPartial(r, {true, false}, kLinear);
  return r;
}

SpmdRule NormRule(const std::string& name, const Dims& x, int normalized_ndim, int params) {
  SpmdRule r = Axiswise(name, x, x.size() - normalized_ndim, normalized_ndim, false);
  r.family = "normalisation";
  for (int p = 0; p < params; ++p) r.inputs.push_back(Unused(normalized_ndim));
  return r;
}

SpmdRule EmbeddingRule(const Dims& weight, const Dims& indices) {
  // out[..., d] = weight[indices[...], d]. The vocabulary dim, when sharded, gives a Partial(sum) output
  // (each rank looks up the rows it holds and zeros the others).
  SpmdRule r{"embedding", "embedding"};
  const int v = r.AddFactor(weight[0]), d = r.AddFactor(weight[1]);
  r.contraction[static_cast<size_t>(v)] = ReduceOp::kSum;
  std::vector<int> fi = Identity(r, indices), out = fi;
  out.push_back(d);
  r.inputs = {{v, d}, fi};
  r.outputs = {out};
  return r;
}

SpmdRule CrossEntropyRule(const Dims& logits, const Dims& target) {
  // mean over rows of -log_softmax(logits)[row, target[row]]: rows shard (each rank sums its rows and
  // counts them; the reduction is exact); classes stay whole.
  SpmdRule r{"cross_entropy", "loss"};
  const int n = r.AddFactor(logits[0]);
  const int c = r.AddFactor(logits[1], /*blocked=*/true);
  (void)c;
  r.contraction[static_cast<size_t>(n)] = ReduceOp::kSum;
  r.inputs = {{n, -1}, {n}};
  (void)target;
  r.outputs = {{}};
  return r;
}

SpmdRule AttentionRule(const Dims& q, const Dims& k, const Dims& v) {
  // [..., T, D]: the leading (batch, head) dims shard alike; sequence and head dims stay whole.
  SpmdRule r{"scaled_dot_product_attention", "attention"};
  std::vector<int> f;
  for (int d = 0; d + 2 < q.size(); ++d) f.push_back(r.AddFactor(q[d]));
  std::vector<int> full = f;
  full.push_back(-1);
  full.push_back(-1);
  (void)k;
  (void)v;
  r.inputs = {full, full, full};
  r.outputs = {full};
  return r;
}

namespace {

struct Candidate {
  std::string what;
  std::vector<Placement> in, out;
  int violations = 0;
  double cost = 0;
  int order = 0;
};

int FindDim(const std::vector<int>& dims, int f) {
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == f) return static_cast<int>(d);
  }
  return -1;
}

// Where tensor `t` (an input, or an output with `output`) carries factor f: its dim (-1: nowhere) and the
// split at which it does (1 but for SpmdRule::strided).
struct Carrier {
  int dim = -1;
  int64_t split = 1;
};
Carrier CarrierOf(const SpmdRule& rule, bool output, size_t t, int f) {
  const int d = FindDim((output ? rule.outputs : rule.inputs)[t], f);
  if (d >= 0) return {d, 1};
  for (const SpmdRule::StridedDim& s : rule.strided) {
    if (s.output == output && static_cast<size_t>(s.tensor) == t && s.factor == f) return {s.dim, s.split};
  }
  return {};
}

}  // namespace

SpmdDecision Decide(const SpmdRule& rule, const ProcessMesh& mesh, std::span<const Placements> current,
                    std::span<const Dims> shapes, std::span<const bool> annotated, DType dtype) {
  const size_t ni = rule.inputs.size(), no = rule.outputs.size();
  OAR_CHECK(current.size() == ni && shapes.size() == ni, kInternal, "SPMD {}: {} inputs given for a rule of {}",
            rule.name, current.size(), ni);
  SpmdDecision dec;
  for (size_t i = 0; i < ni; ++i) dec.inputs.push_back(current[i]);
  dec.outputs.assign(no, Placements(static_cast<size_t>(mesh.ndim()), Placement::Replicate()));
  std::string explain = rule.name + ":";
  for (size_t i = 0; i < ni; ++i) explain += " " + (current[i].empty() ? std::string("-") : PlacementsString(current[i]));
  for (int m = 0; m < mesh.ndim(); ++m) {
    const int64_t p = mesh.size(m);
    std::vector<Candidate> cands;
    // Partial passes (only where an input is Partial on this mesh dim now).
    for (const SpmdRule::PartialPass& pass : rule.partial) {
      for (ReduceOp op : pass.ops) {
        // Only where every input the pass takes as Partial already is: a replicated input is not made
        // Partial (a local step, but it defers the reduction to a later op, which then pays more for it:
        // a residual stream left Partial makes the next norm reduce-scatter and gather).
        // Except between scalars, where deferring moves no data and saves a collective per term: a sum of
        // per-parameter squared norms (gradient clipping) stays Partial and is all-reduced once, as
        // Megatron reduces the total, not once per sharded parameter.
        bool all = true, any = false, scalars = true;
        for (size_t i = 0; i < ni; ++i) {
          if (!pass.partial_inputs[i] || current[i].empty()) continue;
          const bool is = current[i][static_cast<size_t>(m)] == Placement::Partial(op);
          all &= is;
          any |= is;
          scalars &= shapes[i].empty();
        }
        if (!all && !(any && scalars)) continue;
        Candidate c{"pass " + Placement::Partial(op).ToString()};
        for (size_t i = 0; i < ni; ++i) c.in.push_back(pass.partial_inputs[i] ? Placement::Partial(op) : Placement::Replicate());
        c.out.assign(no, Placement::Partial(op));
        cands.push_back(c);
      }
    }
    for (size_t f = 0; f < rule.factor_size.size(); ++f) {
      const int fi = static_cast<int>(f);
      bool in_outputs = false, in_all_outputs = true, in_inputs = false;
      for (size_t o = 0; o < no; ++o) {
        const int d = CarrierOf(rule, true, o, fi).dim;
        in_outputs |= d >= 0;
        in_all_outputs &= d >= 0;
      }
      if (!in_outputs && !rule.contraction[f]) continue;
      if (in_outputs && !in_all_outputs) continue;
      // Shardings propagate, they are not invented: a factor is a candidate only where some input is sharded
      // on it along this mesh dim now (GSPMD's rule). Otherwise a Partial input would be reduce-scattered
      // onto a new factor because that is locally cheaper than its all_reduce, and gathered again by the
      // next op that needs it whole. An input sharded strided, Shard(d, k · s) where the rule carries the
      // factor at split s, shards the factor itself strided by k: a linear of a weight whose rows are
      // sharded by heads (Shard(0, 3)) gives an output sharded so, the split carried to every dim of f.
      std::vector<int64_t> strides;
      for (size_t i = 0; i < ni; ++i) {
        const Carrier at = CarrierOf(rule, false, i, fi);
        in_inputs |= at.dim >= 0;
        if (current[i].empty() || at.dim < 0) continue;
        const Placement& now = current[i][static_cast<size_t>(m)];
        if (!now.is_shard(at.dim) || now.split % at.split != 0) continue;
        if (std::find(strides.begin(), strides.end(), now.split / at.split) == strides.end()) {
          strides.push_back(now.split / at.split);
        }
      }
      if (!in_inputs && ni > 0) continue;
      if (ni == 0) strides.push_back(1);
      for (int64_t k : strides) {
        const int64_t size = rule.factor_size[f] / k;
        if (rule.factor_size[f] % k != 0 || rule.blocked[f] || size < p || p == 1 ||
            ((rule.even[f] || k > 1) && size % p != 0)) {
          continue;
        }
        Candidate c;
        for (size_t i = 0; i < ni; ++i) {
          const Carrier at = CarrierOf(rule, false, i, fi);
          const bool into = !in_outputs && f < rule.accumulates.size() && i < rule.accumulates[f].size() &&
                            rule.accumulates[f][i];
          c.in.push_back(at.dim >= 0 ? Placement::Shard(at.dim, at.split * k)
                         : into      ? Placement::Partial(*rule.contraction[f])
                                     : Placement::Replicate());
        }
        for (size_t o = 0; o < no; ++o) {
          const Carrier at = CarrierOf(rule, true, o, fi);
          c.out.push_back(at.dim >= 0 ? Placement::Shard(at.dim, at.split * k) : Placement::Partial(*rule.contraction[f]));
        }
        c.what = (in_outputs ? "shard factor " : "contract factor ") + std::to_string(f) +
                 (k > 1 ? " strided by " + std::to_string(k) : std::string());
        // A strided dim takes one mesh dim (CheckPlacements): no candidate puts a shard beside another mesh
        // dim's shard of the same tensor dim when either is strided — neither the current one (the costs
        // below reshard from it) nor one decided for a lower mesh dim.
        auto clashes = [&](const Placements& others, const Placement& mine) {
          for (int b = 0; b < mesh.ndim() && mine.is_shard(); ++b) {
            const Placement& o = others[static_cast<size_t>(b)];
            if (b != m && o.is_shard(mine.dim) && (o.is_strided() || mine.is_strided())) return true;
          }
          return false;
        };
        bool clash = false;
        for (size_t i = 0; i < ni; ++i) {
          clash |= !current[i].empty() && (clashes(current[i], c.in[i]) || clashes(dec.inputs[i], c.in[i]));
        }
        for (size_t o = 0; o < no; ++o) clash |= clashes(dec.outputs[o], c.out[o]);
        if (clash) continue;
        cands.push_back(c);
      }
    }
    {
      Candidate c{"replicate"};
      c.in.assign(ni, Placement::Replicate());
      c.out.assign(no, Placement::Replicate());
      cands.push_back(c);
    }
    for (size_t k = 0; k < cands.size(); ++k) {
      Candidate& c = cands[k];
      c.order = static_cast<int>(k);
      for (size_t i = 0; i < ni; ++i) {
        if (current[i].empty()) continue;
        const Placement have = current[i][static_cast<size_t>(m)];
        if (have == c.in[i]) continue;
        if (annotated[i]) ++c.violations;
        Placements want = current[i];
        want[static_cast<size_t>(m)] = c.in[i];
        for (const ReshardStep& st : PlanReshard(mesh, current[i], want, shapes[i], dtype)) c.cost += st.cost_us;
      }
    }
    const Candidate* best = &cands[0];
    for (const Candidate& c : cands) {
      if (std::tie(c.violations, c.cost, c.order) < std::tie(best->violations, best->cost, best->order)) best = &c;
    }
    for (size_t i = 0; i < ni; ++i) {
      if (!current[i].empty()) dec.inputs[i][static_cast<size_t>(m)] = best->in[i];
    }
    for (size_t o = 0; o < no; ++o) dec.outputs[o][static_cast<size_t>(m)] = best->out[o];
    explain += fmt::format("\n  mesh dim {} ({}): {} (cost {:.1f} us, {} annotation change(s)); rejected:",
                           mesh.dim_names()[static_cast<size_t>(m)], p, best->what, best->cost, best->violations);
    for (const Candidate& c : cands) {
      if (&c != best) explain += fmt::format(" {} ({:.1f} us, {})", c.what, c.cost, c.violations);
    }
  }
  explain += "\n  ->";
  for (const Placements& o : dec.outputs) explain += " " + PlacementsString(o);
  dec.explain = explain;
  AppendExplain(explain);
  return dec;
}

bool InheritsAnnotation(std::span<const Placements> current, std::span<const bool> annotated, const SpmdDecision& d) {
  int present = 0;
  bool inherit = false;
  for (size_t i = 0; i < current.size(); ++i) {
    if (current[i].empty()) continue;
    ++present;
    inherit = annotated[i] && d.inputs.at(i) == current[i];
  }
  return present == 1 && inherit;
}

ExplainScope::ExplainScope() : previous_(g_explain) { g_explain = this; }
ExplainScope::~ExplainScope() { g_explain = previous_; }

void AppendExplain(const std::string& s) {
  if (g_explain != nullptr) g_explain->text_ += s + "\n";
}

}  // namespace oar::distributed
