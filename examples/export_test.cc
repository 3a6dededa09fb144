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
#include "core/inference/generate.h"
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
      // CINN replaces kernels, never adds any: the library-fused ops it cannot improve on (fused_linear,
      // fused_rotary: a matmul is opaque to it) stay whole rather than becoming a matmul plus a group.
      EXPECT_LE(fused.stats().instructions, p.stats().instructions) << kind << " on " << device;
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

// `oar export llama --decode`: one decoding step with the KV cache as program inputs and outputs. Greedy
// generation through the Predictor (the prompt fed a token a step, every step's present caches fed back as
// the next step's past) gives eager generation's tokens on every device; the one exported program and its
// one compilation serve every cache length; a step run by the Predictor is bitwise the same step run
// eagerly, at a batch and a cache length other than those it was captured at.
class DecodeTest : public ::testing::TestWithParam<std::string> {};

fs::path ExportDecode(Example& e, int64_t max_positions, const std::string& tag) {
  InferenceForward f = DecodeForward(e, 0, max_positions);
  jit::CaptureOptions o;
  o.state = f.state;
  o.output_names = f.outputs;
  ir::IrContext ctx;
  jit::Captured c = jit::Capture(ctx, f.fn, f.inputs, {}, Device("cpu"), o);
  for (const auto& [name, values] : f.attributes) c.program->module()->SetAttr(name, ctx.IntArrayAttr(values));
  const fs::path dir = fs::temp_directory_path() / fmt::format("oar_decode_test_{}_{}", tag, ::getpid());
  jit::Save(*c.program, dir);
  return dir;
}

TEST_P(DecodeTest, GreedyGenerationThroughThePredictorMatchesEager) {
  const Device device(GetParam());
  auto eager = MakeExample("llama", device, 3);  // the weights are drawn on the host: the same everywhere
  const std::string prompt = "The ";
  const int64_t n = 12;
  const std::string want = Generate(*eager, prompt, n);
  auto cpu = MakeExample("llama", Device("cpu"), 3);
  std::string tag = GetParam();
  std::replace(tag.begin(), tag.end(), ':', '_');
  const fs::path dir = ExportDecode(*cpu, 32, tag);
  inference::Predictor p({.model_dir = dir, .device = GetParam()});
  fs::remove_all(dir);
  EXPECT_NE(p.Describe().find("\"L\""), std::string::npos) << "the cache length is symbolic: " << p.Describe();
  const size_t instructions = p.stats().instructions;
  const std::vector<int64_t> got = inference::GenerateGreedy(p, inference::EncodeBytes(p, prompt), n);
  EXPECT_EQ(prompt + inference::DecodeBytes(p, got), want) << "on " << GetParam();
  // Cache lengths 0 .. 14, one program compiled once: no re-export, no recompilation (a memory plan per length).
  const inference::PredictorStats stats = p.stats();
  EXPECT_EQ(stats.runs, prompt.size() + n - 1);
  EXPECT_EQ(stats.instructions, instructions);
  EXPECT_EQ(stats.plans_built, stats.runs);

  // One step at batch 2 and cache length 7: bitwise the eager step on this device.
  Generator g(5);
  std::vector<Tensor> in = {FromVector<int64_t>({4, 9}, {2, 1}, device), FromVector<int64_t>({7}, {1}, device)};
  for (size_t i = 2; i < p.inputs().size(); ++i) {
    const jit::InputSpec& s = p.inputs()[i];
    in.push_back(randn({2, s.dims[1].extent, 7, s.dims[3].extent}, g, 0, 1, DType::kFloat32, Device("cpu")).to(device));
  }
  const std::vector<Tensor> step = DecodeForward(*eager, 0, 32).fn(in);
  const std::vector<Tensor> served = p.Run(in);
  ASSERT_EQ(served.size(), step.size());
  for (size_t i = 0; i < step.size(); ++i) {
    EXPECT_EQ(served[i].shape(), step[i].shape()) << p.output_names()[i];
    EXPECT_EQ(served[i].to(Device("cpu")).ToVector<float>(), step[i].to(Device("cpu")).ToVector<float>())
        << p.output_names()[i] << " on " << GetParam();
  }
  EXPECT_EQ(served[1].dim(2), 8) << "present.0.k holds the cache with this position appended";
  // The default passes fused the two rotary rotations of each of the two layers (fuse-rotary) and the ends of
  // the five rms_norms (fuse-rms-scale): the bitwise checks above ran the fused kernels.
  const std::string text = ir::Print(p.program());
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("kernel.fused_rotary("), 4u) << text;
  EXPECT_EQ(count("kernel.fused_rms_scale("), 5u) << text;
}

