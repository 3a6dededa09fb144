#include "core/distributed/dist_tensor.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>

#include "core/autograd/autograd.h"
#include "core/base/error.h"
#include "core/distributed/collectives.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"

namespace oar::distributed {
namespace {

using Kind = Placement::Kind;

// Cost model (microseconds; torch DTensor's intra-host figures): a collective over p ranks of b bytes
// per rank costs kBase + hops * kHop + transferred / kBandwidth.
constexpr double kBase = 6.6, kHop = 0.6, kBandwidth = 87.7e3 /* bytes per us */, kLocal = 0.1;

bool ShardedLater(const Placements& p, int dim, int64_t tensor_dim) {
  for (size_t b = static_cast<size_t>(dim) + 1; b < p.size(); ++b) {
    if (p[b].is_shard(tensor_dim)) return true;
  }
  return false;
}

int64_t LocalNumel(const ProcessMesh& mesh, const Placements& p, const Dims& shape) {
  return RegionOf(mesh, p, shape, 0).shape.Product();  // rank 0 holds the largest block
}

std::vector<int64_t> FrontPerm(int64_t rank, int64_t d) {
  std::vector<int64_t> p{d};
  for (int64_t i = 0; i < rank; ++i) {
    if (i != d) p.push_back(i);
  }
  return p;
}
std::vector<int64_t> Inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return inv;
}

Tensor PadTo(const Tensor& x, int64_t d, int64_t size) {
  if (x.dim(d) == size) return x;
  Dims zs = x.shape();
  zs[static_cast<int>(d)] = size - x.dim(d);
  const Tensor parts[2] = {x, zeros(zs, x.dtype(), x.device())};
  return concat(parts, d);
}

// S(d) -> R along mesh dim m.
// `shapes[r]`: rank r's local shape (known for every rank; with one rank per process only the local
// tensors are defined).
std::vector<Tensor> GatherShards(const ProcessMesh& mesh, int m, int64_t d, const std::vector<Tensor>& locals,
                                 const std::vector<Dims>& shapes) {
  const int64_t p = mesh.size(m), rank = shapes[0].size();
  const std::vector<int64_t> perm = FrontPerm(rank, d), inv = Inverse(perm);
  std::vector<Tensor> in(locals.size());
  std::vector<std::vector<int64_t>> sizes(locals.size());
  for (size_t r = 0; r < locals.size(); ++r) {
    if (!mesh.is_local(static_cast<int64_t>(r))) continue;
    int64_t c = 0;
    for (int64_t q : mesh.GroupAlong(static_cast<int64_t>(r), m)) {
      sizes[r].push_back(shapes[static_cast<size_t>(q)][static_cast<int>(d)]);
      c = std::max(c, sizes[r].back());
    }
    in[r] = PadTo(locals[r], d, c).permute(perm).contiguous();
  }
  std::vector<Tensor> g = AllGatherAlong(mesh, m, in);
  std::vector<Tensor> out(locals.size());
  for (size_t r = 0; r < locals.size(); ++r) {
    if (!mesh.is_local(static_cast<int64_t>(r))) continue;
    const int64_t c = g[r].dim(1);
    bool even = true;
    for (int64_t s : sizes[r]) even &= s == c;
    Dims merged = g[r].shape();
    merged.erase(0);
    merged[0] = c * p;
    Tensor whole;
    if (even) {
      whole = g[r].reshape(merged);
    } else {
      std::vector<Tensor> pieces;
      for (int64_t i = 0; i < p; ++i) {
        pieces.push_back(g[r].slice(0, i, i + 1).squeeze(0).slice(0, 0, sizes[r][static_cast<size_t>(i)]));
      }
      whole = concat(pieces, 0);
    }
    out[r] = whole.permute(inv).contiguous();
  }
  return out;
}

// P(op) -> S(d) along mesh dim m, op sum or avg.
std::vector<Tensor> ScatterPartial(const ProcessMesh& mesh, int m, int64_t d, const std::vector<Tensor>& locals,
                                   runtime::ReduceOp op) {
  const int64_t p = mesh.size(m), rank = locals[static_cast<size_t>(mesh.first_local())].rank();
  const std::vector<int64_t> perm = FrontPerm(rank, d), inv = Inverse(perm);
  std::vector<Tensor> in(locals.size());
  for (size_t r = 0; r < locals.size(); ++r) {
    if (!mesh.is_local(static_cast<int64_t>(r))) continue;
    const int64_t n = locals[r].dim(d), c = ShardSize(n, p, 0);
    Tensor x = locals[r];
    if (n % p != 0) {  // piece k (at its balanced offset) padded to c: block k of the reduce_scatter
      std::vector<Tensor> pieces;
      for (int64_t k = 0; k < p; ++k) {
        const int64_t off = ShardOffset(n, p, k);
        pieces.push_back(PadTo(x.slice(d, off, off + ShardSize(n, p, k)), d, c));
      }
      x = concat(pieces, d);
    }
    x = x.permute(perm).contiguous();
    Dims s = x.shape();
    s[0] = c;
    s.insert(0, p);
    in[r] = x.reshape(s);
  }
  std::vector<Tensor> got = ReduceScatterAlong(mesh, m, in, op);
  std::vector<Tensor> out(locals.size());
  for (size_t r = 0; r < locals.size(); ++r) {
    if (!mesh.is_local(static_cast<int64_t>(r))) continue;
    const int64_t n = locals[r].dim(d);
    const int64_t i = mesh.Coord(static_cast<int64_t>(r))[static_cast<size_t>(m)];
    out[r] = got[r].slice(0, 0, ShardSize(n, p, i)).permute(inv).contiguous();
  }
  return out;
}

// S(i) -> S(j) along mesh dim m.
std::vector<Tensor> SwapShards(const ProcessMesh& mesh, int m, int64_t i, int64_t j, const std::vector<Tensor>& locals) {
  const int64_t p = mesh.size(m);
  std::vector<std::vector<Tensor>> chunks(locals.size());
  for (size_t r = 0; r < locals.size(); ++r) {
    if (!mesh.is_local(static_cast<int64_t>(r))) continue;
    const int64_t n = locals[r].dim(j);
    for (int64_t k = 0; k < p; ++k) {
      const int64_t off = ShardOffset(n, p, k);
      chunks[r].push_back(locals[r].slice(j, off, off + ShardSize(n, p, k)).contiguous());
    }
  }
  const std::vector<std::vector<Tensor>> got = AllToAllAlong(mesh, m, chunks);
  std::vector<Tensor> out(locals.size());
  for (size_t r = 0; r < locals.size(); ++r) {
    if (mesh.is_local(static_cast<int64_t>(r))) out[r] = concat(got[r], i).contiguous();
  }
  return out;
}

std::vector<Tensor> SliceShards(const ProcessMesh& mesh, int m, int64_t d, const std::vector<Tensor>& locals) {
  const int64_t p = mesh.size(m);
  std::vector<Tensor> out(locals.size());
  for (size_t r = 0; r < locals.size(); ++r) {
    if (!mesh.is_local(static_cast<int64_t>(r))) continue;
    const int64_t n = locals[r].dim(d), c = mesh.Coord(static_cast<int64_t>(r))[static_cast<size_t>(m)];
    const int64_t off = ShardOffset(n, p, c);
    out[r] = locals[r].slice(d, off, off + ShardSize(n, p, c)).contiguous();
  }
  return out;
}

// A strided dim d (Shard(d, k)) as two: [.., k, n / k, ..] (Unfold) and back (Fold); the pieces of a strided
// shard are then a plain shard of dim d + 1.
Tensor Unfold(const Tensor& x, int64_t d, int64_t k) {
  Dims s = x.shape();
  s[static_cast<int>(d)] /= k;
  s.insert(static_cast<int>(d), k);
  return x.reshape(s);
}
Tensor Fold(const Tensor& x, int64_t d) {
  Dims s = x.shape();
  s[static_cast<int>(d)] *= s[static_cast<int>(d) + 1];
  s.erase(static_cast<int>(d) + 1);
  return x.reshape(s);
}
std::vector<Tensor> Unfold(const ProcessMesh& mesh, const std::vector<Tensor>& locals, int64_t d, int64_t k) {
  std::vector<Tensor> out(locals.size());
  for (size_t r = 0; r < locals.size(); ++r) {
    if (mesh.is_local(static_cast<int64_t>(r))) out[r] = Unfold(locals[r], d, k);
  }
  return out;
}
std::vector<Tensor> Fold(const ProcessMesh& mesh, std::vector<Tensor> locals, int64_t d) {
  for (size_t r = 0; r < locals.size(); ++r) {
    if (mesh.is_local(static_cast<int64_t>(r))) locals[r] = Fold(locals[r], d).contiguous();
  }
  return locals;
}

// S(d, k) -> R along mesh dim m: the chunks' pieces gathered as a plain shard of the unfolded dim.
std::vector<Tensor> GatherStrided(const ProcessMesh& mesh, int m, int64_t d, int64_t k, const std::vector<Tensor>& locals,
                                  std::vector<Dims> shapes) {
  for (Dims& s : shapes) {
    s[static_cast<int>(d)] /= k;
    s.insert(static_cast<int>(d), k);
  }
  return Fold(mesh, GatherShards(mesh, m, d + 1, Unfold(mesh, locals, d, k), shapes), d);
}

std::vector<Tensor> MakePartial(const ProcessMesh& mesh, int m, runtime::ReduceOp op, const std::vector<Tensor>& locals) {
  std::vector<Tensor> out = locals;
  if (op != runtime::ReduceOp::kSum) return out;  // avg, max, min of equal values are the value
  for (size_t r = 0; r < locals.size(); ++r) {
    if (!mesh.is_local(static_cast<int64_t>(r))) continue;
    if (mesh.Coord(static_cast<int64_t>(r))[static_cast<size_t>(m)] != 0) out[r] = zeros_like(locals[r]);
  }
  return out;
}

std::vector<Tensor> RunStep(const ProcessMesh& mesh, const ReshardStep& s, const std::vector<Tensor>& locals,
                            const std::vector<Dims>& shapes) {
  const int m = s.dim;
  if (s.collective == "all_gather" && s.from.is_strided()) {
    return GatherStrided(mesh, m, s.from.dim, s.from.split, locals, shapes);
  }
  if (s.collective == "all_gather") return GatherShards(mesh, m, s.from.dim, locals, shapes);
  if (s.collective == "slice" && s.to.is_strided()) {
    return Fold(mesh, SliceShards(mesh, m, s.to.dim + 1, Unfold(mesh, locals, s.to.dim, s.to.split)), s.to.dim);
  }
  if (s.collective == "all_reduce") return AllReduceAlong(mesh, m, locals, s.from.reduce);
  if (s.collective == "reduce_scatter") return ScatterPartial(mesh, m, s.to.dim, locals, s.from.reduce);
  if (s.collective == "all_to_all") return SwapShards(mesh, m, s.from.dim, s.to.dim, locals);
  if (s.collective == "slice") return SliceShards(mesh, m, s.to.dim, locals);
  if (s.collective == "partial") return MakePartial(mesh, m, s.to.reduce, locals);
  Throw(ErrorCode::kInternal, "reshard: unknown step '{}'", s.collective);
}

}  // namespace

