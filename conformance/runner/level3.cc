// Level 3 — distributed: the collectives of the device type's CCL table across all of its devices in this
// process (core/distributed), against results computed on the host from the same inputs; and a
// data-parallel MLP trained on two devices (half a batch each, gradients averaged with all_reduce)
// against the same MLP trained on the device under test with the whole batch; and the same MLP tensor
// parallel (Megatron: one all_reduce each way) and pipeline parallel (two stages, 1F1B over four
// micro-batches) through core/distributed, against the device under test.
//
// Inputs are small integers, so every sum, extremum and average is exact in every dtype tested: results
// must match the host exactly. A device type with fewer than two devices or without a CCL table SKIPs
// every case (and so cannot pass L3).
#include <algorithm>
#include <cmath>

#include "conformance/runner/case.h"
#include "core/distributed/collectives.h"
#include "core/distributed/eager.h"
#include "core/distributed/group.h"
#include "core/distributed/pipeline.h"
#include "core/nn/layers.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/optim/optim.h"

namespace oar::conformance {
namespace {

using distributed::Group;
using distributed::ReduceOp;

/// Every device of the type under test, in index order; SKIPs the case when L3 cannot apply.
std::vector<Device> GroupDevices(const CaseContext& c) {
  runtime::DeviceType& type = c.ctx.type();
  if (type.plugin().ccl() == nullptr) {
    throw SkipCase{fmt::format("device type '{}' has no CCL table: no collectives to certify", type.name())};
  }
  if (type.device_count() < 2) {
    throw SkipCase{
        fmt::format("device type '{}' has {} device(s); L3 needs at least 2", type.name(), type.device_count())};
  }
  std::vector<Device> devices;
  for (int i = 0; i < type.device_count(); ++i) devices.push_back(type.device(i).device());
  return devices;
}

/// Rank r's input: n small integers (seeded), as doubles.
std::vector<double> RankValues(uint64_t seed, int rank, int64_t n) {
  Generator g(seed * 131 + static_cast<uint64_t>(rank));
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = std::round(g.NextNormal() * 6);
  return v;
}

Tensor OnDevice(const std::vector<double>& values, const Dims& shape, DType dtype, Device device) {
  return FromVector<double>(values, shape, Device("cpu")).to(dtype).to(device);
}

std::vector<double> Read(const Tensor& t) { return t.to(Device("cpu")).to(DType::kFloat64).ToVector<double>(); }

/// FAIL naming the rank and the first element that differs.
void ExpectEqual(const std::vector<double>& got, const std::vector<double>& want, const std::string& what, int rank) {
  Expect(got.size() == want.size(),
         fmt::format("{}: rank {} got {} elements, expected {}", what, rank, got.size(), want.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      Fail(fmt::format("{}: rank {} element {} is {}, expected {} (computed on the host)", what, rank, i, got[i],
                       want[i]));
    }
  }
}

CaseResult Result(DType dtype, const std::string& shape) {
  CaseResult r;
  r.dtype = std::string(DTypeName(dtype));
  r.shape = shape;
  return r;
}

double Reduce(ReduceOp op, const std::vector<double>& xs, DType dtype) {
  double acc = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) {
    switch (op) {
      case ReduceOp::kMax:
        acc = std::max(acc, xs[i]);
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, xs[i]);
        break;
      case ReduceOp::kProd:
        acc *= xs[i];
        break;
      default:
        acc += xs[i];
        break;
    }
  }
  if (op == ReduceOp::kAvg) {
    acc /= static_cast<double>(xs.size());
    if (dtype == DType::kInt32 || dtype == DType::kInt64) acc = std::trunc(acc);  // integer division
  }
  return acc;
}

const char* OpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProd:
      return "prod";
    default:
      return "avg";
  }
}

