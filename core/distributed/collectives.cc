#include "core/distributed/collectives.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "core/autograd/autograd.h"
#include "core/base/error.h"
#include "core/distributed/group.h"
#include "core/distributed/process_group.h"
#include "core/ops/ops.h"

namespace oar::distributed {
namespace {

std::atomic<int64_t> g_all_reduce{0}, g_all_gather{0}, g_reduce_scatter{0}, g_all_to_all{0};

// One Group per distinct device list, created on first use and kept for the process (communicator
// initialisation is the expensive part of a collective on a fresh group).
Group& GroupFor(const std::vector<Device>& devices) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Group>> groups;
  std::string key;
  for (const Device& d : devices) key += d.str() + ",";
  std::lock_guard<std::mutex> lock(mu);
  auto& g = groups[key];
  if (!g) g = std::make_unique<Group>(devices);
  return *g;
}

// The groups along mesh dim `dim`: each a list of ranks in coordinate order.
std::vector<std::vector<int64_t>> GroupsAlong(const ProcessMesh& mesh, int dim) {
  OAR_CHECK_ARG(dim >= 0 && dim < mesh.ndim(), "collective: mesh dim {} is outside the {}-d mesh {}", dim, mesh.ndim(),
                mesh.ToString());
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < mesh.numel(); ++r) {
    if (mesh.Coord(r)[static_cast<size_t>(dim)] == 0) out.push_back(mesh.GroupAlong(r, dim));
  }
  return out;
}

std::vector<Device> DevicesOf(const ProcessMesh& mesh, const std::vector<int64_t>& ranks) {
  std::vector<Device> d;
  for (int64_t r : ranks) d.push_back(mesh.devices()[static_cast<size_t>(r)]);
  return d;
}

// One rank per process: the processes of this rank's group along `dim` (sub-rank i = coordinate i).
ProcessGroup& ProcessesAlong(const ProcessMesh& mesh, int dim) {
  std::vector<int> ranks;
  for (int64_t r : mesh.GroupAlong(mesh.first_local(), dim)) ranks.push_back(mesh.process_rank(r));
  return ProcessGroup::Subgroup(ranks);
}

// The tensors of the ranks this process holds (every one in one process), and back to one per rank.
std::vector<Tensor> Held(const ProcessMesh& mesh, const std::vector<Tensor>& v) {
  if (!mesh.multi_process()) return v;
  return {v.at(static_cast<size_t>(mesh.first_local()))};
}
std::vector<Tensor> Spread(const ProcessMesh& mesh, std::vector<Tensor> held) {
  if (!mesh.multi_process()) return held;
  std::vector<Tensor> v(static_cast<size_t>(mesh.numel()));
  v[static_cast<size_t>(mesh.first_local())] = std::move(held.at(0));
  return v;
}

void CheckLocals(const ProcessMesh& mesh, const std::vector<Tensor>& locals, const char* what) {
  OAR_CHECK_ARG(static_cast<int64_t>(locals.size()) == mesh.numel(), "{}: {} local tensors for a mesh of {} ranks",
                what, locals.size(), mesh.numel());
  for (size_t r = 0; r < locals.size(); ++r) {
    if (!mesh.is_local(static_cast<int64_t>(r))) continue;
    OAR_CHECK_ARG(locals[r].defined() && locals[r].device() == mesh.devices()[r],
                  "{}: the local tensor of rank {} must be defined and on {}", what, r, mesh.devices()[r].str());
  }
}

struct Meta {
  Dims shape;
  DType dtype;
  Device device;
};
std::vector<Meta> MetasOf(const std::vector<Tensor>& ts) {
  std::vector<Meta> m;
  for (const Tensor& t : ts) m.push_back({t.shape(), t.dtype(), t.device()});
  return m;
}
std::vector<Tensor> Filled(std::span<const Tensor> grads, const std::vector<Meta>& metas) {
  std::vector<Tensor> g;
  for (size_t i = 0; i < metas.size(); ++i) {
    g.push_back(grads[i].defined() ? grads[i] : zeros(metas[i].shape, metas[i].dtype, metas[i].device));
  }
  return g;
}

