// Static auto-parallel on the llama example: its captured forward (ExportForward, the op dialect jit::Capture
// records) placed by spmd-propagate over tp=2 and dp=2,tp=2 on kunlun_sim, run over the mesh (RunSpmd: one
// scheduler::Executor per rank), and compared with the eager op-by-op run (RunSpmdEager) and the one-device
// forward; the collectives the pass inserts are counted.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <span>
#include <cstdlib>
#include <filesystem>

#include "core/distributed/collectives.h"
#include "core/distributed/spmd_pass.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/jit/capture.h"
#include "core/runtime/runtime.h"
#include "core/runtime/testing.h"
#include "core/scheduler/executor.h"
#include "examples/models.h"

namespace oar::examples {
namespace {

namespace d = distributed;

const bool kConfigured = [] {
  setenv("OAR_KUNLUN_SIM_DEVICES", "4", 1);
  return runtime::testing::UseOnlyPlugins(OAR_PLUGIN_DIR, {"cpu", "kunlun_sim"});
}();

constexpr int64_t kBatch = 2, kSeq = 16;
const Device kDev("kunlun_sim:0");

std::vector<float> Host(const Tensor& t) { return t.to(Device("cpu")).ToVector<float>(); }

struct Llama {
  std::unique_ptr<Example> e = MakeExample("llama", kDev, 5);
  InferenceForward f = e->ExportForward(kBatch, kSeq);
  Tensor ids;
  Llama() {
    std::vector<int64_t> v(static_cast<size_t>(kBatch * kSeq));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 37 + 5) % 121);
    ids = FromVector<int64_t>(v, {kBatch, kSeq}, kDev);
  }
  std::unique_ptr<jit::Captured> Capture(ir::IrContext& ctx) {
    jit::CaptureOptions o;
    o.state = f.state;
    return std::make_unique<jit::Captured>(jit::Capture(ctx, f.fn, f.inputs, std::vector<Tensor>{ids}, kDev, o));
  }
  std::vector<float> OneDevice() { return Host(f.fn(std::vector<Tensor>{ids}).at(0)); }
};

// Megatron on the mesh dim tp: the fused qkv projection column-parallel by heads — its rows [3, heads,
// head_dim] strided-sharded, Shard(0, 3), so each rank holds its heads' q, k and v rows — gate and up
// column-parallel, the attention output and down projections row-parallel; on dp the batch rows (`rows`:
// the inputs to shard so).
void Annotate(ir::Program& p, const d::ProcessMesh& mesh, std::span<const std::string> rows = {}) {
  d::SetProgramMesh(p, mesh);
  auto on_tp = [&](d::Placement tp, d::Placement other = d::Placement::Replicate()) {
    d::Placements pl;
    for (const std::string& n : mesh.dim_names()) pl.push_back(n == "tp" ? tp : other);
    return pl;
  };
  int sharded = 0;
  for (const auto& [name, t] : p.parameters) {
    const d::Placement tp = LlamaTensorParallelPlacement(name);
    if (name.starts_with("layers.") && !tp.is_replicate()) {
      d::AnnotatePlacements(p, name, on_tp(tp));
      ++sharded;
    }
  }
  ASSERT_EQ(sharded, 10);  // qkv, out, gate, up, down in each of the 2 layers
  for (const std::string& name : rows) d::AnnotatePlacements(p, name, on_tp(d::Placement::Replicate(), d::Placement::Shard(0)));
}