void CollectiveCases(std::vector<Case>& cases) {
  const int64_t n = 1031;  // not a multiple of anything a kernel might tile by
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
      cases.push_back(
          {fmt::format("L3.ccl.all_reduce.{}.{}", OpName(op), DTypeName(dt)), 3, "ccl", [=](CaseContext& c) {
             const std::vector<Device> devices = GroupDevices(c);
             Group group(devices);
             std::vector<std::vector<double>> in;
             std::vector<Tensor> t;
             for (int r = 0; r < group.size(); ++r) {
               in.push_back(RankValues(c.seed, r, n));
               t.push_back(OnDevice(in.back(), {n}, dt, devices[r]));
             }
             group.AllReduce(t, op);
             std::vector<double> want(static_cast<size_t>(n));
             for (size_t i = 0; i < want.size(); ++i) {
               std::vector<double> xs;
               for (const auto& v : in) xs.push_back(v[i]);
               want[i] = Reduce(op, xs, dt);
             }
             for (int r = 0; r < group.size(); ++r) ExpectEqual(Read(t[r]), want, "all_reduce", r);
             return Result(dt, fmt::format("[{}] x {} ranks", n, group.size()));
           }});
    }
  }
  cases.push_back({"L3.ccl.broadcast.float32", 3, "ccl", [=](CaseContext& c) {
                     const std::vector<Device> devices = GroupDevices(c);
                     Group group(devices);
                     const int root = group.size() - 1;
                     std::vector<Tensor> t;
                     for (int r = 0; r < group.size(); ++r) {
                       t.push_back(OnDevice(RankValues(c.seed, r, n), {n}, DType::kFloat32, devices[r]));
                     }
                     group.Broadcast(t, root);
                     const std::vector<double> want = RankValues(c.seed, root, n);
                     for (int r = 0; r < group.size(); ++r) ExpectEqual(Read(t[r]), want, "broadcast", r);
                     return Result(DType::kFloat32, fmt::format("[{}], root {}", n, root));
                   }});
  cases.push_back({"L3.ccl.all_gather.float32", 3, "ccl", [=](CaseContext& c) {
                     const std::vector<Device> devices = GroupDevices(c);
                     Group group(devices);
                     std::vector<Tensor> t;
                     std::vector<double> want;
                     for (int r = 0; r < group.size(); ++r) {
                       const std::vector<double> v = RankValues(c.seed, r, 6);
                       want.insert(want.end(), v.begin(), v.end());
                       t.push_back(OnDevice(v, {2, 3}, DType::kFloat32, devices[r]));
                     }
                     const std::vector<Tensor> out = group.AllGather(t);
                     for (int r = 0; r < group.size(); ++r) ExpectEqual(Read(out[r]), want, "all_gather", r);
                     return Result(DType::kFloat32, "[2, 3] per rank");
                   }});
  cases.push_back({"L3.ccl.reduce_scatter.sum.float32", 3, "ccl", [=](CaseContext& c) {
                     const std::vector<Device> devices = GroupDevices(c);
                     Group group(devices);
                     const int64_t k = 5, total = k * group.size();
                     std::vector<std::vector<double>> in;
                     std::vector<Tensor> t;
                     for (int r = 0; r < group.size(); ++r) {
                       in.push_back(RankValues(c.seed, r, total * 3));
                       t.push_back(OnDevice(in.back(), {total, 3}, DType::kFloat32, devices[r]));
                     }
                     const std::vector<Tensor> out = group.ReduceScatter(t, ReduceOp::kSum);
                     for (int r = 0; r < group.size(); ++r) {
                       std::vector<double> want(static_cast<size_t>(k * 3), 0.0);
                       for (const auto& v : in) {
                         for (size_t i = 0; i < want.size(); ++i) want[i] += v[static_cast<size_t>(r * k * 3) + i];
                       }
                       ExpectEqual(Read(out[r]), want, "reduce_scatter", r);
                     }
                     return Result(DType::kFloat32, fmt::format("[{}, 3] per rank", total));
                   }});
  cases.push_back({"L3.ccl.send_recv.float32", 3, "ccl", [=](CaseContext& c) {
                     const std::vector<Device> devices = GroupDevices(c);
                     Group group(devices);
                     const std::vector<double> v = RankValues(c.seed, 0, n);
                     const Tensor src = OnDevice(v, {n}, DType::kFloat32, devices[0]);
                     const Tensor dst = zeros({n}, DType::kFloat32, devices[1]);
                     group.SendRecv(src, 0, dst, 1);
                     ExpectEqual(Read(dst), v, "send 0 -> recv 1", 1);
                     return Result(DType::kFloat32, fmt::format("[{}]", n));
                   }});
}

/// Two layers, built identically on any device from one seed.
struct Mlp : nn::Module {
  explicit Mlp(Device device) {
    Generator gen(11);
    nn::Options o;
    o.device = device;
    l1 = RegisterModule("l1", std::make_shared<nn::Linear>(6, 16, true, gen, o));
    l2 = RegisterModule("l2", std::make_shared<nn::Linear>(16, 3, true, gen, o));
  }
  Tensor Forward(const Tensor& x) { return (*l2)(relu((*l1)(x))); }
  std::shared_ptr<nn::Linear> l1, l2;
};