std::vector<Tensor> Detached(const std::vector<Tensor>& ts) {
  std::vector<Tensor> d;
  for (const Tensor& t : ts) d.push_back(t.detach());
  return d;
}

// One rank per process: this rank's chunks to its group's processes, and the chunks they sent here. The
// autograd node links the chunks sent (to coordinates j != self, in order) with those received (from i !=
// self, in order); its VJP is the reverse all_to_all, which returns each received chunk's gradient to its
// sender and brings back the gradients of the chunks sent.
std::vector<std::vector<Tensor>> AllToAllProcesses(const ProcessMesh& mesh, int dim,
                                                   const std::vector<std::vector<Tensor>>& chunks) {
  const int64_t p = mesh.size(dim);
  const auto me = static_cast<size_t>(mesh.first_local());
  const auto self = static_cast<size_t>(mesh.Coord(mesh.first_local())[static_cast<size_t>(dim)]);
  OAR_CHECK_ARG(static_cast<int64_t>(chunks[me].size()) == p, "all_to_all: rank {} has {} chunks for a group of {}", me,
                chunks[me].size(), p);
  std::vector<Tensor> send, got;
  {
    NoGradGuard no_grad;
    for (const Tensor& c : chunks[me]) send.push_back(c.contiguous());
    got = p > 1 ? ProcessesAlong(mesh, dim).AllToAll(send) : send;
  }
  ++g_all_to_all;
  std::vector<Tensor> in_flat, out_flat;
  for (size_t j = 0; j < static_cast<size_t>(p); ++j) {
    if (j == self) continue;
    in_flat.push_back(chunks[me][j]);
    out_flat.push_back(got[j]);
  }
  const std::vector<Meta> metas = MetasOf(out_flat);
  if (!out_flat.empty()) {
    autograd::RecordCustom("all_to_all", in_flat, out_flat, [mesh, dim, metas, self, p, me](std::span<const Tensor> grads) {
      const std::vector<Tensor> g = Filled(grads, metas);
      std::vector<std::vector<Tensor>> back(static_cast<size_t>(mesh.numel()));
      for (size_t i = 0, k = 0; i < static_cast<size_t>(p); ++i) {
        back[me].push_back(i == self ? zeros({0}, metas[0].dtype, metas[0].device) : g[k++]);
      }
      const std::vector<std::vector<Tensor>> ret = AllToAllAlong(mesh, dim, back);
      std::vector<Tensor> dx;
      for (size_t j = 0; j < static_cast<size_t>(p); ++j) {
        if (j != self) dx.push_back(ret[me][j]);
      }
      return dx;
    });
  }
  std::vector<std::vector<Tensor>> received(chunks.size());
  received[me].resize(static_cast<size_t>(p));
  for (size_t j = 0, k = 0; j < static_cast<size_t>(p); ++j) received[me][j] = j == self ? chunks[me][j] : out_flat[k++];
  return received;
}

}  // namespace

std::string CollectiveCounts::ToString() const {
  return "all_reduce " + std::to_string(all_reduce) + ", all_gather " + std::to_string(all_gather) +
         ", reduce_scatter " + std::to_string(reduce_scatter) + ", all_to_all " + std::to_string(all_to_all);
}

CollectiveCounts GetCollectiveCounts() {
  return {g_all_reduce.load(), g_all_gather.load(), g_reduce_scatter.load(), g_all_to_all.load()};
}

void ResetCollectiveCounts() {
  g_all_reduce = 0;
  g_all_gather = 0;
  g_reduce_scatter = 0;
  g_all_to_all = 0;
}