void ExpectForwardEqualsOneDevice(const std::string& spec, int64_t all_reduces, int64_t collectives) {
  Llama m;
  ir::IrContext ctx;
  auto c = m.Capture(ctx);
  ir::Program& p = *c->program;
  const d::ProcessMesh mesh = d::ProcessMesh::Parse(spec, "kunlun_sim");
  const std::vector<std::string> rows = {"ids"};
  Annotate(p, mesh, mesh.ndim() == 2 ? rows : std::vector<std::string>{});
  const d::PropagationReport report = d::PropagatePlacements(p);
  ir::Verify(p);
  const std::string text = ir::Print(p);
  const int64_t total = report.count("dist.all_reduce") + report.count("dist.all_gather") +
                        report.count("dist.reduce_scatter") + report.count("dist.all_to_all");
  EXPECT_EQ(report.count("dist.all_reduce"), all_reduces) << text;
  EXPECT_EQ(total, collectives) << text;
  d::ResetCollectiveCounts();
  const std::vector<d::DistTensor> out = d::RunSpmd(p, mesh, std::vector<Tensor>{m.ids});
  EXPECT_EQ(d::GetCollectiveCounts().total(), collectives) << d::GetCollectiveCounts().ToString();
  ASSERT_EQ(out.size(), 1u);
  const std::vector<float> got = Host(d::FullTensor(out[0])), one = m.OneDevice();
  // Each rank's program through the scheduler equals the op-by-op eager run bitwise.
  EXPECT_EQ(got, Host(d::FullTensor(d::RunSpmdEager(p, mesh, std::vector<Tensor>{m.ids}).at(0)))) << spec;
  ASSERT_EQ(got.size(), one.size());
  float worst = 0;
  for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, std::abs(got[i] - one[i]) / (1 + std::abs(one[i])));
  EXPECT_LE(worst, 1e-5) << spec;
}

TEST(SpmdLlama, ForwardOnTp2HasOneAllReducePerAttentionAndMlpBlock) { ExpectForwardEqualsOneDevice("tp=2", 4, 4); }

TEST(SpmdLlama, ForwardOnDp2Tp2) { ExpectForwardEqualsOneDevice("dp=2,tp=2", 4, 5); }

}  // namespace
}  // namespace oar::examples

