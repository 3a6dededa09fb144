// Auto-parallel in one process over four simulated kunlun devices: ProcessMesh and Placements, the uneven
// split rule, shard_tensor, every reshard transition on 1-d and 2-d meshes against a host oracle (bitwise
// for data movement, <= 1e-6 for reductions), plan costs and collective counts, gradients through
// reshard, and the error paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "core/autograd/autograd.h"
#include "core/distributed/collectives.h"
#include "core/distributed/dist_tensor.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "core/runtime/testing.h"

namespace oar::distributed {
namespace {

const bool kConfigured = [] {
  setenv("OAR_KUNLUN_SIM_DEVICES", "4", 1);
  return runtime::testing::UseOnlyPlugins(OAR_PLUGIN_DIR, {"cpu", "kunlun_sim"});
}();

using runtime::ReduceOp;

ProcessMesh Line(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.emplace_back("kunlun_sim", i);
  return ProcessMesh({n}, {"x"}, d);
}
ProcessMesh Grid() { return ProcessMesh::Parse("dp=2,tp=2", "kunlun_sim"); }

std::vector<float> Random(int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(g.NextNormal());
  return v;
}

// Strides of a row-major shape.
std::vector<int64_t> Strides(const Dims& s) {
  std::vector<int64_t> st(static_cast<size_t>(s.size()), 1);
  for (int i = s.size() - 2; i >= 0; --i) st[static_cast<size_t>(i)] = st[static_cast<size_t>(i) + 1] * s[i + 1];
  return st;
}

// Calls f(global flat index, local flat index) for every element of rank's block.
void ForBlock(const Dims& global, const LocalRegion& reg, const std::function<void(int64_t, int64_t)>& f) {
  const int64_t n = reg.shape.Product();
  const std::vector<int64_t> gs = Strides(global);
  const int rank = global.size();
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  for (int64_t l = 0; l < n; ++l) {
    int64_t rem = l, g = 0;
    for (int d = rank - 1; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = rem % reg.shape[d];
      rem /= reg.shape[d];
    }
    for (int d = 0; d < rank; ++d) g += (idx[static_cast<size_t>(d)] + reg.offset[d]) * gs[static_cast<size_t>(d)];
    f(g, l);
  }
}

// Index of the partial-dims coordinate tuple of rank r, and whether r is the first replica (coordinate 0
// on every Replicate dim).
int64_t PartialIndex(const ProcessMesh& mesh, const Placements& p, int64_t r, bool* first_replica = nullptr) {
  const std::vector<int64_t> c = mesh.Coord(r);
  int64_t k = 0;
  bool first = true;
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (p[static_cast<size_t>(m)].is_partial()) k = k * mesh.size(m) + c[static_cast<size_t>(m)];
    if (p[static_cast<size_t>(m)].is_replicate()) first &= c[static_cast<size_t>(m)] == 0;
  }
  if (first_replica) *first_replica = first;
  return k;
}
int64_t PartialCount(const ProcessMesh& mesh, const Placements& p) {
  int64_t k = 1;
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (p[static_cast<size_t>(m)].is_partial()) k *= mesh.size(m);
  }
  return k;
}
ReduceOp PartialOp(const Placements& p) {
  for (const Placement& x : p) {
    if (x.is_partial()) return x.reduce;
  }
  return ReduceOp::kSum;
}

double Combine(const std::vector<double>& v, ReduceOp op) {
  double r = v[0];
  for (size_t i = 1; i < v.size(); ++i) {
    if (op == ReduceOp::kMax) r = std::max(r, v[i]);
    if (op == ReduceOp::kMin) r = std::min(r, v[i]);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) r += v[i];
  }
  return op == ReduceOp::kAvg ? r / static_cast<double>(v.size()) : r;
}