DistTensor::DistTensor(ProcessMesh mesh, Placements placements, Dims global_shape, std::vector<Tensor> locals)
    : mesh_(std::move(mesh)), shape_(global_shape), locals_(std::move(locals)) {
  placements_ = CheckPlacements(mesh_, placements, shape_.size(), "DistTensor", &shape_);
  OAR_CHECK_ARG(static_cast<int64_t>(locals_.size()) == mesh_.numel(), "DistTensor: {} local tensors for a mesh of {}",
                locals_.size(), mesh_.numel());
  const Tensor& first = locals_[static_cast<size_t>(mesh_.first_local())];
  for (size_t r = 0; r < locals_.size(); ++r) {
    const Tensor& t = locals_[r];
    if (!mesh_.is_local(static_cast<int64_t>(r))) {
      OAR_CHECK_ARG(!t.defined(), "DistTensor: rank {} runs in another process; its local tensor must be undefined", r);
      continue;
    }
    OAR_CHECK_ARG(t.defined(), "DistTensor: the local tensor of rank {} is undefined", r);
    const Dims want = RegionOf(mesh_, placements_, shape_, static_cast<int64_t>(r)).shape;
    OAR_CHECK_ARG(t.shape() == want,
                  "DistTensor: rank {} holds shape {}, but global shape {} with placements {} on {} gives it {}", r,
                  t.shape().ToString(), shape_.ToString(), PlacementsString(placements_), mesh_.ToString(),
                  want.ToString());
    OAR_CHECK_ARG(t.device() == mesh_.devices()[r], "DistTensor: the local tensor of rank {} is on {}, expected {}", r,
                  t.device().str(), mesh_.devices()[r].str());
    OAR_CHECK_ARG(t.dtype() == first.dtype(), "DistTensor: rank {} has dtype {}, rank {} has {}", r,
                  DTypeName(t.dtype()), mesh_.first_local(), DTypeName(first.dtype()));
  }
}

