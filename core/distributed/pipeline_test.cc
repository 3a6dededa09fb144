// Pipeline parallel in one process over simulated kunlun devices: an MLP cut into stages against the same
// MLP on one device (bitwise with one micro-batch, within float rounding with several), both schedules'
// orders, live activations and device memory peaks, data-parallel lanes, and the error paths.
#include "core/distributed/pipeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/autograd/autograd.h"
#include "core/base/error.h"
#include "core/distributed/mesh.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "core/runtime/testing.h"

namespace oar::distributed {
namespace {

const bool kConfigured = [] {
  setenv("OAR_KUNLUN_SIM_DEVICES", "4", 1);
  return runtime::testing::UseOnlyPlugins(OAR_PLUGIN_DIR, {"cpu", "kunlun_sim"});
}();

Device Sim(int i) { return Device("kunlun_sim", i); }

std::vector<float> Random(int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(g.NextNormal());
  return v;
}

// An MLP of kLayers linear layers with tanh between them, [N, width] -> [N, kClasses], mean cross entropy;
// its weights and data drawn on the host.
constexpr int64_t kLayers = 4, kClasses = 3;

struct Mlp {
  int64_t width, rows;
  std::vector<Tensor> w, b;  // on the host
  Tensor x, y;

  Mlp(int64_t width_, int64_t rows_) : width(width_), rows(rows_) {
    for (int64_t i = 0; i < kLayers; ++i) {
      const int64_t out = i + 1 == kLayers ? kClasses : width;
      w.push_back(FromVector<float>(Random(out * width, 10 + i), {out, width}, Device("cpu")) *
                  (1.0 / std::sqrt(static_cast<double>(width))));
      b.push_back(FromVector<float>(Random(out, 20 + i), {out}, Device("cpu")) * 0.1);
    }
    x = FromVector<float>(Random(rows * width, 1), {rows, width}, Device("cpu"));
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < rows; ++i) labels.push_back((i * 7) % kClasses);
    y = FromVector<int64_t>(labels, {rows}, Device("cpu"));
  }
};

// Layers [first, last) of the MLP's parameters on one device, as leaves.
struct Params {
  std::vector<Tensor> w, b;
  Params(const Mlp& m, int64_t first, int64_t last, Device d) {
    for (int64_t i = first; i < last; ++i) {
      w.push_back(m.w[static_cast<size_t>(i)].to(d).set_requires_grad(true));
      b.push_back(m.b[static_cast<size_t>(i)].to(d).set_requires_grad(true));
    }
  }
};

Tensor Layers(const Params& p, int64_t first, Tensor h) {
  for (size_t j = 0; j < p.w.size(); ++j) {
    h = matmul(h, p.w[j].transpose(0, 1)) + p.b[j];
    if (first + static_cast<int64_t>(j) + 1 < kLayers) h = tanh(h);
  }
  return h;
}

struct Reference {
  double loss;
  std::vector<std::vector<float>> grads;  // w0, b0, w1, b1, ...
};

Reference OneDevice(const Mlp& m) {
  const Params p(m, 0, kLayers, Sim(0));
  const Tensor loss = cross_entropy(Layers(p, 0, m.x.to(Sim(0))), m.y.to(Sim(0)));
  loss.backward();
  Reference r{loss.to(Device("cpu")).item<float>(), {}};
  for (int64_t i = 0; i < kLayers; ++i) {
    r.grads.push_back(p.w[static_cast<size_t>(i)].grad().to(Device("cpu")).ToVector<float>());
    r.grads.push_back(p.b[static_cast<size_t>(i)].grad().to(Device("cpu")).ToVector<float>());
  }
  return r;
}

// The MLP in `stages` stages (layers split by the balanced rule) on kunlun_sim:0.., `lanes` data-parallel
// lanes per stage (lane l takes rows [l, l + 1) * rows / lanes), the lanes' gradients averaged on the host.
struct Piped {
  const Mlp& m;
  int64_t stages, lanes, micro = 1;
  std::vector<std::vector<Params>> params;  // [stage][lane]
  std::unique_ptr<Pipeline> pipe;

  Piped(const Mlp& m_, int64_t stages_, int64_t lanes_ = 1) : m(m_), stages(stages_), lanes(lanes_) {
    std::vector<PipelineStage> st;
    for (int64_t s = 0; s < stages; ++s) {
      const int64_t first = ShardOffset(kLayers, stages, s), last = first + ShardSize(kLayers, stages, s);
      PipelineStage stage;
      params.emplace_back();
      for (int64_t l = 0; l < lanes; ++l) {
        stage.lanes.push_back(Sim(static_cast<int>(s * lanes + l)));
        params.back().emplace_back(m, first, last, stage.lanes.back());
      }
      stage.forward = [this, s, first](int64_t mb, int64_t lane, const Tensor& in) {
        const Device d = Sim(static_cast<int>(s * lanes + lane));
        const int64_t n = m.rows / lanes / micro, at = lane * (m.rows / lanes) + mb * n;
        const Tensor h = Layers(params[static_cast<size_t>(s)][static_cast<size_t>(lane)], first,
                                s == 0 ? m.x.slice(0, at, at + n).to(d) : in);
        return s + 1 == stages ? cross_entropy(h, m.y.slice(0, at, at + n).to(d)) : h;
      };
      st.push_back(std::move(stage));
    }
    pipe = std::make_unique<Pipeline>(std::move(st));
  }