// A source tensor with placements `p`: one random tensor per partial coordinate tuple (replicas share
// it); `global` is their reduction, computed on the host.
struct Source {
  DistTensor t;
  std::vector<double> global;
};
Source MakeSource(const ProcessMesh& mesh, const Placements& p, const Dims& shape, uint64_t seed) {
  const int64_t k = PartialCount(mesh, p), n = shape.Product();
  std::vector<std::vector<float>> xs;
  for (int64_t i = 0; i < k; ++i) xs.push_back(Random(n, seed * 131 + static_cast<uint64_t>(i)));
  Source s;
  s.global.resize(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    std::vector<double> v;
    for (int64_t i = 0; i < k; ++i) v.push_back(xs[static_cast<size_t>(i)][static_cast<size_t>(e)]);
    s.global[static_cast<size_t>(e)] = Combine(v, PartialOp(p));
  }
  std::vector<Tensor> locals;
  for (int64_t r = 0; r < mesh.numel(); ++r) {
    const LocalRegion reg = RegionOf(mesh, p, shape, r);
    const std::vector<float>& x = xs[static_cast<size_t>(PartialIndex(mesh, p, r))];
    std::vector<float> block(static_cast<size_t>(reg.shape.Product()));
    ForBlock(shape, reg, [&](int64_t g, int64_t l) { block[static_cast<size_t>(l)] = x[static_cast<size_t>(g)]; });
    locals.push_back(FromVector<float>(block, reg.shape, mesh.devices()[static_cast<size_t>(r)]));
  }
  s.t = DistTensor(mesh, p, shape, locals);
  return s;
}

// The host view of `t`: replicas must agree bitwise; partial tuples are reduced.
std::vector<double> HostGlobal(const DistTensor& t, std::string* replica_error) {
  const ProcessMesh& mesh = t.mesh();
  const Placements& p = t.placements();
  const int64_t k = PartialCount(mesh, p), n = t.shape().Product();
  std::vector<std::vector<double>> parts(static_cast<size_t>(k), std::vector<double>(static_cast<size_t>(n), NAN));
  std::vector<std::vector<float>> first(static_cast<size_t>(k), std::vector<float>(static_cast<size_t>(n), NAN));
  for (int64_t r = 0; r < mesh.numel(); ++r) {
    const std::vector<float> local = t.local(r).to(Device("cpu")).ToVector<float>();
    const int64_t pi = PartialIndex(mesh, p, r);
    const LocalRegion reg = RegionOf(mesh, p, t.shape(), r);
    ForBlock(t.shape(), reg, [&](int64_t g, int64_t l) {
      const float v = local[static_cast<size_t>(l)];
      float& f = first[static_cast<size_t>(pi)][static_cast<size_t>(g)];
      if (std::isnan(f)) {
        f = v;
        parts[static_cast<size_t>(pi)][static_cast<size_t>(g)] = v;
      } else if (!(f == v) && replica_error->empty()) {
        *replica_error = "rank " + std::to_string(r) + " disagrees with its replica at element " + std::to_string(g);
      }
    });
  }
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    std::vector<double> v;
    for (int64_t i = 0; i < k; ++i) v.push_back(parts[static_cast<size_t>(i)][static_cast<size_t>(e)]);
    out[static_cast<size_t>(e)] = Combine(v, PartialOp(p));
  }
  return out;
}

std::vector<Placement> AxisChoices(int rank, std::vector<ReduceOp> partials) {
  std::vector<Placement> c{Placement::Replicate()};
  for (int d = 0; d < rank; ++d) c.push_back(Placement::Shard(d));
  for (ReduceOp op : partials) c.push_back(Placement::Partial(op));
  return c;
}
std::vector<Placements> AllPlacements(const ProcessMesh& mesh, const std::vector<Placement>& choices,
                                      bool one_partial_kind = true) {
  std::vector<Placements> out{{}};
  for (int m = 0; m < mesh.ndim(); ++m) {
    std::vector<Placements> next;
    for (const Placements& p : out) {
      for (const Placement& c : choices) {
        Placements q = p;
        q.push_back(c);
        bool ok = true;
        if (one_partial_kind) {
          for (const Placement& a : q) {
            for (const Placement& b : q) ok &= !(a.is_partial() && b.is_partial() && a.reduce != b.reduce);
          }
        }
        if (ok) next.push_back(q);
      }
    }
    out = next;
  }
  return out;
}

bool HasPartial(const Placements& p) {
  return std::any_of(p.begin(), p.end(), [](const Placement& x) { return x.is_partial(); });
}