std::string DistTensor::ToString() const {
  return "DistTensor(shape " + shape_.ToString() + ", " + PlacementsString(placements_) + ", " + mesh_.ToString() + ")";
}

bool DistTensor::requires_grad() const {
  return defined() && locals_[static_cast<size_t>(mesh_.first_local())].requires_grad();
}

DistTensor& DistTensor::set_requires_grad(bool value) {
  for (Tensor& t : locals_) {
    if (t.defined()) t.set_requires_grad(value);
  }
  return *this;
}

DistTensor DistTensor::grad() const {
  bool any = false;
  for (const Tensor& t : locals_) any |= t.defined() && t.grad().defined();
  // With one rank per process, a rank whose backward reached nothing still joins the reductions below.
  if (!any && !mesh_.multi_process()) return {};
  NoGradGuard no_grad;
  std::vector<Tensor> g;
  for (const Tensor& t : locals_) {
    g.push_back(!t.defined()         ? Tensor()
                : t.grad().defined() ? t.grad()
                                     : zeros(t.shape(), t.dtype(), t.device()));
  }
  Placements out = placements_;
  for (int m = 0; m < mesh_.ndim(); ++m) {
    if (placements_[static_cast<size_t>(m)].is_replicate()) g = AllReduceAlong(mesh_, m, g, runtime::ReduceOp::kSum);
    if (placements_[static_cast<size_t>(m)].is_partial()) out[static_cast<size_t>(m)] = Placement::Replicate();
  }
  return DistTensor(mesh_, out, shape_, g);
}

