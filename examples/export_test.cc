// Each example model, trained eagerly on cpu, exports to a saved program that the Predictor serves on cpu,
// kunlun_sim:0 and ascend_sim:1 with the outputs of eager on that device — bitwise, since the program runs
// the same kernels in the same order — at batch extents other than the ones it was captured at.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <filesystem>

#include <unistd.h>

#include "core/compiler/compiler.h"
#include "core/inference/predictor.h"
#include "core/ir/text.h"
#include "core/jit/model.h"
#include "core/passes/pass.h"
#include "examples/models.h"

namespace oar::examples {
namespace {

namespace fs = std::filesystem;

Tensor Input(const jit::InputSpec& spec, int64_t batch, Generator& g) {
  Dims shape;
  for (const jit::DimSpec& d : spec.dims) shape.push_back(d.is_static() ? d.extent : batch);
  if (spec.dtype == DType::kInt64) {
    std::vector<int64_t> ids(static_cast<size_t>(shape.Product()));
    for (int64_t& id : ids) id = static_cast<int64_t>(g.NextU64() % 20);  // within every vocabulary
    return FromVector<int64_t>(ids, shape, Device("cpu"));
  }
  return randn(shape, g, 0, 1, spec.dtype, Device("cpu"));
}

class ExportTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportTest, PredictorMatchesEagerOnEveryDevice) {
  const std::string kind = GetParam();
  auto e = MakeExample(kind, Device("cpu"), 3);
  Train(*e, 2);
  InferenceForward f = e->ExportForward(0, kind == "llama" ? 16 : 0);
  jit::CaptureOptions o;
  o.state = f.state;
  o.output_names = f.outputs;
  const fs::path dir = fs::temp_directory_path() / fmt::format("oar_export_test_{}_{}", kind, ::getpid());
  const fs::path checkpoint = dir.string() + ".checkpoint";
  SaveCheckpoint(*e, checkpoint);
  {
    ir::IrContext ctx;
    jit::Save(*jit::Capture(ctx, f.fn, f.inputs, {}, Device("cpu"), o).program, dir);
  }
  Generator g(11);
  for (int64_t batch : {1, 4}) {
    const Tensor x = Input(f.inputs[0], batch, g);
    for (const char* device : {"cpu", "kunlun_sim:0", "ascend_sim:1"}) {
      // Eager on the same device: the trained weights loaded there, the same forward.
      auto there = LoadCheckpoint(checkpoint, Device(device));
      const std::vector<float> want =
          there->ExportForward(0, kind == "llama" ? 16 : 0).fn(std::vector<Tensor>{x.to(Device(device))})[0]
              .to(Device("cpu"))
              .ToVector<float>();
      inference::Predictor p({.model_dir = dir, .device = device});
      const std::vector<float> got = p.Run(std::vector<Tensor>{x})[0].to(Device("cpu")).ToVector<float>();
      ASSERT_EQ(got.size(), want.size()) << device;
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, static_cast<double>(std::abs(want[i]))));
      }
      EXPECT_LE(worst, 1e-6) << kind << " on " << device << " at batch " << batch;
      EXPECT_EQ(got, want) << kind << " on " << device << ": the same kernels in the same order";
      // With CINN: decomposed, fused and compiled for the device; eager's results within float rounding.
      compiler::RegisterCinn();
      inference::Predictor fused({.model_dir = dir, .device = device, .cinn = true});
      EXPECT_NE(fused.Describe().find("\"enabled\": true"), std::string::npos);
      const std::vector<float> cinn = fused.Run(std::vector<Tensor>{x})[0].to(Device("cpu")).ToVector<float>();
      ASSERT_EQ(cinn.size(), want.size());
      for (size_t i = 0; i < cinn.size(); ++i) {
        ASSERT_NEAR(cinn[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << kind << " with CINN on " << device;
      }
    }
  }
  fs::remove_all(dir);
  fs::remove_all(checkpoint);
}