// Sampling through the Predictor (top-k with a seed) draws eager generation's tokens; temperature and top-p
// change what is drawn, the same options and seed draw the same again, and bad options are refused.
TEST(DecodeSamplingTest, SampledGenerationThroughThePredictorMatchesEager) {
  auto eager = MakeExample("llama", Device("cpu"), 3);
  const std::string prompt = "The ";
  const int64_t n = 10;
  const fs::path dir = ExportDecode(*eager, 32, "sampling");
  inference::Predictor p({.model_dir = dir, .device = "cpu"});
  fs::remove_all(dir);
  const std::vector<int64_t> ids = inference::EncodeBytes(p, prompt);
  for (const uint64_t seed : {1u, 7u}) {
    const std::string want = Generate(*eager, prompt, n, 8, seed);
    const std::vector<int64_t> got = inference::Generate(p, ids, n, {.top_k = 8, .seed = seed});
    EXPECT_EQ(prompt + inference::DecodeBytes(p, got), want) << "seed " << seed;
  }
  EXPECT_NE(Generate(*eager, prompt, n, 8, 1), Generate(*eager, prompt, n, 8, 7)) << "the seeds draw differently";
  const inference::SamplingOptions hot{.temperature = 1.5, .top_k = 0, .top_p = 0.9, .seed = 3};
  const std::vector<int64_t> a = inference::Generate(p, ids, n, hot), b = inference::Generate(p, ids, n, hot);
  EXPECT_EQ(a, b) << "the same options and seed draw the same tokens";
  EXPECT_EQ(inference::Generate(p, ids, n, {.temperature = 0, .seed = 3}), inference::GenerateGreedy(p, ids, n))
      << "temperature 0 is greedy";
  // top_p small enough keeps only the most likely token: greedy again, whatever the seed.
  EXPECT_EQ(inference::Generate(p, ids, n, {.top_p = 1e-9, .seed = 11}), inference::GenerateGreedy(p, ids, n));
  for (const inference::SamplingOptions& bad : {inference::SamplingOptions{.temperature = -1},
                                                inference::SamplingOptions{.top_k = -2},
                                                inference::SamplingOptions{.top_p = 0},
                                                inference::SamplingOptions{.top_p = 1.5}}) {
    EXPECT_THROW(inference::Generate(p, ids, n, bad), Error);
  }
}

TEST(DecodeErrorTest, GenerationRefusesWhatTheProgramCannotServe) {
  auto cpu = MakeExample("llama", Device("cpu"), 3);
  const fs::path dir = ExportDecode(*cpu, 8, "errors");
  inference::Predictor p({.model_dir = dir, .device = "cpu"});
  fs::remove_all(dir);
  const std::vector<int64_t> ids = inference::EncodeBytes(p, "The ");
  try {
    inference::GenerateGreedy(p, ids, 6);  // 4 + 6 - 1 = 9 positions, the tables hold 8
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-positions"), std::string::npos) << e.what();
  }
  EXPECT_THROW(inference::EncodeBytes(p, "\x01"), Error);
  EXPECT_THROW(inference::GenerateGreedy(p, std::vector<int64_t>{}, 2), Error);
  const std::vector<int64_t> outside{1 << 20};
  EXPECT_THROW(inference::GenerateGreedy(p, outside, 1), Error);
  // The full-sequence forward is not a decoding step: the error names the interface.
  InferenceForward f = cpu->ExportForward(0, 8);
  jit::CaptureOptions o;
  o.state = f.state;
  o.output_names = f.outputs;
  const fs::path forward = fs::temp_directory_path() / fmt::format("oar_decode_test_forward_{}", ::getpid());
  {
    ir::IrContext ctx;
    jit::Save(*jit::Capture(ctx, f.fn, f.inputs, {}, Device("cpu"), o).program, forward);
  }
  inference::Predictor whole({.model_dir = forward, .device = "cpu"});
  fs::remove_all(forward);
  try {
    inference::GenerateGreedy(whole, ids, 1);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("oar export llama --decode"), std::string::npos) << e.what();
  }
}

// `oar export llama --symbolic-seq`: one program serves every sequence length (the symbol T, the batch
// static), its rotary rows and causal mask computed from the positions input; bitwise the eager forward
// (host-made rotary tables and mask) at each length, on every device.
TEST(SymbolicSeqTest, LlamaServesEverySequenceLengthBitwiseEager) {
  auto cpu = MakeExample("llama", Device("cpu"), 3);
  EXPECT_THROW(cpu->ExportForward(0, -1), Error) << "a symbolic sequence needs a static batch";
  InferenceForward f = cpu->ExportForward(2, -1);
  jit::CaptureOptions o;
  o.state = f.state;
  o.output_names = f.outputs;
  const fs::path dir = fs::temp_directory_path() / fmt::format("oar_symbolic_seq_test_{}", ::getpid());
  {
    ir::IrContext ctx;
    jit::Save(*jit::Capture(ctx, f.fn, f.inputs, {}, Device("cpu"), o).program, dir);
  }
  Generator g(7);
  for (const char* device : {"cpu", "kunlun_sim:0", "ascend_sim:1"}) {
    auto eager = MakeExample("llama", Device(device), 3);  // the same weights (drawn on the host)
    inference::Predictor p({.model_dir = dir, .device = device});
    EXPECT_NE(p.Describe().find("\"T\""), std::string::npos) << p.Describe();
    for (int64_t t : {1, 7, 16}) {
      std::vector<int64_t> ids(static_cast<size_t>(2 * t)), positions(static_cast<size_t>(t));
      for (int64_t& id : ids) id = static_cast<int64_t>(g.NextU64() % 20);
      for (int64_t i = 0; i < t; ++i) positions[static_cast<size_t>(i)] = i;
      const Tensor x = FromVector<int64_t>(ids, {2, t}, Device(device));
      const std::vector<float> want =
          eager->ExportForward(0, t).fn(std::vector<Tensor>{x})[0].to(Device("cpu")).ToVector<float>();
      const std::vector<Tensor> in{x, FromVector<int64_t>(positions, {t}, Device(device))};
      EXPECT_EQ(p.Run(in)[0].to(Device("cpu")).ToVector<float>(), want) << "T = " << t << " on " << device;
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Devices, DecodeTest, ::testing::Values("cpu", "kunlun_sim:0", "ascend_sim:1"),
                         [](const auto& info) {
                           std::string d = info.param;
                           std::replace(d.begin(), d.end(), ':', '_');
                           return d;
                         });

INSTANTIATE_TEST_SUITE_P(Models, ExportTest, ::testing::Values("mlp", "cnn", "llama"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace oar::examples
