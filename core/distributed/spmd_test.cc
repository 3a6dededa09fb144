// SPMD rules and eager execution on DistTensors over four simulated kunlun devices: a rule for every op of
// the table, decisions (annotation, cost, explain dump), every rule family against the single-device
// result, gradients, and the Megatron MLP block's collective count.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/autograd/autograd.h"
#include "core/distributed/collectives.h"
#include "core/distributed/eager.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"

namespace oar::distributed {
namespace {

// The runtime (cpu + four kunlun_sim devices) is configured by dist_tensor_test.cc, linked into the same
// program.

using ops::Op;
using runtime::ReduceOp;
const Placement R = Placement::Replicate();
Placement S(int64_t d) { return Placement::Shard(d); }

ProcessMesh Line() {
  std::vector<Device> d;
  for (int i = 0; i < 4; ++i) d.emplace_back("kunlun_sim", i);
  return ProcessMesh({4}, {"tp"}, d);
}
ProcessMesh Grid() { return ProcessMesh::Parse("dp=2,tp=2", "kunlun_sim"); }
const Device kDev("kunlun_sim:0");

Tensor Rand(const Dims& shape, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(shape.Product()));
  for (float& x : v) x = static_cast<float>(g.NextNormal());
  return FromVector<float>(v, shape, kDev);
}

DistTensor One(std::vector<DistTensor> v) { return v.at(0); }

std::vector<float> Host(const Tensor& t) { return t.to(Device("cpu")).ToVector<float>(); }

void ExpectClose(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = Host(got), w = Host(want);
  for (size_t i = 0; i < g.size(); ++i) {
    if (tol == 0) {
      ASSERT_EQ(g[i], w[i]) << what << " element " << i;
    } else {
      ASSERT_NEAR(g[i], w[i], tol * std::max(1.0f, std::abs(w[i]))) << what << " element " << i;
    }
  }
}

// ---- every op has a rule that fits its schema ----

struct Sample {
  std::vector<Dims> inputs;
  std::map<std::string, ops::AttrValue> attrs;
};

Sample SampleFor(const ops::OpSchema& s) {
  using V = std::vector<int64_t>;
  static const std::map<std::string, Sample> special = {
      {"matmul", {{{4, 6}, {6, 8}}, {}}},
      {"fill", {{}, {{"shape", V{4, 6}}}}},
      {"view", {{{4, 6}}, {{"shape", V{2, 2, 6}}}}},
      {"permute", {{{4, 6}}, {{"dims", V{1, 0}}}}},
      {"slice", {{{4, 6}}, {{"dim", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{3}}}}},
      {"expand", {{{1, 6}}, {{"shape", V{4, 6}}}}},
      {"squeeze", {{{4, 1, 6}}, {{"dim", int64_t{1}}}}},
      {"unsqueeze", {{{4, 6}}, {{"dim", int64_t{0}}}}},
      {"slice_scatter",
       {{{2, 6}}, {{"shape", V{4, 6}}, {"dim", int64_t{0}}, {"start", int64_t{0}}, {"end", int64_t{2}}}}},
      {"conv2d", {{{2, 3, 8, 8}, {4, 3, 3, 3}}, {}}},
      {"conv2d_grad_input", {{{2, 4, 6, 6}, {4, 3, 3, 3}}, {{"input_shape", V{2, 3, 8, 8}}}}},
      {"conv2d_grad_weight", {{{2, 4, 6, 6}, {2, 3, 8, 8}}, {{"weight_shape", V{4, 3, 3, 3}}}}},
      {"max_pool2d", {{{2, 3, 8, 8}}, {}}},
      {"avg_pool2d", {{{2, 3, 8, 8}}, {{"kernel", V{2, 2}}, {"stride", V{2, 2}}}}},
      {"avg_pool2d_grad", {{{2, 3, 4, 4}}, {{"kernel", V{2, 2}}, {"stride", V{2, 2}}, {"input_shape", V{2, 3, 8, 8}}}}},
      {"adaptive_avg_pool2d", {{{2, 3, 8, 8}}, {{"output_size", V{2, 2}}}}},
      {"adaptive_avg_pool2d_grad", {{{2, 3, 2, 2}}, {{"output_size", V{2, 2}}, {"input_shape", V{2, 3, 8, 8}}}}},
      {"layer_norm", {{{4, 6}, {6}, {6}}, {{"axis", int64_t{1}}}}},
      {"concat", {{{4, 6}, {4, 6}, {4, 6}}, {{"axis", int64_t{1}}}}},
      {"gather", {{{4, 6}, {4, 2}}, {{"axis", int64_t{1}}}}},
      {"index_select", {{{10, 6}, {4}}, {}}},
      {"scatter_add", {{{4, 6}, {4, 2}, {4, 2}}, {{"axis", int64_t{1}}}}},
      {"topk", {{{4, 6}}, {{"k", int64_t{2}}, {"axis", int64_t{1}}}}},
      {"pad", {{{4, 6}}, {{"pads", V{0, 0, 1, 1}}}}},
      {"fused_linear", {{{4, 6}, {6, 8}, {8}}, {{"activation", int64_t{1}}}}},
      {"fused_rotary", {{{4, 6}, {4, 3}, {4, 3}}, {}}},
      {"fused_rotary_grad", {{{4, 6}, {4, 3}, {4, 3}}, {}}},
      {"fused_rms_scale", {{{4, 6}, {4, 1}, {}, {6}}, {}}},
      {"relu_grad", {{{4, 6}, {4, 6}}, {}}},
      {"fused_adam",
       {{{4, 6}, {4, 6}, {4, 6}, {4, 6}, {}, {}, {}, {}, {}, {}, {}, {}, {}}, {{"with_decay", int64_t{1}}}}},
      {"fused_tanh_grad", {{{4, 6}, {4, 6}, {}}, {}}},
      {"fused_sigmoid_grad", {{{4, 6}, {4, 6}, {}}, {}}},
      {"fused_log_softmax", {{{4, 6}}, {{"axis", int64_t{1}}}}},
      {"batch_norm_train", {{{2, 3, 4, 4}, {3}, {3}}, {}}},
      {"batch_norm_train_grad", {{{2, 3, 4, 4}, {2, 3, 4, 4}, {3}}, {}}},
      {"fused_masked_softmax", {{{2, 4, 6}, {}, {4, 6}, {}}, {}}},
      {"fused_masked_softmax_grad", {{{2, 4, 6}, {2, 4, 6}, {4, 6}, {}, {}}, {}}},
      {"where", {{{4, 6}, {4, 6}, {6}}, {}}},
  };
  auto it = special.find(std::string(s.name));
  if (it != special.end()) return it->second;
  switch (s.kind) {
    case ops::OpKind::kBinary:
    case ops::OpKind::kCompare:
      return {{{4, 6}, {6}}, {}};
    default:
      return {{{4, 6}}, {}};
  }
}

TEST(SpmdRules, EveryOpOfTheTableHasARuleThatFitsItsSchema) {
  for (const ops::OpSchema& s : ops::AllSchemas()) {
    SCOPED_TRACE(std::string(s.name));
    const Sample sample = SampleFor(s);
    std::vector<ops::TensorMeta> metas;
    for (const Dims& d : sample.inputs) {
      DType t = DType::kFloat32;
      if ((s.name == "gather" || s.name == "scatter_add") && metas.size() == 1) t = DType::kInt64;
      if (s.name == "index_select" && metas.size() == 1) t = DType::kInt64;
      if (s.name == "where" && metas.empty()) t = DType::kBool;
      if (s.name.starts_with("fused_masked_softmax") && metas.size() == 2) t = DType::kBool;
      if ((s.name == "logical_and" || s.name == "logical_or" || s.name == "logical_not")) t = DType::kBool;
      metas.push_back({t, d});
    }
    ops::AttrValues attrs;
    for (const ops::AttrSpec& a : s.attrs) {
      auto it = sample.attrs.find(std::string(a.name));
      attrs.push_back(it != sample.attrs.end() ? it->second : a.default_value);
    }
    std::vector<ops::TensorMeta> outs;
    try {
      outs = s.Infer(metas, attrs);
    } catch (const Error& e) {
      FAIL() << "the sample does not fit the schema (fix SampleFor): " << e.what();
    }
    ASSERT_TRUE(HasSpmdRule(s.op));
    SpmdRule rule;
    ASSERT_NO_THROW(rule = SpmdRuleFor(s.op, metas, attrs)) << "no SPMD rule";
    ASSERT_EQ(rule.inputs.size(), metas.size());
    for (size_t i = 0; i < metas.size(); ++i) EXPECT_EQ(static_cast<int>(rule.inputs[i].size()), metas[i].shape.size()) << i;
    ASSERT_EQ(rule.outputs.size(), outs.size());
    for (size_t o = 0; o < outs.size(); ++o) EXPECT_EQ(static_cast<int>(rule.outputs[o].size()), outs[o].shape.size()) << o;
    for (const auto& dims : rule.inputs) {
      for (int f : dims) EXPECT_LT(f, static_cast<int>(rule.factor_size.size()));
    }
  }
}

// ---- decisions ----

TEST(SpmdDecide, ShardedContractionGivesPartialAndTheDumpSaysWhy) {
  const ProcessMesh mesh = Grid();
  const Tensor a = Rand({6, 8}, 1), b = Rand({8, 4}, 2);
  const DistTensor da = shard_tensor(a, mesh, {S(0), S(1)}), db = shard_tensor(b, mesh, {R, S(0)});
  ExplainScope explain;
  ResetCollectiveCounts();
  const DistTensor c = matmul(da, db);
  EXPECT_EQ(GetCollectiveCounts().total(), 0) << GetCollectiveCounts().ToString();
  EXPECT_EQ(c.placements(), (Placements{S(0), Placement::Partial()}));
  EXPECT_NE(explain.text().find("matmul"), std::string::npos) << explain.text();
  EXPECT_NE(explain.text().find("contract"), std::string::npos) << explain.text();
  ExpectClose(FullTensor(c), matmul(a, b), 1e-6, "matmul");
}

TEST(SpmdDecide, AnnotatedInputsKeepTheirPlacements) {
  const ProcessMesh mesh = Line();
  const Tensor a = Rand({8, 8}, 3), b = Rand({8, 8}, 4);
  // Symmetric costs: without annotations the first factor (dim 0) wins; an annotated S(1) input wins.
  const DistTensor a1 = shard_tensor(a, mesh, {S(1)});
  DistTensor b0 = shard_tensor(b, mesh, {S(0)});
  b0.set_annotated(false);
  EXPECT_EQ(add(a1, b0).placements(), (Placements{S(1)}));
  DistTensor a1u = a1;
  a1u.set_annotated(false);
  EXPECT_EQ(add(a1u, b0).placements(), (Placements{S(0)}));
  ExpectClose(FullTensor(add(a1, b0)), a + b, 0, "add");
}

// ---- each family against one device ----

TEST(SpmdEager, ElementwiseBroadcastReductionsAndSoftmaxMatchOneDevice) {
  const ProcessMesh mesh = Grid();
  const Tensor x = Rand({6, 8}, 5), y = Rand({8}, 6);
  const DistTensor dx = shard_tensor(x, mesh, {S(0), S(1)}), dy = shard_tensor(y, mesh, {R, S(0)});
  ExpectClose(FullTensor(add(dx, dy)), x + y, 0, "add broadcast");
  ExpectClose(FullTensor(mul(dx, dy)), x * y, 0, "mul broadcast");
  ExpectClose(FullTensor(sum(dx, {1})), oar::sum(x, {1}), 1e-6, "sum over a sharded axis");
  ExpectClose(FullTensor(sum(dx)), oar::sum(x), 1e-6, "sum of all");
  ExpectClose(FullTensor(mean(dx, {0}, true)), oar::mean(x, {0}, true), 1e-6, "mean");
  ExpectClose(FullTensor(amax(dx, {1})), oar::amax(x, {1}), 0, "max");
  ExpectClose(FullTensor(softmax(dx, 1)), oar::softmax(x, 1), 1e-6, "softmax over a sharded axis");
  ExpectClose(FullTensor(relu(dx)), oar::relu(x), 0, "relu");
  // Partial inputs flow through linear ops without communication.
  const DistTensor p = matmul(shard_tensor(x, mesh, {R, S(1)}), shard_tensor(Rand({8, 3}, 7), mesh, {R, S(0)}));
  ResetCollectiveCounts();
  const DistTensor q = sum(mul(p, shard_tensor(Rand({6, 3}, 8), mesh, {R, R})), {0});
  EXPECT_EQ(GetCollectiveCounts().total(), 0);
  EXPECT_TRUE(q.placements()[1].is_partial());
  ExpectClose(FullTensor(q), oar::sum(matmul(x, Rand({8, 3}, 7)) * Rand({6, 3}, 8), {0}), 1e-5, "partial chain");
}

TEST(SpmdEager, ViewsConcatAndSliceMatchOneDevice) {
  const ProcessMesh mesh = Grid();
  const Tensor x = Rand({8, 6}, 9);
  const DistTensor dx = shard_tensor(x, mesh, {S(0), R});
  ResetCollectiveCounts();
  const DistTensor r = reshape(dx, {2, 4, 6});  // 8 -> 2 x 4 keeps dp's sharding on the 2
  EXPECT_EQ(GetCollectiveCounts().total(), 0);
  EXPECT_EQ(r.placements(), (Placements{S(0), R}));
  ExpectClose(FullTensor(r), x.reshape({2, 4, 6}), 0, "reshape");
  const DistTensor t = transpose(dx, 0, 1);
  EXPECT_EQ(t.placements(), (Placements{S(1), R}));
  ExpectClose(FullTensor(t), x.transpose(0, 1), 0, "transpose");
  ExpectClose(FullTensor(slice(dx, 1, 1, 5)), x.slice(1, 1, 5), 0, "slice of a whole dim");
  ExpectClose(FullTensor(slice(dx, 0, 1, 7, 2)), x.slice(0, 1, 7, 2), 0, "slice of a sharded dim");
  const DistTensor parts[2] = {dx, shard_tensor(x, mesh, {R, S(1)})};
  const Tensor whole[2] = {x, x};
  ExpectClose(FullTensor(concat(parts, 1)), oar::concat(whole, 1), 0, "concat");
  ExpectClose(FullTensor(concat(parts, 0)), oar::concat(whole, 0), 0, "concat on a sharded axis");
  const DistTensor padded = One(Apply(Op::kPad, std::vector{shard_tensor(x, mesh, {S(0), S(1)})},
                                      {std::vector<int64_t>{0, 0, 1, 2}, 0.5}));
  EXPECT_EQ(padded.placements(), (Placements{S(0), R}));
  ExpectClose(FullTensor(padded), oar::pad(x, std::vector<int64_t>{0, 0, 1, 2}, 0.5), 0, "pad of a sharded dim");
  // A reshape that cannot keep the sharding gathers first (12 rows over 4: 3 per rank, 12 -> 2 x 6).
  const Tensor z = Rand({12, 2}, 10);
  ExpectClose(FullTensor(reshape(shard_tensor(z, Line(), {S(0)}), {2, 6, 2})), z.reshape({2, 6, 2}), 0, "reshape gathers");
}

// A fused projection sharded by heads (Megatron's qkv): the weight's rows [3, heads, head_dim] strided,
// Shard(0, 3) — rank 1 of tp holds rows 2, 3 (its q head), 6, 7 (k) and 10, 11 (v) — and its output keeps
// that sharding, strided on the fused dim and plain on the heads dim of the heads view, with no collective.
TEST(SpmdEager, FusedProjectionShardedByHeadsStaysShardedThroughTheHeadsView) {
  const ProcessMesh mesh = Grid();
  const Tensor w = Rand({12, 4}, 21), x = Rand({2, 3, 4}, 22);  // 3 x (2 heads x 2) rows
  const DistTensor dw = shard_tensor(w, mesh, {R, Placement::Shard(0, 3)});
  const std::vector<int64_t> rows = {2, 3, 6, 7, 10, 11};
  std::vector<Tensor> want;
  for (int64_t r : rows) want.push_back(w.slice(0, r, r + 1));
  ExpectClose(dw.local(1), oar::concat(want, 0), 0, "rank 1's rows");
  ExpectClose(FullTensor(dw), w, 0, "strided shard, gathered");
  ResetCollectiveCounts();
  const DistTensor y = linear(shard_tensor(x, mesh, {S(0), R}), dw);
  EXPECT_EQ(y.placements(), (Placements{S(0), Placement::Shard(2, 3)}));
  const DistTensor heads = reshape(y, {2, 3, 3, 2, 2});
  EXPECT_EQ(heads.placements(), (Placements{S(0), S(3)}));
  const DistTensor back = reshape(heads, {2, 3, 12});
  EXPECT_EQ(back.placements(), y.placements());
  EXPECT_EQ(GetCollectiveCounts().total(), 0) << GetCollectiveCounts().ToString();
  ExpectClose(FullTensor(heads), oar::linear(x, w).reshape({2, 3, 3, 2, 2}), 1e-6, "the heads view");
  // Strided to plain and back go through R: one all_gather, then local slices.
  ResetCollectiveCounts();
  ExpectClose(Reshard(dw, {R, S(0)}).local(1), shard_tensor(w, mesh, {R, S(0)}).local(1), 0, "to S(0)");
  EXPECT_EQ(GetCollectiveCounts().all_gather, 1) << GetCollectiveCounts().ToString();
  EXPECT_EQ(GetCollectiveCounts().total(), 1) << GetCollectiveCounts().ToString();
  // Gradients flow through the strided steps (their adjoints: reduce_scatter of the unfolded dim, the slice's).
  const Tensor weight = Rand({12, 4}, 25);
  const Placements strided = {R, Placement::Shard(0, 3)};
  for (const auto& [from, to] : std::vector<std::pair<Placements, Placements>>{
           {strided, {R, R}}, {strided, {R, S(0)}}, {strided, {S(1), R}}, {{R, R}, strided}, {{S(0), R}, strided}}) {
    Tensor leaf = w.clone().set_requires_grad(true);
    oar::sum(FullTensor(Reshard(shard_tensor(leaf, mesh, from), to)) * weight).backward();
    ExpectClose(leaf.grad(), weight, 0, PlacementsString(from) + " -> " + PlacementsString(to));
  }
  ExpectClose(Reshard(shard_tensor(w, mesh, {R, R}), {R, Placement::Shard(0, 3)}).local(3), dw.local(3), 0, "R to S(0,3)");
  // A strided dim takes one mesh dim: adding a tensor sharded by rows on dp to the strided weight gathers
  // (each mesh dim decides on its own, and either sharding would shard dim 0 on both) — no refused placement.
  const DistTensor twice = add(shard_tensor(w, mesh, {S(0), R}), dw);
  EXPECT_EQ(twice.placements(), (Placements{R, R}));
  ExpectClose(FullTensor(twice), w + w, 0, "add");
  EXPECT_EQ(ParsePlacements("[R, S(0,3)]"), (Placements{R, Placement::Shard(0, 3)}));
  EXPECT_EQ(PlacementsString({R, Placement::Shard(0, 3)}), "[R, S(0,3)]");
  EXPECT_THROW(shard_tensor(Rand({10, 4}, 23), mesh, {R, Placement::Shard(0, 3)}), Error);  // 3 does not divide 10
  EXPECT_THROW(shard_tensor(w, mesh, {S(0), Placement::Shard(0, 3)}), Error);  // a strided dim takes one mesh dim
}

// scatter_add with the scattered rows sharded (the embedding's backward under data parallelism): each rank
// scatters its rows into its Partial(sum) share of x — no gather of the rows, the sum is the whole scatter.
TEST(SpmdEager, ScatterAddOfShardedRowsIsPartialWithoutGathering) {
  const ProcessMesh mesh = Grid();
  std::vector<int64_t> ix(8 * 3);
  for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<int64_t>((i * 7 + 1) % 5);
  const Tensor x = oar::zeros({5, 3}, DType::kFloat32, kDev), idx = FromVector<int64_t>(ix, {8, 3}, kDev),
               src = Rand({8, 3}, 24);
  DistTensor dx = shard_tensor(x, mesh, {R, R});
  dx.set_annotated(false);
  ResetCollectiveCounts();
  const DistTensor out = One(Apply(Op::kScatterAdd,
                                   std::vector{dx, shard_tensor(idx, mesh, {S(0), R}), shard_tensor(src, mesh, {S(0), R})},
                                   {int64_t{0}}));
  EXPECT_EQ(GetCollectiveCounts().total(), 0) << GetCollectiveCounts().ToString();
  EXPECT_EQ(out.placements(), (Placements{Placement::Partial(), R}));
  ExpectClose(FullTensor(out), oar::scatter_add(x, 0, idx, src), 1e-6, "scatter_add");
}

TEST(SpmdEager, NormsEmbeddingAttentionAndCrossEntropyMatchOneDevice) {
  const ProcessMesh mesh = Grid();
  const Tensor x = Rand({4, 6, 8}, 11), w = Rand({8}, 12);
  const DistTensor dx = shard_tensor(x, mesh, {S(0), S(2)});
  ExpectClose(FullTensor(rms_norm(dx, 1, shard_tensor(w, mesh, {R, R}))), oar::rms_norm(x, 1, w), 1e-6, "rms_norm");
  ExpectClose(FullTensor(layer_norm(dx, 1, shard_tensor(w, mesh, {R, S(0)}), shard_tensor(w, mesh, {R, R}))),
              oar::layer_norm(x, 1, w, w), 1e-5, "layer_norm");
  const Tensor table = Rand({10, 8}, 13);
  const Tensor idx = FromVector<int64_t>({0, 9, 3, 3, 7, 1, 5, 2}, {2, 4}, kDev);
  for (const Placements& p : {Placements{R, S(0)}, Placements{R, S(1)}, Placements{S(0), S(1)}}) {
    const DistTensor e = embedding(shard_tensor(table, mesh, p), shard_tensor(idx, mesh, {S(0), R}));
    ExpectClose(FullTensor(e), oar::embedding(table, idx), 0, "embedding " + PlacementsString(p));
  }
  const Tensor q = Rand({2, 4, 5, 3}, 14), k = Rand({2, 4, 5, 3}, 15), v = Rand({2, 4, 5, 3}, 16);
  const Placements heads{S(0), S(1)};
  ExpectClose(FullTensor(scaled_dot_product_attention(shard_tensor(q, mesh, heads), shard_tensor(k, mesh, heads),
                                                      shard_tensor(v, mesh, heads), true)),
              oar::scaled_dot_product_attention(q, k, v, true), 1e-6, "attention");
  const Tensor logits = Rand({6, 5}, 17);
  const Tensor target = FromVector<int64_t>({0, 4, 2, 2, 1, 3}, {6}, kDev);
  const DistTensor ce = cross_entropy(shard_tensor(logits, mesh, {S(0), S(1)}), shard_tensor(target, mesh, {S(0), R}));
  EXPECT_EQ(ce.placements(), (Placements{R, R}));
  ExpectClose(FullTensor(ce), oar::cross_entropy(logits, target), 1e-6, "cross_entropy");
}

// ---- gradients and the tensor-parallel MLP ----

TEST(SpmdAutograd, MegatronMlpHasOneAllReduceEachWayAndOneDeviceGradients) {
  const ProcessMesh mesh = Line();
  const Tensor x = Rand({3, 8}, 20), w1 = Rand({16, 8}, 21), w2 = Rand({8, 16}, 22);
  // One device.
  Tensor rx = x.detach().set_requires_grad(true), rw1 = w1.detach().set_requires_grad(true),
         rw2 = w2.detach().set_requires_grad(true);
  const Tensor ry = oar::linear(oar::silu(oar::linear(rx, rw1)), rw2);
  oar::sum(ry * ry).backward();
  // Column-parallel then row-parallel on four devices.
  DistTensor dx = shard_tensor(x, mesh, {R}).detach().set_requires_grad(true);
  DistTensor dw1 = shard_tensor(w1, mesh, {S(0)}).detach().set_requires_grad(true);
  DistTensor dw2 = shard_tensor(w2, mesh, {S(1)}).detach().set_requires_grad(true);
  ResetCollectiveCounts();
  const DistTensor h = silu(linear(dx, dw1));
  EXPECT_EQ(h.placements(), (Placements{S(1)}));
  const DistTensor y = Reshard(linear(h, dw2), {R});
  const CollectiveCounts fwd = GetCollectiveCounts();
  EXPECT_EQ(fwd.all_reduce, 1) << fwd.ToString();
  EXPECT_EQ(fwd.total(), 1) << fwd.ToString();
  const DistTensor loss = sum(mul(y, y));
  ResetCollectiveCounts();
  Backward(loss);
  const CollectiveCounts bwd = GetCollectiveCounts();
  EXPECT_EQ(bwd.all_reduce, 1) << bwd.ToString();
  EXPECT_EQ(bwd.total(), 1) << bwd.ToString();
  ExpectClose(FullTensor(loss), oar::sum(ry * ry), 1e-6, "loss");
  EXPECT_EQ(dw1.grad().placements(), (Placements{S(0)}));
  ExpectClose(FullTensor(dw1.grad()), rw1.grad(), 1e-5, "w1 grad");
  // 2e-5: the sharded contraction sums in another order than one device (seen 1.1e-5 relative on an AVX-512
  // machine, where oneDNN picks its brgemm kernels; deterministic, not a placement error).
  ExpectClose(FullTensor(dw2.grad()), rw2.grad(), 2e-5, "w2 grad");
  ExpectClose(FullTensor(dx.grad()), rx.grad(), 1e-5, "x grad");
}

// Regression (conformance L3): a row-parallel Linear with a replicated bias gathered its input and its
// weight (two all_gathers) instead of one all_reduce of the partial product. With biases on both layers the
// Megatron MLP still lowers to exactly one all_reduce forward and one backward.
TEST(SpmdAutograd, MegatronMlpWithBiasesHasOneAllReduceEachWay) {
  const ProcessMesh mesh = Line();
  const Tensor x = Rand({3, 8}, 30), w1 = Rand({16, 8}, 31), b1 = Rand({16}, 32), w2 = Rand({8, 16}, 33),
               b2 = Rand({8}, 34);
  Tensor rx = x.detach().set_requires_grad(true), rw1 = w1.detach().set_requires_grad(true),
         rb1 = b1.detach().set_requires_grad(true), rw2 = w2.detach().set_requires_grad(true),
         rb2 = b2.detach().set_requires_grad(true);
  const Tensor ry = oar::linear(oar::silu(oar::linear(rx, rw1, rb1)), rw2, rb2);
  oar::sum(ry * ry).backward();
  DistTensor dx = shard_tensor(x, mesh, {R}).detach().set_requires_grad(true);
  DistTensor dw1 = shard_tensor(w1, mesh, {S(0)}).detach().set_requires_grad(true);
  DistTensor db1 = shard_tensor(b1, mesh, {S(0)}).detach().set_requires_grad(true);
  DistTensor dw2 = shard_tensor(w2, mesh, {S(1)}).detach().set_requires_grad(true);
  DistTensor db2 = shard_tensor(b2, mesh, {R}).detach().set_requires_grad(true);
  db2.set_annotated(true);
  ResetCollectiveCounts();
  const DistTensor h = silu(linear(dx, dw1, db1));
  EXPECT_EQ(h.placements(), (Placements{S(1)}));
  const DistTensor y = Reshard(linear(h, dw2, db2), {R});
  const CollectiveCounts fwd = GetCollectiveCounts();
  EXPECT_EQ(fwd.all_reduce, 1) << fwd.ToString();
  EXPECT_EQ(fwd.total(), 1) << fwd.ToString();
  const DistTensor loss = sum(mul(y, y));
  ResetCollectiveCounts();
  Backward(loss);
  const CollectiveCounts bwd = GetCollectiveCounts();
  EXPECT_EQ(bwd.all_reduce, 1) << bwd.ToString();
  EXPECT_EQ(bwd.total(), 1) << bwd.ToString();
  ExpectClose(FullTensor(y), ry, 1e-5, "output");
  ExpectClose(FullTensor(dw1.grad()), rw1.grad(), 1e-5, "w1 grad");
  ExpectClose(FullTensor(db1.grad()), rb1.grad(), 1e-5, "b1 grad");
  ExpectClose(FullTensor(dw2.grad()), rw2.grad(), 1e-5, "w2 grad");
  ExpectClose(FullTensor(db2.grad()), rb2.grad(), 1e-5, "b2 grad");
  ExpectClose(FullTensor(dx.grad()), rx.grad(), 1e-5, "x grad");
}

TEST(SpmdAutograd, DataAndTensorParallelGradientsMatchOneDevice) {
  const ProcessMesh mesh = Grid();
  const Tensor x = Rand({4, 8}, 30), w1 = Rand({6, 8}, 31), w2 = Rand({8, 6}, 32), g = Rand({8}, 33);
  const Tensor target = FromVector<int64_t>({1, 7, 0, 3}, {4}, kDev);
  Tensor rw1 = w1.detach().set_requires_grad(true), rw2 = w2.detach().set_requires_grad(true),
         rg = g.detach().set_requires_grad(true);
  oar::cross_entropy(oar::linear(oar::relu(oar::linear(oar::rms_norm(x, 1, rg), rw1)), rw2), target).backward();
  DistTensor dw1 = shard_tensor(w1, mesh, {R, S(0)}).detach().set_requires_grad(true);
  DistTensor dw2 = shard_tensor(w2, mesh, {R, S(1)}).detach().set_requires_grad(true);
  DistTensor dg = shard_tensor(g, mesh, {R, R}).detach().set_requires_grad(true);
  const DistTensor dx = shard_tensor(x, mesh, {S(0), R});
  const DistTensor loss =
      cross_entropy(linear(relu(linear(rms_norm(dx, 1, dg), dw1)), dw2), shard_tensor(target, mesh, {S(0), R}));
  Backward(loss);
  ExpectClose(FullTensor(dw1.grad()), rw1.grad(), 1e-5, "w1 grad");
  ExpectClose(FullTensor(dw2.grad()), rw2.grad(), 1e-5, "w2 grad");
  ExpectClose(FullTensor(dg.grad()), rg.grad(), 1e-5, "norm weight grad");
}

// Megatron sequence parallel on a residual MLP block over tp=4 ([b, t, dim] with t sharded): the norm and
// the residual add run on the sequence shards; the block gathers the normed input before the
// column-parallel Linear and reduce-scatters the row-parallel product onto the sequence — one all_gather and
// one reduce_scatter each way, no all_reduce (plain tensor parallel has one all_reduce each way instead);
// the norm weight's gradient shares (each rank's sequence slice) are all-reduced by grad(). The block on
// dp=2,tp=2 the same with the batch on dp. Output and gradients vs one device.
TEST(SpmdAutograd, SequenceParallelBlockGathersAndReduceScattersInsteadOfAllReduce) {
  for (const ProcessMesh& mesh : {Line(), Grid()}) {
    SCOPED_TRACE(mesh.ToString());
    const int tp = mesh.DimIndex("tp");
    // Weights of Linear's scale (1/sqrt(fan_in)), so that the residual's gradient does not cancel large terms.
    const Tensor x = Rand({2, 8, 8}, 40), g = Rand({8}, 41), w1 = Rand({16, 8}, 42) * 0.35,
                 w2 = Rand({8, 16}, 43) * 0.25;
    Tensor rx = x.detach().set_requires_grad(true), rg = g.detach().set_requires_grad(true),
           rw1 = w1.detach().set_requires_grad(true), rw2 = w2.detach().set_requires_grad(true);
    const Tensor ry = rx + oar::linear(oar::silu(oar::linear(oar::rms_norm(rx, 1, rg), rw1)), rw2);
    oar::sum(ry * ry).backward();
    auto on = [&](Placement t, Placement dp = R) {
      Placements p(static_cast<size_t>(mesh.ndim()), dp);
      p[static_cast<size_t>(tp)] = t;
      return p;
    };
    DistTensor dx = shard_tensor(x, mesh, on(S(1), S(0))).detach().set_requires_grad(true);
    DistTensor dg = shard_tensor(g, mesh, on(R)).detach().set_requires_grad(true);
    DistTensor dw1 = shard_tensor(w1, mesh, on(S(0))).detach().set_requires_grad(true);
    DistTensor dw2 = shard_tensor(w2, mesh, on(S(1))).detach().set_requires_grad(true);
    ResetCollectiveCounts();
    const DistTensor a = GatherSequence(rms_norm(dx, 1, dg), tp);
    EXPECT_EQ(a.placements(), on(R, S(0)));
    const DistTensor product = linear(silu(linear(a, dw1)), dw2);
    EXPECT_EQ(product.placements(), on(Placement::Partial(), S(0)));
    const DistTensor y = add(dx, ScatterSequence(product, tp, 1));
    EXPECT_EQ(y.placements(), on(S(1), S(0)));
    const CollectiveCounts fwd = GetCollectiveCounts();
    EXPECT_EQ(fwd.all_gather, 1) << fwd.ToString();
    EXPECT_EQ(fwd.reduce_scatter, 1) << fwd.ToString();
    EXPECT_EQ(fwd.total(), 2) << fwd.ToString();
    const DistTensor loss = sum(mul(y, y));  // Partial(sum) on every mesh dim: no collective
    ResetCollectiveCounts();
    Backward(loss);
    const CollectiveCounts bwd = GetCollectiveCounts();
    EXPECT_EQ(bwd.all_gather, 1) << bwd.ToString();
    EXPECT_EQ(bwd.reduce_scatter, 1) << bwd.ToString();
    EXPECT_EQ(bwd.total(), 2) << bwd.ToString();
    ExpectClose(FullTensor(y), ry, 1e-5, "output");
    ExpectClose(FullTensor(loss), oar::sum(ry * ry), 1e-5, "loss");
    ExpectClose(FullTensor(dx.grad()), rx.grad(), 1e-5, "x grad");
    ExpectClose(FullTensor(dw1.grad()), rw1.grad(), 1e-5, "w1 grad");
    ExpectClose(FullTensor(dw2.grad()), rw2.grad(), 2e-5, "w2 grad");
    ResetCollectiveCounts();
    ExpectClose(FullTensor(dg.grad()), rg.grad(), 1e-5, "norm weight grad");
    EXPECT_GE(GetCollectiveCounts().all_reduce, 1) << "the norm weight's shares are summed over the sequence";
  }
}

TEST(SpmdAutograd, SequenceParallelRefusesWhatIsNotItsRegionBoundary) {
  const ProcessMesh mesh = Line();
  const Tensor x = Rand({2, 8, 4}, 44);
  try {
    (void)GatherSequence(shard_tensor(x, mesh, {R}), 0);
    FAIL() << "gathering a replicated tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected the sequence-parallel activation sharded on mesh dim 0 (tp)"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)ScatterSequence(shard_tensor(x, mesh, {S(2)}), 0, 1);
    FAIL() << "scattering a sharded tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a row-parallel product (Partial(sum)) or a replicated tensor"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)ScatterSequence(shard_tensor(x, mesh, {R}), 1, 1), Error) << "no mesh dim 1";
  EXPECT_THROW((void)ScatterSequence(shard_tensor(x, mesh, {R}), 0, 3), Error) << "no tensor dim 3";
  // Replicate -> Shard(seq) is a local slice: no collective.
  ResetCollectiveCounts();
  const DistTensor sliced = ScatterSequence(shard_tensor(x, mesh, {R}), 0, 1);
  EXPECT_EQ(GetCollectiveCounts().total(), 0);
  ExpectClose(FullTensor(sliced), x, 0, "sliced");
}

}  // namespace
}  // namespace oar::distributed
