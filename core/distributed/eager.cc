#include "core/distributed/eager.h"

#include <algorithm>
#include <memory>

#include "core/autograd/autograd.h"
#include "core/base/error.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"

namespace oar::distributed {
namespace {

using ops::Op;

const ProcessMesh& MeshOf(std::span<const DistTensor> inputs, const std::string& what) {
  const DistTensor* first = nullptr;
  for (const DistTensor& t : inputs) {
    if (!t.defined()) continue;
    if (first == nullptr) first = &t;
    OAR_CHECK_ARG(t.mesh() == first->mesh(), "{}: inputs on different meshes ({} and {}); reshard onto one first",
                  what, first->mesh().ToString(), t.mesh().ToString());
  }
  OAR_CHECK_ARG(first != nullptr, "{}: no defined distributed input", what);
  return first->mesh();
}

ops::AttrValues Completed(const ops::OpSchema& s, ops::AttrValues attrs) {
  OAR_CHECK_ARG(attrs.size() <= s.attrs.size(), "{}: {} attributes given, the op has {}", s.name, attrs.size(),
                s.attrs.size());
  for (size_t i = attrs.size(); i < s.attrs.size(); ++i) attrs.push_back(s.attrs[i].default_value);
  return attrs;
}

// One op on one rank's tensors: views through the Tensor methods, everything else through ops::Run.
std::vector<Tensor> RunLocal(Op op, std::span<const Tensor> in, const ops::AttrValues& a) {
  auto i64 = [&](size_t i) { return std::get<int64_t>(a[i]); };
  auto ints = [&](size_t i) { return std::get<std::vector<int64_t>>(a[i]); };
  switch (op) {
    case Op::kView:
      return {in[0].reshape(Dims(ints(0)))};
    case Op::kPermute:
      return {in[0].permute(ints(0))};
    case Op::kSlice:
      return {in[0].slice(i64(0), i64(1), i64(2), i64(3))};
    case Op::kExpand:
      return {in[0].expand(Dims(ints(0)))};
    case Op::kSqueeze:
      return {in[0].squeeze(i64(0))};
    case Op::kUnsqueeze:
      return {in[0].unsqueeze(i64(0))};
    case Op::kClone:
      return {in[0].clone()};
    case Op::kSliceScatter:
      return {oar::SliceScatter(in[0], Dims(ints(0)), i64(1), i64(2), i64(3), i64(4))};
    default:
      return ops::Run(op, in, a);
  }
}

// Attributes that hold an output shape are given each rank's local shape.
bool IsShapeAttr(std::string_view name) { return name == "shape" || name == "input_shape" || name == "weight_shape"; }

DistTensor One(std::vector<DistTensor> v) { return std::move(v.at(0)); }

}  // namespace

std::vector<DistTensor> Execute(const SpmdRule& rule, std::span<const DistTensor> inputs,
                                const std::vector<Dims>& out_shapes, const LocalFn& local) {
  const ProcessMesh& mesh = MeshOf(inputs, rule.name);
  std::vector<Placements> current;
  std::vector<Dims> shapes;
  std::vector<char> annotated;
  DType dtype = DType::kFloat32;
  for (const DistTensor& t : inputs) {
    current.push_back(t.defined() ? t.placements() : Placements());
    shapes.push_back(t.defined() ? t.shape() : Dims());
    annotated.push_back(t.defined() && t.annotated());
    if (t.defined() && IsFloating(t.dtype())) dtype = t.dtype();
  }
  const std::unique_ptr<bool[]> ann(new bool[annotated.size() + 1]);
  for (size_t i = 0; i < annotated.size(); ++i) ann[i] = annotated[i] != 0;
  const SpmdDecision dec = Decide(rule, mesh, current, shapes, {ann.get(), annotated.size()}, dtype);
  std::vector<DistTensor> ready;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ready.push_back(inputs[i].defined() ? Reshard(inputs[i], dec.inputs[i]) : DistTensor());
  }
  std::vector<std::vector<Tensor>> outs(out_shapes.size(), std::vector<Tensor>(static_cast<size_t>(mesh.numel())));
  for (int64_t r = 0; r < mesh.numel(); ++r) {
    if (!mesh.is_local(r)) continue;  // another process runs it
    std::vector<Tensor> locals;
    for (const DistTensor& t : ready) locals.push_back(t.defined() ? t.local(r) : Tensor());
    std::vector<Dims> local_shapes;
    for (size_t o = 0; o < out_shapes.size(); ++o) {
      local_shapes.push_back(RegionOf(mesh, dec.outputs[o], out_shapes[o], r).shape);
    }
    std::vector<Tensor> res = local({r, locals, dec, local_shapes});
    OAR_CHECK(res.size() >= out_shapes.size(), kInternal, "{}: the local call returned {} results for {} outputs",
              rule.name, res.size(), out_shapes.size());
    for (size_t o = 0; o < out_shapes.size(); ++o) outs[o][static_cast<size_t>(r)] = res[o];
  }
  std::vector<DistTensor> result;
  for (size_t o = 0; o < out_shapes.size(); ++o) {
    result.emplace_back(mesh, dec.outputs[o], out_shapes[o], std::move(outs[o]));
    result.back().set_annotated(InheritsAnnotation(current, {ann.get(), annotated.size()}, dec));
  }
  return result;
}