void DistTensor::zero_grad() {
  for (Tensor& t : locals_) {
    if (t.defined()) t.zero_grad();
  }
}

DistTensor DistTensor::detach() const {
  std::vector<Tensor> d;
  for (const Tensor& t : locals_) d.push_back(t.defined() ? t.detach() : Tensor());
  return DistTensor(mesh_, placements_, shape_, d);
}

DistTensor shard_tensor(const Tensor& global, const ProcessMesh& mesh, const Placements& placements) {
  OAR_CHECK_ARG(global.defined(), "shard_tensor: the tensor is undefined");
  const Placements p = CheckPlacements(mesh, placements, global.rank(), "shard_tensor", &global.shape());
  std::vector<Tensor> locals;
  for (int64_t r = 0; r < mesh.numel(); ++r) {
    if (!mesh.is_local(r)) {
      locals.emplace_back();
      continue;
    }
    const LocalRegion reg = RegionOf(mesh, p, global.shape(), r);
    Tensor t = global;
    for (int d = 0; d < global.rank(); ++d) {
      if (reg.shape[d] == global.dim(d)) continue;
      int64_t k = 1;
      for (const Placement& pl : p) k = pl.is_shard(d) ? pl.split : k;
      t = k == 1 ? t.slice(d, reg.offset[d], reg.offset[d] + reg.shape[d])
                 : Fold(Unfold(t, d, k).slice(d + 1, reg.offset[d], reg.offset[d] + reg.shape[d] / k), d);
    }
    t = CopyToDevice(t, mesh.devices()[static_cast<size_t>(r)]).contiguous();
    if (t.device() == global.device() && t.storage() == global.storage()) t = t.clone();
    const std::vector<int64_t> c = mesh.Coord(r);
    for (int m = 0; m < mesh.ndim(); ++m) {
      const Placement& pl = p[static_cast<size_t>(m)];
      if (pl.is_partial() && pl.reduce == runtime::ReduceOp::kSum && c[static_cast<size_t>(m)] != 0) t = zeros_like(t);
    }
    locals.push_back(t);
  }
  DistTensor out(mesh, p, global.shape(), std::move(locals));
  out.set_annotated(true);
  return out;
}