void DataParallelCases(std::vector<Case>& cases) {
  cases.push_back(
      {"L3.data_parallel.mlp.two_devices", 3, "data_parallel", [](CaseContext& c) {
         const std::vector<Device> all = GroupDevices(c);
         const std::vector<Device> devices = {all[0], all[1]};
         Group group(devices);
         Mlp single(c.device), rank0(devices[0]), rank1(devices[1]);
         optim::SGD opt_single(single.Parameters(), 0.05), opt0(rank0.Parameters(), 0.05),
             opt1(rank1.Parameters(), 0.05);
         Generator data(c.seed);
         const int steps = 8;
         for (int step = 0; step < steps; ++step) {
           const Tensor x = randn({8, 6}, data), y = randn({8, 3}, data);  // on cpu
           single.ZeroGrad();
           mse_loss(single.Forward(x.to(c.device)), y.to(c.device)).backward();
           opt_single.Step();
           rank0.ZeroGrad();
           rank1.ZeroGrad();
           mse_loss(rank0.Forward(x.slice(0, 0, 4).to(devices[0])), y.slice(0, 0, 4).to(devices[0])).backward();
           mse_loss(rank1.Forward(x.slice(0, 4, 8).to(devices[1])), y.slice(0, 4, 8).to(devices[1])).backward();
           std::vector<nn::Module*> replicas = {&rank0, &rank1};
           distributed::AverageGradients(group, replicas);
           opt0.Step();
           opt1.Step();
         }
         CaseResult r = Result(DType::kFloat32, fmt::format("MLP 6-16-3, batch 8 = 2 x 4, {} SGD steps", steps));
         r.numeric = true;
         r.atol = 1e-6;
         r.tolerance = 1e-5;
         const auto ps = single.Parameters(), p0 = rank0.Parameters(), p1 = rank1.Parameters();
         for (size_t i = 0; i < ps.size(); ++i) {
           const std::vector<double> s = Read(*ps[i]), a = Read(*p0[i]), b = Read(*p1[i]);
           ExpectEqual(b, a, fmt::format("parameter {}: replicas diverged", i), 1);
           for (size_t k = 0; k < s.size(); ++k) {
             const double abs = std::abs(a[k] - s[k]);
             r.max_abs_error = std::max(r.max_abs_error, abs);
             r.max_rel_error = std::max(r.max_rel_error, abs / std::max(std::abs(s[k]), 1e-30));
             Expect(abs <= r.atol + r.tolerance * std::abs(s[k]),
                    fmt::format("parameter {} element {}: data-parallel {} vs single-device {}", i, k, a[k], s[k]));
           }
         }
         return r;
       }});
}

/// Compare `got` with the single-device `want` within the case's tolerance, recording the errors.
void ExpectClose(CaseResult& r, const std::vector<double>& got, const std::vector<double>& want,
                 const std::string& what) {
  Expect(got.size() == want.size(), fmt::format("{}: {} elements, expected {}", what, got.size(), want.size()));
  for (size_t k = 0; k < want.size(); ++k) {
    const double abs = std::abs(got[k] - want[k]);
    r.max_abs_error = std::max(r.max_abs_error, abs);
    r.max_rel_error = std::max(r.max_rel_error, abs / std::max(std::abs(want[k]), 1e-30));
    Expect(abs <= r.atol + r.tolerance * std::abs(want[k]),
           fmt::format("{} element {}: {} vs single-device {}", what, k, got[k], want[k]));
  }
}