std::vector<Tensor> AllReduceAlong(const ProcessMesh& mesh, int dim, const std::vector<Tensor>& locals,
                                   runtime::ReduceOp op) {
  CheckLocals(mesh, locals, "all_reduce");
  OAR_CHECK_ARG(op == runtime::ReduceOp::kSum || op == runtime::ReduceOp::kAvg || op == runtime::ReduceOp::kMax ||
                    op == runtime::ReduceOp::kMin,
                "all_reduce: the reduction must be sum, avg, max or min");
  std::vector<Tensor> out(locals.size());
  {
    NoGradGuard no_grad;
    for (size_t r = 0; r < locals.size(); ++r) {
      if (mesh.is_local(static_cast<int64_t>(r))) out[r] = locals[r].contiguous().clone();
    }
    if (mesh.multi_process()) {
      Tensor& mine = out[static_cast<size_t>(mesh.first_local())];
      if (mesh.size(dim) > 1 && mine.numel() > 0) ProcessesAlong(mesh, dim).AllReduce(mine, op);
    }
    for (const std::vector<int64_t>& g : mesh.multi_process() ? std::vector<std::vector<int64_t>>{} : GroupsAlong(mesh, dim)) {
      if (g.size() < 2 || out[static_cast<size_t>(g[0])].numel() == 0) continue;
      std::vector<Tensor> ts;
      for (int64_t r : g) ts.push_back(out[static_cast<size_t>(r)]);
      GroupFor(DevicesOf(mesh, g)).AllReduce(ts, op);
    }
  }
  ++g_all_reduce;
  std::vector<Tensor> held_out = Held(mesh, out);
  const std::vector<Meta> metas = MetasOf(held_out);
  std::vector<Tensor> saved_in, saved_out;
  if (op == runtime::ReduceOp::kMax || op == runtime::ReduceOp::kMin) {
    saved_in = Detached(Held(mesh, locals));
    saved_out = Detached(held_out);
  }
  autograd::RecordCustom("all_reduce", Held(mesh, locals), held_out,
                         [mesh, dim, op, metas, saved_in, saved_out](std::span<const Tensor> grads) {
                           const std::vector<Tensor> g = Filled(grads, metas);
                           auto reduce = [&](const std::vector<Tensor>& x, runtime::ReduceOp o) {
                             return Held(mesh, AllReduceAlong(mesh, dim, Spread(mesh, x), o));
                           };
                           if (op == runtime::ReduceOp::kSum || op == runtime::ReduceOp::kAvg) return reduce(g, op);
                           // max/min: the ranks that hold the extreme share the summed gradient evenly.
                           const std::vector<Tensor> total = reduce(g, runtime::ReduceOp::kSum);
                           std::vector<Tensor> mask;
                           for (size_t r = 0; r < g.size(); ++r) mask.push_back(cast(eq(saved_in[r], saved_out[r]), g[r].dtype()));
                           const std::vector<Tensor> count = reduce(mask, runtime::ReduceOp::kSum);
                           std::vector<Tensor> dx;
                           for (size_t r = 0; r < g.size(); ++r) dx.push_back(total[r] * mask[r] / count[r]);
                           return dx;
                         });
  return Spread(mesh, held_out);
}

std::vector<Tensor> AllGatherAlong(const ProcessMesh& mesh, int dim, const std::vector<Tensor>& locals) {
  CheckLocals(mesh, locals, "all_gather");
  std::vector<Tensor> out(locals.size());
  {
    NoGradGuard no_grad;
    if (mesh.multi_process()) {
      const auto me = static_cast<size_t>(mesh.first_local());
      const Tensor t = locals[me].contiguous();
      Dims s = t.shape();
      s.insert(0, mesh.size(dim));
      out[me] = mesh.size(dim) < 2 ? t.clone().reshape(s)
                : t.numel() == 0   ? zeros(s, t.dtype(), t.device())
                                   : ProcessesAlong(mesh, dim).AllGather(t);
    }
    for (const std::vector<int64_t>& g : mesh.multi_process() ? std::vector<std::vector<int64_t>>{} : GroupsAlong(mesh, dim)) {
      std::vector<Tensor> ts;
      for (int64_t r : g) ts.push_back(locals[static_cast<size_t>(r)].contiguous());
      if (ts[0].numel() == 0 || g.size() < 2) {
        for (int64_t r : g) {
          Dims s = locals[static_cast<size_t>(r)].shape();
          s.insert(0, static_cast<int64_t>(g.size()));
          out[static_cast<size_t>(r)] = g.size() < 2 ? ts[0].clone().reshape(s) : zeros(s, ts[0].dtype(), locals[static_cast<size_t>(r)].device());
        }
        continue;
      }
      std::vector<Tensor> res = GroupFor(DevicesOf(mesh, g)).AllGather(ts);
      for (size_t i = 0; i < g.size(); ++i) out[static_cast<size_t>(g[i])] = res[i];
    }
  }
  ++g_all_gather;
  std::vector<Tensor> held_out = Held(mesh, out);
  const std::vector<Meta> metas = MetasOf(held_out);
  autograd::RecordCustom("all_gather", Held(mesh, locals), held_out, [mesh, dim, metas](std::span<const Tensor> grads) {
    return Held(mesh, ReduceScatterAlong(mesh, dim, Spread(mesh, Filled(grads, metas)), runtime::ReduceOp::kSum));
  });
  return Spread(mesh, held_out);
}