  PipelineResult Run(PipelineSchedule schedule, int64_t micro_batches) {
    micro = micro_batches;
    return pipe->Run(schedule, micro_batches);
  }

  // The gradients in the reference's order, averaged over the lanes.
  std::vector<std::vector<float>> Grads() const {
    std::vector<std::vector<float>> out;
    for (const auto& stage : params) {
      for (size_t j = 0; j < stage[0].w.size(); ++j) {
        for (int k = 0; k < 2; ++k) {
          std::vector<float> sum;
          for (const Params& p : stage) {
            const std::vector<float> g = (k == 0 ? p.w[j] : p.b[j]).grad().to(Device("cpu")).ToVector<float>();
            if (sum.empty()) sum.assign(g.size(), 0.0f);
            for (size_t e = 0; e < g.size(); ++e) sum[e] += g[e];
          }
          for (float& v : sum) v /= static_cast<float>(stage.size());
          out.push_back(sum);
        }
      }
    }
    return out;
  }
};

void ExpectNear(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    for (size_t e = 0; e < got[i].size(); ++e) {
      EXPECT_NEAR(got[i][e], want[i][e], tol * (1 + std::abs(want[i][e]))) << "parameter " << i << " element " << e;
    }
  }
}

TEST(PipelineSchedules, OrdersOfFThenBAnd1F1B) {
  auto order = [](PipelineSchedule s, int64_t stages, int64_t micro, int64_t stage) {
    std::string t;
    for (const PipelineAction& a : StageOrder(s, stages, micro, stage)) t += (t.empty() ? "" : " ") + a.ToString();
    return t;
  };
  EXPECT_EQ(order(PipelineSchedule::kFThenB, 2, 3, 0), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(order(PipelineSchedule::k1F1B, 2, 4, 0), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(order(PipelineSchedule::k1F1B, 2, 4, 1), "F0 B0 F1 B1 F2 B2 F3 B3");
  EXPECT_EQ(order(PipelineSchedule::k1F1B, 4, 2, 0), "F0 F1 B0 B1");  // fewer micro-batches than stages
  EXPECT_EQ(ParsePipelineSchedule("1F1B"), PipelineSchedule::k1F1B);
  EXPECT_EQ(ParsePipelineSchedule("fthenb"), PipelineSchedule::kFThenB);
  try {
    ParsePipelineSchedule("zb-h1");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("expected 'fthenb' or '1f1b', got 'zb-h1'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(StageOrder(PipelineSchedule::k1F1B, 2, 0, 0), Error);
  EXPECT_THROW(StageOrder(PipelineSchedule::k1F1B, 2, 2, 2), Error);
}

// The math of one micro-batch is the one-device computation cut in two: bitwise the same.
TEST(Pipeline, OneMicroBatchIsBitwiseTheOneDeviceRun) {
  const Mlp m(16, 32);
  const Reference ref = OneDevice(m);
  for (PipelineSchedule s : {PipelineSchedule::kFThenB, PipelineSchedule::k1F1B}) {
    Piped p(m, 2);
    const PipelineResult r = p.Run(s, 1);
    EXPECT_EQ(r.MeanLoss(), ref.loss) << ScheduleName(s);
    EXPECT_EQ(p.Grads(), ref.grads) << ScheduleName(s);
    EXPECT_EQ(r.transfers, 2);  // one activation forward, one gradient back
  }
}

// Several micro-batches: the mean of the micro-batch losses and the accumulated gradients equal the
// whole batch's within float rounding, and the two schedules give bitwise the same gradients (each stage
// accumulates the micro-batches in the same order; only the interleaving differs).
TEST(Pipeline, MicroBatchesAccumulateTheWholeBatchGradientUnderBothSchedules) {
  const Mlp m(16, 32);
  const Reference ref = OneDevice(m);
  for (int64_t stages : {2, 4}) {
    Piped f(m, stages), o(m, stages);
    const PipelineResult rf = f.Run(PipelineSchedule::kFThenB, 4);
    const PipelineResult ro = o.Run(PipelineSchedule::k1F1B, 4);
    EXPECT_NEAR(rf.MeanLoss(), ref.loss, 1e-6 * std::abs(ref.loss));
    EXPECT_EQ(rf.MeanLoss(), ro.MeanLoss());
    ExpectNear(f.Grads(), ref.grads, 1e-5);
    EXPECT_EQ(f.Grads(), o.Grads()) << stages << " stages";
    EXPECT_EQ(rf.transfers, 2 * (stages - 1) * 4);
  }
}

TEST(Pipeline, IssueOrderFollowsTheSchedule) {
  const Mlp m(8, 12);
  Piped p(m, 2);
  EXPECT_EQ(p.Run(PipelineSchedule::k1F1B, 3).trace,
            "s0:F0 s1:F0 s0:F1 s1:B0 s0:B0 s1:F1 s0:F2 s1:B1 s0:B1 s1:F2 s1:B2 s0:B2");
  EXPECT_EQ(p.Run(PipelineSchedule::kFThenB, 2).trace, "s0:F0 s1:F0 s0:F1 s1:F1 s1:B0 s0:B0 s1:B1 s0:B1");
}

// 1F1B keeps at most `stages` micro-batches alive on a stage, FThenB all of them: counted by the
// executor, and seen in stage 0's device memory peak.
TEST(Pipeline, OneFOneBHoldsAtMostStagesMicroBatchesFThenBAll) {
  const Mlp m(256, 512);
  constexpr int64_t kMicro = 8;
  std::vector<uint64_t> peak_bytes;
  for (PipelineSchedule s : {PipelineSchedule::kFThenB, PipelineSchedule::k1F1B}) {
    Piped p(m, 4);
    runtime::Runtime::Get().Context(Sim(0)).Synchronize();
    runtime::Runtime::Get().Context(Sim(0)).allocator().ResetPeakStats();
    const PipelineResult r = p.Run(s, kMicro);
    runtime::Runtime::Get().Context(Sim(0)).Synchronize();
    peak_bytes.push_back(runtime::Runtime::Get().Context(Sim(0)).allocator().stats().peak_allocated_bytes);
    for (int64_t st = 0; st < 4; ++st) {
      const int64_t want = s == PipelineSchedule::kFThenB ? kMicro : std::min<int64_t>(4 - st, kMicro);
      EXPECT_EQ(r.peak_live[static_cast<size_t>(st)], want) << ScheduleName(s) << " stage " << st;
    }
  }
  // Stage 0 holds 8 micro-batches' activations under FThenB, 4 under 1F1B.
  EXPECT_LT(peak_bytes[1], peak_bytes[0]) << "FThenB " << peak_bytes[0] << " bytes, 1F1B " << peak_bytes[1];
}

// Two data-parallel lanes per stage (four devices): lane-averaged gradients equal the whole batch's.
TEST(Pipeline, LanesAreDataParallelReplicas) {
  const Mlp m(16, 32);
  const Reference ref = OneDevice(m);
  Piped p(m, 2, 2);
  const PipelineResult r = p.Run(PipelineSchedule::k1F1B, 2);
  EXPECT_EQ(r.losses.size(), 4u);
  EXPECT_NEAR(r.MeanLoss(), ref.loss, 1e-6 * std::abs(ref.loss));
  ExpectNear(p.Grads(), ref.grads, 1e-5);
}

void ExpectError(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Pipeline, BadStagesAreRefusedClearly) {
  auto id = [](int64_t, int64_t, const Tensor& in) { return in; };
  ExpectError([] { Pipeline p(std::vector<PipelineStage>{}); }, "pipeline: no stages");
  ExpectError(
      [&] {
        Pipeline p({{{Sim(0)}, id}, {{Sim(1), Sim(2)}, id}});
      },
      "every stage needs as many lanes as stage 0 (1); stage 1 has 2");
  ExpectError([&] { Pipeline p({{{Sim(0)}, id}, {{Sim(0)}, id}}); }, "device kunlun_sim:0 appears twice (stage 1)");
  ExpectError([&] { Pipeline p({{{Sim(0)}, id}, {{Device("cpu")}, id}}); }, "every device must be of one type");
  ExpectError([&] { Pipeline p({{{Sim(0)}, {}}}); }, "stage 0 has no forward");
  Pipeline two({{{Sim(0)},
                 [](int64_t, int64_t, const Tensor&) {
                   return ones({2, 2}, DType::kFloat32, Sim(0));
                 }},
                {{Sim(1)}, [](int64_t, int64_t, const Tensor& in) { return in * 2.0; }}});
  ExpectError([&] { two.Run(PipelineSchedule::k1F1B, 0); }, "need at least one micro-batch, got 0");
  ExpectError([&] { two.Run(PipelineSchedule::k1F1B, 1); },
              "the last stage must return the micro-batch's scalar loss, got shape [2, 2]");
}

}  // namespace
}  // namespace oar::distributed