namespace oar::examples {
namespace {

// The training step (TrainOn: forward, cross-entropy, backward, gradient clipping, AdamW), captured as
// `oar train --static` replays it once Adam's moments exist, placed for Megatron on `spec`: the projections
// annotated as in the forward (the fused qkv by heads) and each one's AdamW moments like it (the optimiser
// state lives with its shard), on dp the batch's rows. Placed, counted (`all_reduces`, `all_gathers`, no
// other collective), run through one Executor per rank (the same collectives) and compared with the
// one-device run of the unplaced program (every output within 1e-5) and with the eager op-by-op run of
// the placed one (bitwise).
void ExpectTrainingStep(const std::string& spec, int64_t all_reduces, int64_t all_gathers) {
  std::unique_ptr<Example> e = MakeExample("llama", kDev, 5);
  (void)e->TrainStep(0, 10);  // the optimiser's moments exist, as in the replayed static step
  ir::IrContext ctx;
  jit::CaptureOptions o;
  std::vector<std::string> params;
  for (auto& [name, t] : e->module().NamedParameters()) {
    o.state.push_back({name, t});
    params.push_back(name);
  }
  for (auto& [name, t] : e->optimizer().NamedState()) o.state.push_back({name, t});
  std::vector<Tensor> in = e->Batch(1, 10);
  const size_t num_batch = in.size();
  for (double v : e->optimizer().NextStepScalars()) in.push_back(full({}, v, DType::kFloat32, kDev));
  std::vector<jit::InputSpec> specs;
  for (size_t i = 0; i < in.size(); ++i) specs.push_back(jit::InputSpec::Of("in" + std::to_string(i), in[i]));
  // The capture runs the step eagerly, updating the state in place: the program starts from a copy of the
  // state before it, and the eager step's loss and updated parameters are the one-device reference.
  std::map<std::string, Tensor> before;
  for (const jit::StateSlot& slot : o.state) before[slot.name] = slot.tensor->clone();
  jit::Captured c = jit::Capture(
      ctx,
      [&](std::span<const Tensor> x) {
        return e->TrainOn(x.first(num_batch),
                          [&](size_t k, DType dtype, Device) { return cast(x[num_batch + k], dtype); });
      },
      specs, in, kDev, o);
  ir::Program& p = *c.program;
  for (auto& [name, t] : p.parameters) {
    if (auto it = before.find(name); it != before.end()) t = it->second;
  }
  // One device: the same program through the scheduler, before placement.
  const std::vector<Tensor> one_device = scheduler::Executor(p, kDev).Run(in);
  const d::ProcessMesh mesh = d::ProcessMesh::Parse(spec, "kunlun_sim");
  std::vector<std::string> rows;
  for (size_t i = 0; i < num_batch && mesh.ndim() == 2; ++i) rows.push_back("in" + std::to_string(i));
  Annotate(p, mesh, rows);
  const std::string_view moments[] = {"adam.m.", "adam.v."};
  EXPECT_EQ(d::AnnotateStateLikeParameters(p, params, moments), 20);  // 2 layers x 5 projections x 2 moments
  const d::PropagationReport report = d::PropagatePlacements(p);
  ir::Verify(p);
  EXPECT_EQ(report.count("dist.all_reduce"), all_reduces) << report.explain;
  EXPECT_EQ(report.count("dist.all_gather"), all_gathers) << report.explain;
  EXPECT_EQ(report.count("dist.reduce_scatter"), 0);
  EXPECT_EQ(report.count("dist.all_to_all"), 0);
  // Run through one Executor per rank: the loss is the one-device step's (the eager run capture made).
  d::ResetCollectiveCounts();
  const std::vector<d::DistTensor> out = d::RunSpmd(p, mesh, in);
  EXPECT_EQ(d::GetCollectiveCounts().all_reduce, all_reduces) << d::GetCollectiveCounts().ToString();
  EXPECT_EQ(d::GetCollectiveCounts().all_gather, all_gathers) << d::GetCollectiveCounts().ToString();
  const std::vector<d::DistTensor> eager = d::RunSpmdEager(p, mesh, in);
  ASSERT_EQ(eager.size(), out.size());
  const float loss = Host(d::FullTensor(out.at(0))).at(0), one = Host(c.outputs.at(0)).at(0);
  EXPECT_NEAR(loss, one, 1e-5 * std::abs(one));
  // Every output (the loss, the updated parameters and moments, in their shards) is the one-device run's.
  ASSERT_EQ(out.size(), one_device.size());
  const std::vector<std::string> updates = jit::StateUpdates(p);
  int checked = 0;
  for (size_t u = 0; u < out.size(); ++u) {
    const std::vector<float> got = Host(d::FullTensor(out[u])), want = Host(one_device[u]);
    ASSERT_EQ(got.size(), want.size()) << u;
    EXPECT_EQ(got, Host(d::FullTensor(eager[u]))) << u;  // the scheduler path is the eager placed run, bitwise
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / (1 + std::abs(want[i])));
    EXPECT_LE(worst, 1e-5) << (u + updates.size() >= out.size() ? updates[u + updates.size() - out.size()] : "loss");
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(3 * params.size() + 1));
}

// Megatron on tp=2: forward, one all_reduce per attention and per MLP block (4); backward, one per block
// (4: the input gradient of the column-parallel qkv and of gate/up, each reduced once before its rms_norm
// backward); the gradient norm's sum of squares (1). No all_gather: with the fused qkv sharded by heads the
// attention runs on each rank's heads, forward and backward. Nothing else: the updated shards and moments
// stay sharded, the column-parallel weight gradients keep their sharding through the batch views. With the
// qkv replicated it was 7 all_reduce and 2 all_gather (the adjoint of the local slice of the attention
// output); before the propagation rules of docs/distributed.md, 26 and 20.
TEST(SpmdLlama, TrainingStepOnTp2HasMegatronsCollectivesAndEqualsOneDevice) { ExpectTrainingStep("tp=2", 9, 0); }

// dp=2 x tp=2: tp's 9 as above; on dp, one all_reduce per parameter gradient (16: the tied embedding, 5 norms,
// 2 x qkv, out, gate, up, down), all before the gradient norm, which is then Partial on tp only; and 2 for the
// loss, the sum of the rows' losses and their count, each a scalar (cross-entropy's exact mean). No
// all_gather: the embedding's backward scatters each rank's rows into its Partial share of the table, which
// the embedding gradient's dp all_reduce sums (before, scatter_add kept the scattered axis whole: 2
// all_gathers, of the rows' indices and gradients).
TEST(SpmdLlama, TrainingStepOnDp2Tp2) { ExpectTrainingStep("dp=2,tp=2", 27, 0); }

}  // namespace
}  // namespace oar::examples