double StepCost(const ProcessMesh& mesh, const ReshardStep& step, const Placements& state, const Dims& global_shape,
                DType dtype) {
  const double p = static_cast<double>(mesh.size(step.dim));
  const double bytes = static_cast<double>(LocalNumel(mesh, state, global_shape)) * static_cast<double>(DTypeSize(dtype));
  if (p <= 1 || step.collective == "slice" || step.collective == "partial") return kLocal;
  if (step.collective == "all_gather") return kBase + (p - 1) * kHop + bytes * (p - 1) / kBandwidth;
  if (step.collective == "reduce_scatter") return kBase + (p - 1) * kHop + bytes * (p - 1) / p / kBandwidth;
  if (step.collective == "all_reduce") return kBase + 2 * (p - 1) * kHop + 2 * bytes * (p - 1) / p / kBandwidth;
  if (step.collective == "all_to_all") return kBase + (p - 1) * kHop + bytes * (p - 1) / p / kBandwidth + 1;
  Throw(ErrorCode::kInternal, "reshard: no cost for '{}'", step.collective);
}

std::vector<ReshardStep> PlanReshard(const ProcessMesh& mesh, const Placements& from_in, const Placements& to_in,
                                     const Dims& global_shape, DType dtype) {
  const int64_t rank = global_shape.size();
  const Placements from = CheckPlacements(mesh, from_in, rank, "reshard (source)", &global_shape);
  const Placements to = CheckPlacements(mesh, to_in, rank, "reshard (target)", &global_shape);
  if (from == to) return {};
  struct Visit {
    double cost;
    Placements state;
    bool operator>(const Visit& o) const { return cost > o.cost || (cost == o.cost && o.state < state); }
  };
  std::map<Placements, double> best{{from, 0.0}};
  std::map<Placements, std::pair<Placements, ReshardStep>> prev;
  std::priority_queue<Visit, std::vector<Visit>, std::greater<Visit>> queue;
  queue.push({0.0, from});
  while (!queue.empty()) {
    const Visit v = queue.top();
    queue.pop();
    if (v.cost > best[v.state]) continue;
    if (v.state == to) break;
    for (int m = 0; m < mesh.ndim(); ++m) {
      const Placement cur = v.state[static_cast<size_t>(m)];
      std::vector<std::pair<Placement, std::string>> moves;
      if (cur.is_partial()) {
        moves.emplace_back(Placement::Replicate(), "all_reduce");
        if (cur.reduce == runtime::ReduceOp::kSum || cur.reduce == runtime::ReduceOp::kAvg) {
          for (int64_t d = 0; d < rank; ++d) moves.emplace_back(Placement::Shard(d), "reduce_scatter");
        }
      } else if (cur.is_shard()) {
        if (ShardedLater(v.state, m, cur.dim)) continue;  // an inner mesh dim splits this piece: undo it first
        moves.emplace_back(Placement::Replicate(), "all_gather");
        for (int64_t d = 0; d < rank && !cur.is_strided(); ++d) {  // a strided shard changes through R
          if (d != cur.dim) moves.emplace_back(Placement::Shard(d), "all_to_all");
        }
      } else {
        for (int64_t d = 0; d < rank; ++d) moves.emplace_back(Placement::Shard(d), "slice");
        if (to[static_cast<size_t>(m)].is_strided()) moves.emplace_back(to[static_cast<size_t>(m)], "slice");
        if (to[static_cast<size_t>(m)].is_partial()) moves.emplace_back(to[static_cast<size_t>(m)], "partial");
      }
      for (const auto& [next, collective] : moves) {
        if (next.is_shard() && ShardedLater(v.state, m, next.dim)) continue;
        if (next.is_shard()) {
          bool taken = false;  // two mesh dims on one tensor dim: the new one must be the innermost
          for (int b = 0; b < mesh.ndim(); ++b) {
            const Placement& o = v.state[static_cast<size_t>(b)];
            if (b > m) taken |= o.is_shard(next.dim);
            if (b != m) taken |= o.is_shard(next.dim) && (o.is_strided() || next.is_strided());  // strided: alone
          }
          if (taken) continue;
        }
        Placements state = v.state;
        state[static_cast<size_t>(m)] = next;
        ReshardStep step{m, cur, next, collective, 0};
        step.cost_us = StepCost(mesh, step, v.state, global_shape, dtype);
        const double c = v.cost + step.cost_us;
        auto it = best.find(state);
        if (it == best.end() || c < it->second) {
          best[state] = c;
          prev[state] = {v.state, step};
          queue.push({c, state});
        }
      }
    }
  }
  OAR_CHECK(best.count(to), kInvalidArgument, "reshard: no plan from {} to {} on {}", PlacementsString(from),
            PlacementsString(to), mesh.ToString());
  std::vector<ReshardStep> plan;
  for (Placements s = to; s != from; s = prev[s].first) plan.push_back(prev[s].second);
  std::reverse(plan.begin(), plan.end());
  return plan;
}