// Each model's captured forward is an ordinary PIR program: it prints and parses back to the same text,
// verifies, optimises, and kernel selection binds it to every device (explicit transfers for kunlun_sim's
// fallbacks, format casts on ascend_sim).
TEST_P(ExportTest, CapturedForwardRoundTripsAndBindsToEveryDevice) {
  auto e = MakeExample(GetParam(), Device("cpu"), 3);
  InferenceForward f = e->ExportForward(0, GetParam() == "llama" ? 16 : 0);
  jit::CaptureOptions o;
  o.state = f.state;
  ir::IrContext ctx;
  const std::string text = ir::Print(*jit::Capture(ctx, f.fn, f.inputs, {}, Device("cpu"), o).program);
  for (const char* device : {"cpu:0", "kunlun_sim:0", "ascend_sim:0"}) {
    ir::IrContext fresh;
    auto p = ir::ParseProgram(fresh, text, "captured.oir");
    EXPECT_EQ(ir::Print(*p), text);
    passes::PassManager pm;
    pm.AddPipeline(fmt::format("canonicalize,cse,constant-fold,dce,kernel-select{{device={}}}", device));
    pm.Run(*p);  // verifies after every pass
    const std::string bound = ir::Print(*p);
    EXPECT_EQ(bound.find(" op."), std::string::npos) << "an op left unbound on " << device;
    if (std::string(device) == "ascend_sim:0" && GetParam() == "cnn") {
      EXPECT_NE(bound.find("kernel.format_cast"), std::string::npos);
    }
  }
}

// `oar train --static`: the captured step programs give the eager losses, bitwise, on cpu and a simulator.
class StaticTrainTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(StaticTrainTest, LossesEqualEagerBitwise) {
  const auto& [kind, device] = GetParam();
  constexpr int64_t kSteps = 6;
  auto eager = MakeExample(kind, Device(device), 5);
  auto captured = MakeExample(kind, Device(device), 5);
  const std::vector<double> want = Train(*eager, kSteps);
  jit::StaticFunction::Stats stats;
  const std::vector<double> got = TrainStatic(*captured, kSteps, 0, {}, {}, &stats);
  EXPECT_EQ(got, want);
  // Step 0 captures (Adam has no moments yet), step 1 captures again (now it has), then every step replays.
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.hits, kSteps - 2);
  ASSERT_EQ(stats.miss_reasons.size(), 2u);
  EXPECT_EQ(stats.miss_reasons[0], "first call");
  EXPECT_NE(stats.miss_reasons[1].find("adam.m.0"), std::string::npos) << stats.miss_reasons[1];
  // The trained weights agree too.
  const auto a = eager->module().StateDict(), b = captured->module().StateDict();
  for (const auto& [name, t] : a) EXPECT_EQ(t.ToVector<float>(), b.at(name).ToVector<float>()) << name;
}

// `oar train --static --cinn`: every captured step decomposed and fused (forward, backward and the update),
// the fused kernels compiled for the device; losses agree with eager's within float rounding.
TEST_P(StaticTrainTest, WithCinnLossesAgreeWithEager) {
  const auto& [kind, device] = GetParam();
  compiler::RegisterCinn();
  constexpr int64_t kSteps = 4;
  auto eager = MakeExample(kind, Device(device), 5);
  auto fused = MakeExample(kind, Device(device), 5);
  const std::vector<double> want = Train(*eager, kSteps);
  const uint64_t compiled = compiler::Stats().kernels_compiled + compiler::Stats().kernels_reused;
  const std::vector<double> got = TrainStatic(*fused, kSteps, 0, {}, {}, nullptr, nullptr, inference::kCinnPasses);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << "step " << i;
  EXPECT_GT(compiler::Stats().kernels_compiled + compiler::Stats().kernels_reused, compiled) << "nothing was fused";
}

INSTANTIATE_TEST_SUITE_P(Models, StaticTrainTest,
                         ::testing::Combine(::testing::Values("mlp", "cnn", "llama"),
                                            ::testing::Values("cpu", "kunlun_sim:0", "ascend_sim:1")),
                         [](const auto& info) {
                           std::string d = std::get<1>(info.param);
                           std::replace(d.begin(), d.end(), ':', '_');
                           return std::get<0>(info.param) + "_" + d;
                         });

INSTANTIATE_TEST_SUITE_P(Models, ExportTest, ::testing::Values("mlp", "cnn", "llama"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace oar::examples