std::vector<Tensor> ReduceScatterAlong(const ProcessMesh& mesh, int dim, const std::vector<Tensor>& locals,
                                       runtime::ReduceOp op) {
  CheckLocals(mesh, locals, "reduce_scatter");
  OAR_CHECK_ARG(op == runtime::ReduceOp::kSum || op == runtime::ReduceOp::kAvg,
                "reduce_scatter: the reduction must be sum or avg (max and min go through all_reduce)");
  const int64_t p = mesh.size(dim);
  std::vector<Tensor> out(locals.size());
  {
    NoGradGuard no_grad;
    if (mesh.multi_process()) {
      const auto me = static_cast<size_t>(mesh.first_local());
      const Tensor t = locals[me].contiguous();
      OAR_CHECK_ARG(t.rank() >= 1 && t.dim(0) == p, "reduce_scatter: rank {} has shape {}; expected [{}, ...]", me,
                    t.shape().ToString(), p);
      Dims piece = t.shape();
      piece.erase(0);
      out[me] = p < 2 ? t.clone().reshape(piece)
                : t.numel() == 0 ? zeros(piece, t.dtype(), t.device())
                                 : ProcessesAlong(mesh, dim).ReduceScatter(t, op).reshape(piece);
    }
    for (const std::vector<int64_t>& g : mesh.multi_process() ? std::vector<std::vector<int64_t>>{} : GroupsAlong(mesh, dim)) {
      std::vector<Tensor> ts;
      for (int64_t r : g) {
        const Tensor& t = locals[static_cast<size_t>(r)];
        OAR_CHECK_ARG(t.rank() >= 1 && t.dim(0) == p, "reduce_scatter: rank {} has shape {}; expected [{}, ...]", r,
                      t.shape().ToString(), p);
        ts.push_back(t.contiguous());
      }
      Dims piece = ts[0].shape();
      piece.erase(0);
      if (ts[0].numel() == 0 || g.size() < 2) {
        for (size_t i = 0; i < g.size(); ++i) {
          out[static_cast<size_t>(g[i])] = g.size() < 2 ? ts[i].clone().reshape(piece) : zeros(piece, ts[i].dtype(), ts[i].device());
        }
        continue;
      }
      std::vector<Tensor> res = GroupFor(DevicesOf(mesh, g)).ReduceScatter(ts, op);
      for (size_t i = 0; i < g.size(); ++i) out[static_cast<size_t>(g[i])] = res[i].reshape(piece);
    }
  }
  ++g_reduce_scatter;
  std::vector<Tensor> held_out = Held(mesh, out);
  const std::vector<Meta> metas = MetasOf(held_out);
  autograd::RecordCustom("reduce_scatter", Held(mesh, locals), held_out, [mesh, dim, op, p, metas](std::span<const Tensor> grads) {
    std::vector<Tensor> g = Held(mesh, AllGatherAlong(mesh, dim, Spread(mesh, Filled(grads, metas))));
    if (op == runtime::ReduceOp::kAvg) {
      for (Tensor& t : g) t = t / static_cast<double>(p);
    }
    return g;
  });
  return Spread(mesh, held_out);
}