// Tensor and pipeline parallel through the auto-parallel API (core/distributed) on two devices of the
// type under test, against the same MLP on the device under test.
void ModelParallelCases(std::vector<Case>& cases) {
  cases.push_back(
      {"L3.tensor_parallel.mlp.two_devices", 3, "tensor_parallel", [](CaseContext& c) {
         using distributed::DistTensor;
         using distributed::Placement;
         const std::vector<Device> all = GroupDevices(c);
         const distributed::ProcessMesh mesh({2}, {"tp"}, {all[0], all[1]});
         Mlp single(c.device);
         Generator data(c.seed);
         const Tensor x = randn({8, 6}, data);
         const Tensor out = single.Forward(x.to(c.device));
         const Tensor loss = sum(out * out);
         loss.backward();
         // l1 column-parallel (weight [16, 6] and bias split by rows), l2 row-parallel (weight [3, 16] split
         // by columns): one all_reduce in the forward, one in the backward.
         auto param = [&](const Tensor& t, Placement p) {
           return distributed::shard_tensor(t.detach(), mesh, {p}).detach().set_requires_grad(true);
         };
         DistTensor w1 = param(single.l1->weight, Placement::Shard(0));
         DistTensor b1 = param(*single.l1->bias, Placement::Shard(0));
         DistTensor w2 = param(single.l2->weight, Placement::Shard(1));
         DistTensor b2 = param(*single.l2->bias, Placement::Replicate());
         distributed::ResetCollectiveCounts();
         const DistTensor h = distributed::relu(distributed::linear(
             distributed::shard_tensor(x, mesh, {Placement::Replicate()}), w1, b1));
         // Row-parallel with a replicated bias: linear adds the bias to the Partial(sum) product once (one
         // all_reduce), as Megatron's row-parallel layer does.
         const DistTensor y = distributed::Reshard(distributed::linear(h, w2, b2), {Placement::Replicate()});
         const distributed::CollectiveCounts fwd = distributed::GetCollectiveCounts();
         const DistTensor dloss = distributed::sum(distributed::mul(y, y));
         distributed::ResetCollectiveCounts();
         distributed::Backward(dloss);
         const distributed::CollectiveCounts bwd = distributed::GetCollectiveCounts();
         Expect(fwd.all_reduce == 1 && fwd.total() == 1,
                "Megatron MLP forward: expected exactly one all_reduce, got " + fwd.ToString());
         Expect(bwd.all_reduce == 1 && bwd.total() == 1,
                "Megatron MLP backward: expected exactly one all_reduce, got " + bwd.ToString());
         CaseResult r = Result(DType::kFloat32, "MLP 6-16-3, batch 8, l1 column- and l2 row-parallel over 2 devices");
         r.numeric = true;
         r.atol = 1e-5;
         r.tolerance = 1e-5;
         ExpectClose(r, Read(distributed::FullTensor(dloss)), Read(loss), "loss");
         ExpectClose(r, Read(distributed::FullTensor(w1.grad())), Read(single.l1->weight.grad()), "l1.weight grad");
         ExpectClose(r, Read(distributed::FullTensor(b1.grad())), Read(single.l1->bias->grad()), "l1.bias grad");
         ExpectClose(r, Read(distributed::FullTensor(w2.grad())), Read(single.l2->weight.grad()), "l2.weight grad");
         ExpectClose(r, Read(distributed::FullTensor(b2.grad())), Read(single.l2->bias->grad()), "l2.bias grad");
         return r;
       }});
  cases.push_back(
      {"L3.pipeline_parallel.mlp.two_stages", 3, "pipeline_parallel", [](CaseContext& c) {
         const std::vector<Device> all = GroupDevices(c);
         Mlp single(c.device), stage0(all[0]), stage1(all[1]);
         Generator data(c.seed);
         const Tensor x = randn({8, 6}, data), y = randn({8, 3}, data);  // on cpu
         mse_loss(single.Forward(x.to(c.device)), y.to(c.device)).backward();
         // Stage 0: l1 and relu on device 0; stage 1: l2 and the loss on device 1; four micro-batches of 2
         // rows, activations and gradients sent between the devices with the CCL's send/recv.
         constexpr int64_t kMicro = 4, kRows = 2;
         std::vector<distributed::PipelineStage> stages(2);
         stages[0].lanes = {all[0]};
         stages[0].forward = [&](int64_t m, int64_t, const Tensor&) {
           return relu((*stage0.l1)(x.slice(0, m * kRows, (m + 1) * kRows).to(all[0])));
         };
         stages[1].lanes = {all[1]};
         stages[1].forward = [&](int64_t m, int64_t, const Tensor& in) {
           return mse_loss((*stage1.l2)(in), y.slice(0, m * kRows, (m + 1) * kRows).to(all[1]));
         };
         distributed::Pipeline pipe(std::move(stages));
         CaseResult r = Result(DType::kFloat32, "MLP 6-16-3, batch 8 = 4 micro-batches of 2, two stages, 1F1B");
         r.numeric = true;
         r.atol = 1e-6;
         r.tolerance = 1e-5;
         const distributed::PipelineResult res = pipe.Run(distributed::PipelineSchedule::k1F1B, kMicro);
         Expect(res.peak_live[0] == 2 && res.peak_live[1] == 1,
                fmt::format("1F1B on 2 stages: expected at most 2 and 1 live micro-batches, got {} and {}",
                            res.peak_live[0], res.peak_live[1]));
         ExpectClose(r, Read(stage0.l1->weight.grad()), Read(single.l1->weight.grad()), "l1.weight grad");
         ExpectClose(r, Read(stage0.l1->bias->grad()), Read(single.l1->bias->grad()), "l1.bias grad");
         ExpectClose(r, Read(stage1.l2->weight.grad()), Read(single.l2->weight.grad()), "l2.weight grad");
         ExpectClose(r, Read(stage1.l2->bias->grad()), Read(single.l2->bias->grad()), "l2.bias grad");
         return r;
       }});
}

}  // namespace

void AddLevel3Cases(std::vector<Case>& cases) {
  CollectiveCases(cases);
  DataParallelCases(cases);
  ModelParallelCases(cases);
}

}  // namespace oar::conformance