namespace oar::examples {
namespace {

// Eager Megatron sequence parallel (`oar train llama --mesh tp=2 --sequence-parallel`): the step losses of
// the one-device run within 1e-5 relative, and per step, in place of plain tensor parallel's all_reduce per
// block each way, one all_gather and one reduce_scatter each way.
struct EagerSteps {
  std::vector<double> losses;
  std::vector<d::CollectiveCounts> counts;  // per step
};
EagerSteps TrainEagerSteps(const std::string& spec, bool sequence_parallel, int steps) {
  ParallelOptions o;
  o.sequence_parallel = sequence_parallel;
  std::unique_ptr<Example> e = spec.empty()
                                   ? MakeExample("llama", kDev, 5)
                                   : MakeParallelExample("llama", d::ProcessMesh::Parse(spec, "kunlun_sim"), 5, o);
  EagerSteps r;
  for (int i = 0; i < steps; ++i) {
    d::ResetCollectiveCounts();
    r.losses.push_back(e->TrainStep(i, steps));
    r.counts.push_back(d::GetCollectiveCounts());
  }
  return r;
}

void ExpectLossesClose(const EagerSteps& got, const EagerSteps& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << what << " step " << i;
  }
}

// tp=2, 2 layers. Plain tensor parallel, per step: 4 all_reduce forward (after each row-parallel product),
// 4 backward (their adjoints), and 6 for the replicated parameters' gradient shares (grad(): the tied
// embedding, 4 block norms, the final norm) = 14. Sequence parallel: per block 2 all_gather (the normed
// inputs of attention and MLP) and 2 reduce_scatter (the row-parallel products) forward = 4 + 4, plus the
// final norm's output gathered for the replicated head (1 all_gather); backward their adjoints (5
// reduce_scatter, 4 all_gather); the embedding's output is sliced onto the sequence locally (its adjoint
// pads, no collective); the same 6 gradient all_reduces — now the norms' weights really are partial (each
// rank saw its sequence slice), as Megatron's sequence-parallel norm gradients are all-reduced over tp.
TEST(SequenceParallelLlama, Tp2GathersAndReduceScattersInsteadOfAllReduceAndEqualsOneDevice) {
  constexpr int kSteps = 2;
  const EagerSteps one = TrainEagerSteps("", false, kSteps);
  const EagerSteps tp = TrainEagerSteps("tp=2", false, kSteps);
  const EagerSteps sp = TrainEagerSteps("tp=2", true, kSteps);
  ExpectLossesClose(tp, one, "tp=2");
  ExpectLossesClose(sp, one, "tp=2 sequence parallel");
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(tp.counts[i].all_reduce, 14) << tp.counts[i].ToString();
    EXPECT_EQ(tp.counts[i].total(), 14) << tp.counts[i].ToString();
    EXPECT_EQ(sp.counts[i].all_reduce, 6) << sp.counts[i].ToString();
    EXPECT_EQ(sp.counts[i].all_gather, 9) << sp.counts[i].ToString();
    EXPECT_EQ(sp.counts[i].reduce_scatter, 9) << sp.counts[i].ToString();
    EXPECT_EQ(sp.counts[i].all_to_all, 0) << sp.counts[i].ToString();
  }
}

}  // namespace
}  // namespace oar::examples