std::vector<std::vector<Tensor>> AllToAllAlong(const ProcessMesh& mesh, int dim,
                                               const std::vector<std::vector<Tensor>>& chunks) {
  OAR_CHECK_ARG(static_cast<int64_t>(chunks.size()) == mesh.numel(), "all_to_all: {} chunk lists for {} ranks",
                chunks.size(), mesh.numel());
  const int64_t p = mesh.size(dim);
  std::vector<std::vector<Tensor>> received(chunks.size(), std::vector<Tensor>(static_cast<size_t>(p)));
  if (mesh.multi_process()) return AllToAllProcesses(mesh, dim, chunks);
  std::vector<Tensor> in_flat, out_flat;
  struct Slot {
    size_t dst, src_coord;
  };
  std::vector<Slot> slots;
  {
    NoGradGuard no_grad;
    for (const std::vector<int64_t>& g : GroupsAlong(mesh, dim)) {
      Group& group = GroupFor(DevicesOf(mesh, g));
      for (size_t i = 0; i < g.size(); ++i) {
        const auto src = static_cast<size_t>(g[i]);
        OAR_CHECK_ARG(static_cast<int64_t>(chunks[src].size()) == p, "all_to_all: rank {} has {} chunks for a group of {}",
                      src, chunks[src].size(), p);
        for (size_t j = 0; j < g.size(); ++j) {
          if (i == j) continue;
          const auto dst = static_cast<size_t>(g[j]);
          const Tensor c = chunks[src][j].contiguous();
          Tensor r = empty(c.shape(), c.dtype(), mesh.devices()[dst]);
          if (c.numel() > 0) group.SendRecv(c, static_cast<int>(i), r, static_cast<int>(j));
          in_flat.push_back(chunks[src][j]);
          out_flat.push_back(r);
          slots.push_back({dst, i});
        }
      }
    }
  }
  ++g_all_to_all;
  const std::vector<Meta> metas = MetasOf(out_flat);
  autograd::RecordCustom("all_to_all", in_flat, out_flat, [mesh, dim, metas, slots, p](std::span<const Tensor> grads) {
    const std::vector<Tensor> g = Filled(grads, metas);
    // Send each received chunk's gradient back to where the chunk came from.
    std::vector<std::vector<Tensor>> back(static_cast<size_t>(mesh.numel()), std::vector<Tensor>(static_cast<size_t>(p)));
    for (size_t k = 0; k < slots.size(); ++k) back[slots[k].dst][slots[k].src_coord] = g[k];
    for (size_t r = 0; r < back.size(); ++r) {
      const int64_t self = mesh.Coord(static_cast<int64_t>(r))[static_cast<size_t>(dim)];
      back[r][static_cast<size_t>(self)] = zeros({0}, DType::kFloat32, mesh.devices()[r]);  // not sent
    }
    const std::vector<std::vector<Tensor>> got = AllToAllAlong(mesh, dim, back);
    std::vector<Tensor> dx;
    for (const Slot& s : slots) {
      // the chunk went from the rank at coordinate s.src_coord to s.dst; its gradient came back there.
      const int64_t src_rank = mesh.GroupAlong(static_cast<int64_t>(s.dst), dim)[s.src_coord];
      const int64_t dst_coord = mesh.Coord(static_cast<int64_t>(s.dst))[static_cast<size_t>(dim)];
      dx.push_back(got[static_cast<size_t>(src_rank)][static_cast<size_t>(dst_coord)]);
    }
    return dx;
  });
  for (size_t k = 0; k < slots.size(); ++k) received[slots[k].dst][slots[k].src_coord] = out_flat[k];
  for (size_t r = 0; r < chunks.size(); ++r) {
    const int64_t self = mesh.Coord(static_cast<int64_t>(r))[static_cast<size_t>(dim)];
    received[r][static_cast<size_t>(self)] = chunks[r][static_cast<size_t>(self)];
  }
  return received;
}

Tensor CopyToDevice(const Tensor& x, Device device) {
  if (x.device() == device) return x;
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x.to(device);
  }
  const Device from = x.device();
  const Dims shape = x.shape();
  const DType dtype = x.dtype();
  Tensor outs[1] = {out};
  autograd::RecordCustom("to_device", {&x, 1}, outs, [from, shape, dtype](std::span<const Tensor> grads) {
    return std::vector<Tensor>{grads[0].defined() ? CopyToDevice(grads[0], from) : zeros(shape, dtype, from)};
  });
  return outs[0];
}

}  // namespace oar::distributed
