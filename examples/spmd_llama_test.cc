// Static auto-parallel on the llama example: its captured forward (ExportForward, the op dialect jit::Capture
// records) placed by spmd-propagate over tp=2 and dp=2,tp=2 on kunlun_sim, run over the mesh (RunSpmd: one
// scheduler::Executor per rank), and compared with the eager op-by-op run (RunSpmdEager) and the one-device
// forward; the collectives the pass inserts are counted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/distributed/collectives.h"
#include "core/distributed/spmd_pass.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/jit/capture.h"
#include "core/runtime/runtime.h"
#include "core/runtime/testing.h"
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

// Megatron on the mesh dim tp: the attention output and down projections row-parallel, gate and up
// column-parallel; the fused qkv projection replicated (its [3 · heads · head_dim] rows split contiguously
// are not a split by heads: see docs/distributed.md); on dp the batch rows.
void Annotate(ir::Program& p, const d::ProcessMesh& mesh) {
  d::SetProgramMesh(p, mesh);
  auto on_tp = [&](d::Placement tp, d::Placement other = d::Placement::Replicate()) {
    d::Placements pl;
    for (const std::string& n : mesh.dim_names()) pl.push_back(n == "tp" ? tp : other);
    return pl;
  };
  for (int l = 0; l < 2; ++l) {
    const std::string n = "layers." + std::to_string(l) + ".";
    d::AnnotatePlacements(p, n + "attn.out.weight", on_tp(d::Placement::Shard(1)));
    d::AnnotatePlacements(p, n + "mlp.gate.weight", on_tp(d::Placement::Shard(0)));
    d::AnnotatePlacements(p, n + "mlp.up.weight", on_tp(d::Placement::Shard(0)));
    d::AnnotatePlacements(p, n + "mlp.down.weight", on_tp(d::Placement::Shard(1)));
  }
  if (mesh.ndim() == 2) d::AnnotatePlacements(p, "ids", on_tp(d::Placement::Replicate(), d::Placement::Shard(0)));
}

void ExpectForwardEqualsOneDevice(const std::string& spec, int64_t all_reduces, int64_t collectives) {
  Llama m;
  ir::IrContext ctx;
  auto c = m.Capture(ctx);
  ir::Program& p = *c->program;
  const d::ProcessMesh mesh = d::ProcessMesh::Parse(spec, "kunlun_sim");
  Annotate(p, mesh);
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