// Every pair on `mesh`: reshard, then compare with the host (bitwise when no reduction happens), and
// count collectives against the plan.
void CheckAllPairs(const ProcessMesh& mesh, const Dims& shape, const std::vector<Placement>& choices) {
  const std::vector<Placements> all = AllPlacements(mesh, choices);
  uint64_t seed = 1;
  for (const Placements& src : all) {
    const Source s = MakeSource(mesh, src, shape, seed++);
    for (const Placements& dst : all) {
      const std::string what = PlacementsString(src) + " -> " + PlacementsString(dst) + " on " + mesh.ToString();
      const std::vector<ReshardStep> plan = PlanReshard(mesh, src, dst, shape, DType::kFloat32);
      ResetCollectiveCounts();
      const DistTensor out = Reshard(s.t, dst);
      int64_t comm = 0;
      for (const ReshardStep& st : plan) comm += st.collective != "slice" && st.collective != "partial";
      ASSERT_EQ(GetCollectiveCounts().total(), comm) << what << ": " << PlanString(plan);
      ASSERT_EQ(out.placements(), dst) << what;
      std::string replica_error;
      const std::vector<double> got = HostGlobal(out, &replica_error);
      ASSERT_EQ(replica_error, "") << what;
      const bool reduces = HasPartial(src) && !(HasPartial(dst) && src == dst);
      for (size_t e = 0; e < got.size(); ++e) {
        if (reduces || HasPartial(dst)) {
          ASSERT_NEAR(got[e], s.global[e], 1e-6 * std::max(1.0, std::abs(s.global[e]))) << what << " element " << e;
        } else {
          ASSERT_EQ(static_cast<float>(got[e]), static_cast<float>(s.global[e])) << what << " element " << e;
        }
      }
    }
  }
}