std::vector<DistTensor> Apply(ops::Op op, std::span<const DistTensor> inputs, ops::AttrValues attrs) {
  const ops::OpSchema& s = ops::Schema(op);
  attrs = Completed(s, std::move(attrs));
  std::vector<ops::TensorMeta> metas;
  for (const DistTensor& t : inputs) {
    OAR_CHECK_ARG(t.defined(), "{}: an input is undefined", s.name);
    metas.push_back({t.dtype(), t.shape()});
  }
  const SpmdRule rule = SpmdRuleFor(op, metas, attrs);
  std::vector<Dims> out_shapes;
  for (const ops::TensorMeta& m : s.Infer(metas, attrs)) out_shapes.push_back(m.shape);
  return Execute(rule, inputs, out_shapes, [&](const LocalCall& c) {
    ops::AttrValues local = attrs;
    for (size_t i = 0; i < s.attrs.size(); ++i) {
      if (IsShapeAttr(s.attrs[i].name) && !c.out_shapes.empty()) {
        const Dims& d = c.out_shapes[0];
        local[i] = std::vector<int64_t>(d.begin(), d.end());
      }
    }
    return RunLocal(op, c.locals, local);
  });
}

DistTensor add(const DistTensor& a, const DistTensor& b) { return One(Apply(Op::kAdd, std::vector{a, b})); }
DistTensor sub(const DistTensor& a, const DistTensor& b) { return One(Apply(Op::kSub, std::vector{a, b})); }
DistTensor mul(const DistTensor& a, const DistTensor& b) { return One(Apply(Op::kMul, std::vector{a, b})); }
DistTensor div(const DistTensor& a, const DistTensor& b) { return One(Apply(Op::kDiv, std::vector{a, b})); }
DistTensor matmul(const DistTensor& a, const DistTensor& b) { return One(Apply(Op::kMatmul, std::vector{a, b})); }
DistTensor sum(const DistTensor& x, std::vector<int64_t> axes, bool keepdim) {
  return One(Apply(Op::kSum, std::vector{x}, {axes, keepdim}));
}
DistTensor mean(const DistTensor& x, std::vector<int64_t> axes, bool keepdim) {
  return One(Apply(Op::kMean, std::vector{x}, {axes, keepdim}));
}
DistTensor amax(const DistTensor& x, std::vector<int64_t> axes, bool keepdim) {
  return One(Apply(Op::kMax, std::vector{x}, {axes, keepdim}));
}
DistTensor softmax(const DistTensor& x, int64_t axis) { return One(Apply(Op::kSoftmax, std::vector{x}, {axis})); }
DistTensor reshape(const DistTensor& x, const Dims& shape) {
  return One(Apply(Op::kView, std::vector{x}, {std::vector<int64_t>(shape.begin(), shape.end())}));
}
DistTensor transpose(const DistTensor& x, int64_t d0, int64_t d1) {
  std::vector<int64_t> perm(static_cast<size_t>(x.rank()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  d0 = d0 < 0 ? d0 + x.rank() : d0;
  d1 = d1 < 0 ? d1 + x.rank() : d1;
  std::swap(perm.at(static_cast<size_t>(d0)), perm.at(static_cast<size_t>(d1)));
  return One(Apply(Op::kPermute, std::vector{x}, {perm}));
}
DistTensor slice(const DistTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = dim < 0 ? dim + x.rank() : dim;
  const int64_t n = x.shape()[static_cast<int>(dim)];
  start = std::clamp<int64_t>(start < 0 ? start + n : start, 0, n);
  end = std::clamp<int64_t>(end < 0 ? end + n : end, start, n);
  return One(Apply(Op::kSlice, std::vector{x}, {dim, start, end, step}));
}
DistTensor concat(std::span<const DistTensor> xs, int64_t axis) { return One(Apply(Op::kConcat, xs, {axis})); }
DistTensor relu(const DistTensor& x) { return One(Apply(Op::kRelu, std::vector{x})); }

DistTensor silu(const DistTensor& x) {
  const Dims shapes[1] = {x.shape()};
  return One(Execute(ElementwiseRule("silu", shapes, false), std::vector{x}, {x.shape()},
                     [](const LocalCall& c) { return std::vector<Tensor>{oar::silu(c.locals[0])}; }));
}

DistTensor linear(const DistTensor& x, const DistTensor& w, const DistTensor& bias) {
  OAR_CHECK_ARG(x.rank() >= 1 && w.rank() == 2 && x.shape()[x.rank() - 1] == w.shape()[1],
                "linear: x {} and weight {} do not fit (weight is [out, in])", x.shape().ToString(),
                w.shape().ToString());
  Dims out = x.shape();
  out[out.size() - 1] = w.shape()[0];
  if (bias.defined()) {
    // Row-parallel (the contraction sharded on some mesh dim): the product is Partial(sum) and the bias
    // is added once, after it — one all_reduce — rather than gathering x and w so that the fused rule
    // (which cannot add a bias to a partial) applies.
    bool contracted = false;
    for (int m = 0; m < x.mesh().ndim(); ++m) {
      contracted |= x.placements()[static_cast<size_t>(m)].is_shard(x.rank() - 1) ||
                    w.placements()[static_cast<size_t>(m)].is_shard(1);
    }
    if (contracted) return add(linear(x, w, DistTensor()), bias);
  }
  std::vector<DistTensor> in{x, w};
  if (bias.defined()) in.push_back(bias);
  return One(Execute(LinearRule(x.shape(), w.shape(), bias.defined()), in, {out}, [](const LocalCall& c) {
    return std::vector<Tensor>{oar::linear(c.locals[0], c.locals[1], c.locals.size() > 2 ? c.locals[2] : Tensor())};
  }));
}

DistTensor rms_norm(const DistTensor& x, int normalized_ndim, const DistTensor& weight, double eps) {
  std::vector<DistTensor> in{x};
  if (weight.defined()) in.push_back(weight);
  return One(Execute(NormRule("rms_norm", x.shape(), normalized_ndim, weight.defined() ? 1 : 0), in, {x.shape()},
                     [=](const LocalCall& c) {
                       return std::vector<Tensor>{
                           oar::rms_norm(c.locals[0], normalized_ndim, c.locals.size() > 1 ? c.locals[1] : Tensor(), eps)};
                     }));
}

DistTensor layer_norm(const DistTensor& x, int normalized_ndim, const DistTensor& weight, const DistTensor& bias,
                      double eps) {
  return One(Execute(NormRule("layer_norm", x.shape(), normalized_ndim, 2), std::vector{x, weight, bias}, {x.shape()},
                     [=](const LocalCall& c) {
                       return std::vector<Tensor>{oar::layer_norm(c.locals[0], normalized_ndim, c.locals[1], c.locals[2], eps)};
                     }));
}

DistTensor embedding(const DistTensor& weight, const DistTensor& indices) {
  OAR_CHECK_ARG(weight.rank() == 2, "embedding: weight must be [num_embeddings, dim], got {}", weight.shape().ToString());
  Dims out = indices.shape();
  out.push_back(weight.shape()[1]);
  const ProcessMesh mesh = weight.mesh();
  const Dims wshape = weight.shape();
  return One(Execute(EmbeddingRule(weight.shape(), indices.shape()), std::vector{weight, indices}, {out},
                     [mesh, wshape](const LocalCall& c) {
                       const Tensor& w = c.locals[0];
                       const Tensor& idx = c.locals[1];
                       if (w.dim(0) == wshape[0]) return std::vector<Tensor>{oar::embedding(w, idx)};
                       // Vocabulary-parallel: this rank holds rows [off, off + n); others give zeros.
                       const LocalRegion reg = RegionOf(mesh, c.decision.inputs[0], wshape, c.rank);
                       const int64_t off = reg.offset[0], n = reg.shape[0];
                       if (n == 0) return std::vector<Tensor>{zeros(c.out_shapes[0], w.dtype(), w.device())};
                       const Tensor shifted = idx - static_cast<double>(off);
                       const Tensor inside = logical_and(ge(shifted, zeros_like(shifted)),
                                                         lt(shifted, full_like(shifted, static_cast<double>(n))));
                       const Tensor safe = where(inside, shifted, zeros_like(shifted));
                       return std::vector<Tensor>{oar::embedding(w, safe) * cast(inside, w.dtype()).unsqueeze(-1)};
                     }));
}

DistTensor cross_entropy(const DistTensor& logits, const DistTensor& target) {
  OAR_CHECK_ARG(logits.rank() == 2 && target.rank() == 1 && target.shape()[0] == logits.shape()[0],
                "cross_entropy: expected logits [N, C] and target [N], got {} and {}", logits.shape().ToString(),
                target.shape().ToString());
  SpmdRule rule = CrossEntropyRule(logits.shape(), target.shape());
  rule.outputs = {{-1}};  // [sum of losses, count], reduced below
  DistTensor parts = One(Execute(rule, std::vector{logits, target}, {Dims{2}}, [](const LocalCall& c) {
    const Tensor logp = log_softmax(c.locals[0], 1);
    const Tensor total = neg(sum(gather(logp, 1, c.locals[1].unsqueeze(1))));
    const Tensor count = full({}, static_cast<double>(c.locals[0].dim(0)), logp.dtype(), logp.device());
    const Tensor both[2] = {total.reshape({1}), count.reshape({1})};
    return std::vector<Tensor>{oar::concat(both, 0)};
  }));
  parts = Reshard(parts, Placements(static_cast<size_t>(parts.mesh().ndim()), Placement::Replicate()));
  std::vector<Tensor> loss;
  for (const Tensor& p : parts.locals()) {
    loss.push_back(!p.defined() ? Tensor()
                                : (p.slice(0, 0, 1) / maximum(p.slice(0, 1, 2), full_like(p.slice(0, 1, 2), 1.0))).reshape({}));
  }
  return DistTensor(parts.mesh(), parts.placements(), Dims{}, loss);
}

DistTensor scaled_dot_product_attention(const DistTensor& q, const DistTensor& k, const DistTensor& v, bool causal) {
  return One(Execute(AttentionRule(q.shape(), k.shape(), v.shape()), std::vector{q, k, v}, {q.shape()},
                     [causal](const LocalCall& c) {
                       return std::vector<Tensor>{
                           oar::scaled_dot_product_attention(c.locals[0], c.locals[1], c.locals[2], causal)};
                     }));
}

DistTensor rotary_embedding(const DistTensor& x) {
  return One(Execute(NormRule("rotary_embedding", x.shape(), 2, 0), std::vector{x}, {x.shape()}, [](const LocalCall& c) {
    return std::vector<Tensor>{oar::rotary_embedding(c.locals[0])};
  }));
}

namespace {
Placements WithMeshDim(const DistTensor& x, int mesh_dim, Placement p, const char* what) {
  OAR_CHECK_ARG(x.defined(), "{}: undefined input", what);
  OAR_CHECK_ARG(mesh_dim >= 0 && mesh_dim < x.mesh().ndim(), "{}: mesh dim {} is not one of the {} dims of {}", what,
                mesh_dim, x.mesh().ndim(), x.mesh().ToString());
  Placements out = x.placements();
  out[static_cast<size_t>(mesh_dim)] = p;
  return out;
}
}  // namespace

DistTensor GatherSequence(const DistTensor& x, int mesh_dim) {
  const Placements to = WithMeshDim(x, mesh_dim, Placement::Replicate(), "GatherSequence");
  const Placement& p = x.placements()[static_cast<size_t>(mesh_dim)];
  OAR_CHECK_ARG(p.is_shard() && !p.is_strided(),
                "GatherSequence: expected the sequence-parallel activation sharded on mesh dim {} ({}), got {}",
                mesh_dim, x.mesh().dim_names()[static_cast<size_t>(mesh_dim)], x.ToString());
  return Reshard(x, to);
}

DistTensor ScatterSequence(const DistTensor& x, int mesh_dim, int64_t seq_dim) {
  const Placements to = WithMeshDim(x, mesh_dim, Placement::Shard(seq_dim), "ScatterSequence");
  OAR_CHECK_ARG(seq_dim >= 0 && seq_dim < x.rank(), "ScatterSequence: sequence dim {} of a rank-{} tensor", seq_dim,
                x.rank());
  const Placement& p = x.placements()[static_cast<size_t>(mesh_dim)];
  OAR_CHECK_ARG(p.is_replicate() || (p.is_partial() && p.reduce == runtime::ReduceOp::kSum),
                "ScatterSequence: expected a row-parallel product (Partial(sum)) or a replicated tensor on mesh dim "
                "{} ({}), got {}",
                mesh_dim, x.mesh().dim_names()[static_cast<size_t>(mesh_dim)], x.ToString());
  for (size_t m = 0; m < to.size(); ++m) {
    OAR_CHECK_ARG(static_cast<int>(m) == mesh_dim || !to[m].is_shard(seq_dim),
                  "ScatterSequence: the sequence dim {} is already sharded on mesh dim {} of {}", seq_dim, m,
                  x.ToString());
  }
  return Reshard(x, to);
}

void Backward(const DistTensor& loss) {
  OAR_CHECK_ARG(loss.defined() && loss.shape().Product() == 1,
                "Backward: the loss must be a scalar DistTensor, got {}", loss.defined() ? loss.ToString() : "undefined");
  const ProcessMesh& mesh = loss.mesh();
  std::vector<Tensor> roots, seeds;
  for (int64_t r = 0; r < mesh.numel(); ++r) {
    if (!mesh.is_local(r)) continue;
    double seed = 1;
    const std::vector<int64_t> c = mesh.Coord(r);
    for (int m = 0; m < mesh.ndim(); ++m) {
      const Placement& p = loss.placements()[static_cast<size_t>(m)];
      OAR_CHECK_ARG(!p.is_partial() || p.reduce == runtime::ReduceOp::kSum || p.reduce == runtime::ReduceOp::kAvg,
                    "Backward: a Partial({}) loss has no gradient here; reshard it first", p.ToString());
      if (p.is_replicate() && c[static_cast<size_t>(m)] != 0) seed = 0;
      if (p.is_partial() && p.reduce == runtime::ReduceOp::kAvg) seed /= static_cast<double>(mesh.size(m));
    }
    const Tensor& l = loss.local(r);
    // With one rank per process every process runs its backward (seeded 0 off the seeding ranks): the
    // collectives' adjoints are collectives its peers wait for.
    if ((seed == 0 && !mesh.multi_process()) || !l.requires_grad()) continue;
    roots.push_back(l);
    seeds.push_back(full(l.shape(), seed, l.dtype(), l.device()));
  }
  OAR_CHECK_ARG(!roots.empty(), "Backward: the loss does not require grad on any rank");
  oar::backward(roots, seeds);
}

}  // namespace oar::distributed