std::string PlanString(const std::vector<ReshardStep>& plan) {
  if (plan.empty()) return "(nothing to do)";
  std::string s;
  for (const ReshardStep& st : plan) {
    s += (s.empty() ? "" : "; ") + fmt::format("mesh dim {}: {} -> {} {} ({:.1f} us)", st.dim, st.from.ToString(),
                                               st.to.ToString(), st.collective, st.cost_us);
  }
  return s;
}

DistTensor Reshard(const DistTensor& x, const Placements& placements) {
  OAR_CHECK_ARG(x.defined(), "reshard: the tensor is undefined");
  const std::vector<ReshardStep> plan = PlanReshard(x.mesh(), x.placements(), placements, x.shape(), x.dtype());
  if (plan.empty()) return x;
  std::vector<Tensor> locals = x.locals();
  Placements state = x.placements();
  for (const ReshardStep& s : plan) {
    std::vector<Dims> shapes;
    for (int64_t r = 0; r < x.mesh().numel(); ++r) shapes.push_back(RegionOf(x.mesh(), state, x.shape(), r).shape);
    locals = RunStep(x.mesh(), s, locals, shapes);
    state[static_cast<size_t>(s.dim)] = s.to;
  }
  return DistTensor(x.mesh(), CheckPlacements(x.mesh(), placements, x.rank(), "reshard"), x.shape(), locals);
}

Tensor FullTensor(const DistTensor& x) {
  return Reshard(x, Placements(static_cast<size_t>(x.mesh().ndim()), Placement::Replicate())).local(x.mesh().first_local());
}

}  // namespace oar::distributed