TEST(ProcessMesh, ParsesNamedDimsAndCoordinates) {
  const ProcessMesh m = Grid();
  EXPECT_EQ(m.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(m.DimIndex("tp"), 1);
  EXPECT_EQ(m.Coord(2), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(m.GroupAlong(1, 0), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(m.GroupAlong(2, 1), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(m.ToString(), "dp=2,tp=2 over kunlun_sim:0..3");
  EXPECT_EQ(PlacementsString(ParsePlacements("S(0), Replicate, P(avg)")), "[S(0), R, P(avg)]");
}

// A pipeline stage's tensor-parallel ranks: Slice(pp, s). In one process the devices at pp = s; with one
// rank per process, the same ranks' processes and this process's rank among them (or none).
TEST(ProcessMesh, SliceKeepsTheRanksDevicesAndProcesses) {
  const ProcessMesh one = ProcessMesh::Parse("pp=2,tp=3", "kunlun_sim");
  const ProcessMesh stage1 = one.Slice(one.DimIndex("pp"), 1);
  EXPECT_EQ(stage1.shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(stage1.dim_names(), (std::vector<std::string>{"tp"}));
  EXPECT_EQ(stage1.devices(),
            (std::vector<Device>{Device("kunlun_sim:3"), Device("kunlun_sim:4"), Device("kunlun_sim:5")}));
  EXPECT_FALSE(stage1.multi_process());
  // tp=2,pp=2 over 4 processes, this one rank 3 (tp 1, pp 1): pp = 1 is processes 1 and 3, this one its rank 1.
  const ProcessMesh procs = ProcessMesh::ForProcesses("tp=2,pp=2", Device("cpu:0"), 3, 4);
  const ProcessMesh mine = procs.Slice(procs.DimIndex("pp"), 1);
  EXPECT_TRUE(mine.multi_process());
  EXPECT_EQ(mine.process_rank(0), 1);
  EXPECT_EQ(mine.process_rank(1), 3);
  EXPECT_TRUE(mine.is_local(1));
  EXPECT_FALSE(mine.is_local(0));
  EXPECT_EQ(mine.first_local(), 1);
  const ProcessMesh other = procs.Slice(procs.DimIndex("pp"), 0);  // processes 0 and 2: none of them this one
  EXPECT_EQ(other.process_rank(1), 2);
  EXPECT_FALSE(other.is_local(0) || other.is_local(1));
  EXPECT_NE(other.ToString().find("none of them this one"), std::string::npos) << other.ToString();
  EXPECT_THROW(one.Slice(0, 2), Error);
  EXPECT_THROW(stage1.Slice(0, 0), Error);  // a 1-d mesh has nothing left
}

TEST(ProcessMesh, BadSpecsAreRefusedWithTheReason) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { ProcessMesh::Parse("dp=0", "kunlun_sim"); }).find("size >= 1"), std::string::npos);
  EXPECT_NE(message([] { ProcessMesh::Parse("dp2", "kunlun_sim"); }).find("name=size"), std::string::npos);
  EXPECT_NE(message([] { ProcessMesh::Parse("dp=2,dp=2", "kunlun_sim"); }).find("distinct"), std::string::npos);
  EXPECT_NE(message([] { Grid().DimIndex("pp"); }).find("dp, tp"), std::string::npos);
  EXPECT_NE(message([] { ParsePlacements("Q(1)"); }).find("expected R, S(dim)"), std::string::npos);
  EXPECT_NE(message([] { CheckPlacements(Grid(), {Placement::Shard(0)}, 2, "t"); }).find("2-d mesh"),
            std::string::npos);
  EXPECT_NE(message([] { CheckPlacements(Grid(), {Placement::Shard(2), Placement::Replicate()}, 2, "t"); })
                .find("outside a rank-2"),
            std::string::npos);
  EXPECT_NE(message([] {
              CheckPlacements(Grid(), {Placement::Partial(ReduceOp::kSum), Placement::Partial(ReduceOp::kMax)}, 2, "t");
            }).find("mixes partial"),
            std::string::npos);
  EXPECT_NE(message([] {
              DistTensor(Line(4), {Placement::Shard(0)}, {8}, {zeros({2}, DType::kFloat32, Device("kunlun_sim:0")),
                                                              zeros({2}, DType::kFloat32, Device("kunlun_sim:1")),
                                                              zeros({2}, DType::kFloat32, Device("kunlun_sim:2")),
                                                              zeros({3}, DType::kFloat32, Device("kunlun_sim:3"))});
            }).find("rank 3 holds shape [3]"),
            std::string::npos);
}

TEST(Placements, UnevenSplitIsBalancedFirstRanksLarger) {
  // 10 over 4: 3, 3, 2, 2 at 0, 3, 6, 8; 3 over 4: 1, 1, 1, 0.
  EXPECT_EQ(ShardSize(10, 4, 0), 3);
  EXPECT_EQ(ShardSize(10, 4, 3), 2);
  EXPECT_EQ(ShardOffset(10, 4, 2), 6);
  EXPECT_EQ(ShardOffset(10, 4, 3), 8);
  EXPECT_EQ(ShardSize(3, 4, 3), 0);
  // 2-d: S(0) on both mesh dims: dp splits 7 into 4 + 3, tp splits each piece again.
  const LocalRegion r = RegionOf(Grid(), {Placement::Shard(0), Placement::Shard(0)}, {7, 2}, 3);
  EXPECT_EQ(r.offset[0], 6);
  EXPECT_EQ(r.shape[0], 1);
}

TEST(Reshard, ShardGatherRoundTripIsBitwiseForEveryLength) {
  // The torch #103306 class of bug: every length 0..3W over W = 2, 3, 4.
  for (int w : {2, 3, 4}) {
    const ProcessMesh mesh = Line(w);
    for (int64_t n = 0; n <= 3 * w; ++n) {
      const std::vector<float> v = Random(n * 3, static_cast<uint64_t>(n));
      const Tensor x = FromVector<float>(v, {n, 3});
      const DistTensor s = shard_tensor(x, mesh, {Placement::Shard(0)});
      const DistTensor r = Reshard(s, {Placement::Replicate()});
      for (int64_t k = 0; k < w; ++k) ASSERT_EQ(r.local(k).to(Device("cpu")).ToVector<float>(), v) << w << " " << n;
      const DistTensor back = Reshard(r, {Placement::Shard(0)});
      for (int64_t k = 0; k < w; ++k) {
        ASSERT_EQ(back.local(k).to(Device("cpu")).ToVector<float>(), s.local(k).to(Device("cpu")).ToVector<float>());
      }
      const DistTensor t = Reshard(s, {Placement::Shard(1)});  // all_to_all with empty pieces
      ASSERT_EQ(FullTensor(t).to(Device("cpu")).ToVector<float>(), v) << w << " " << n;
    }
  }
}

TEST(Reshard, EveryTransitionOnALineOfFourMatchesTheHost) {
  CheckAllPairs(Line(4), {5, 3, 7}, AxisChoices(3, {ReduceOp::kSum}));
  CheckAllPairs(Line(4), {6, 4}, AxisChoices(2, {ReduceOp::kAvg}));
  CheckAllPairs(Line(4), {6, 4}, AxisChoices(2, {ReduceOp::kMax}));
  CheckAllPairs(Line(4), {6, 4}, AxisChoices(2, {ReduceOp::kMin}));
}

TEST(Reshard, EveryTransitionOnATwoByTwoMeshMatchesTheHost) {
  CheckAllPairs(Grid(), {5, 3, 7}, AxisChoices(3, {ReduceOp::kSum}));
  CheckAllPairs(Grid(), {4, 6}, AxisChoices(2, {ReduceOp::kAvg, ReduceOp::kMax}));
}

TEST(Reshard, PlansAreCheapestAndLegal) {
  const ProcessMesh m = Grid();
  const Dims shape{64, 64};
  // Both mesh dims on one tensor dim: the inner (tp) must be undone first.
  std::vector<ReshardStep> plan =
      PlanReshard(m, {Placement::Shard(0), Placement::Shard(0)}, {Placement::Replicate(), Placement::Replicate()},
                  shape, DType::kFloat32);
  ASSERT_EQ(plan.size(), 2u) << PlanString(plan);
  EXPECT_EQ(plan[0].dim, 1);
  EXPECT_EQ(plan[1].dim, 0);
  // P -> S is one reduce_scatter, cheaper than all_reduce + slice.
  plan = PlanReshard(m, {Placement::Partial(), Placement::Replicate()}, {Placement::Shard(1), Placement::Replicate()},
                     shape, DType::kFloat32);
  ASSERT_EQ(plan.size(), 1u) << PlanString(plan);
  EXPECT_EQ(plan[0].collective, "reduce_scatter");
  // Slicing before the all_reduce moves fewer bytes: [P, R] -> [R, S(0)] is slice then all_reduce.
  plan = PlanReshard(m, {Placement::Partial(), Placement::Replicate()}, {Placement::Replicate(), Placement::Shard(0)},
                     shape, DType::kFloat32);
  ASSERT_EQ(plan.size(), 2u) << PlanString(plan);
  EXPECT_EQ(plan[0].collective, "slice");
  EXPECT_EQ(plan[1].collective, "all_reduce");
  // Swapping which mesh dim shards which tensor dim: cheaper than gathering both and slicing again (one
  // gather and an all_to_all of the gathered half).
  // (Large enough that bandwidth, not latency, decides.)
  const Dims big{2048, 2048};
  const Placements a{Placement::Shard(0), Placement::Shard(1)}, b{Placement::Shard(1), Placement::Shard(0)};
  plan = PlanReshard(m, a, b, big, DType::kFloat32);
  double cost = 0;
  for (const ReshardStep& s : plan) cost += s.cost_us;
  const double naive =
      StepCost(m, {1, a[1], Placement::Replicate(), "all_gather", 0}, a, big, DType::kFloat32) +
      StepCost(m, {0, a[0], Placement::Replicate(), "all_gather", 0}, {a[0], Placement::Replicate()}, big,
               DType::kFloat32) +
      0.2;
  EXPECT_LT(cost, naive) << PlanString(plan);
  bool swaps = false;
  for (const ReshardStep& s : plan) swaps |= s.collective == "all_to_all";
  EXPECT_TRUE(swaps) << PlanString(plan);
}

TEST(Reshard, GradientsFlowThroughEveryTransition) {
  const ProcessMesh mesh = Grid();
  const Dims shape{5, 3, 7};
  const std::vector<float> w = Random(shape.Product(), 99);
  const Tensor weight = FromVector<float>(w, shape);
  const std::vector<Placements> all = AllPlacements(mesh, AxisChoices(3, {ReduceOp::kSum}));
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = 0; j < all.size(); j += 1 + (i % 3)) {  // a third to all of the targets per source
      Tensor x = FromVector<float>(Random(shape.Product(), i), shape).set_requires_grad(true);
      const DistTensor y = Reshard(shard_tensor(x, mesh, all[i]), all[j]);
      sum(CopyToDevice(FullTensor(y), Device("cpu")) * weight).backward();
      ASSERT_EQ(x.grad().ToVector<float>(), w) << PlacementsString(all[i]) << " -> " << PlacementsString(all[j]);
    }
  }
}

}  // namespace
}  // namespace oar::distributed
