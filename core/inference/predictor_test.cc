// The saved-program format and the Predictor: round trips, refusals naming the file, every device, threads.
#include "core/inference/predictor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "core/jit/interpreter.h"
#include "core/jit/model.h"
#include "core/jit/net_testing.h"
#include "core/nn/layers.h"
#include "core/ops/ops.h"

namespace oar::jit {
namespace {

namespace fs = std::filesystem;

const Device kCpu("cpu:0");
using testing_net::BatchSpec;
using testing_net::Net;

class ModelFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / fmt::format("oar_model_test_{}_{}", ::testing::UnitTest::GetInstance()->random_seed(),
                                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    CaptureOptions o;
    o.state = net.Slots();
    o.output_names = {"probs"};
    const std::vector<InputSpec> specs = BatchSpec();
    Save(*Capture(ctx, net.Fn(), specs, {}, kCpu, o).program, dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void Rewrite(const char* file, const std::function<void(std::string&)>& edit) {
    std::ifstream in(dir / file, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), {});
    edit(s);
    std::ofstream(dir / file, std::ios::binary | std::ios::trunc) << s;
  }
  std::string LoadError() {
    ir::IrContext fresh;
    try {
      Load(fresh, dir);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  ir::IrContext ctx;
  Net net{5};
  fs::path dir;
};

TEST_F(ModelFormatTest, RoundTripsAndRunsLikeEager) {
  ir::IrContext fresh;
  auto p = Load(fresh, dir);
  EXPECT_EQ(p->parameters.size(), 4u);
  Generator g(6);
  const Tensor x = randn({3, 4}, g);
  EXPECT_EQ(Interpret(*p, std::vector<Tensor>{x}, kCpu)[0].ToVector<float>(), net.Forward(x).ToVector<float>());
}

TEST_F(ModelFormatTest, RefusesCorruptEditedAndUnknownFiles) {
  Rewrite("program.oir", [](std::string& s) { s.replace(s.find("op.tanh"), 7, "op.sinh"); });
  EXPECT_NE(LoadError().find("checksum mismatch"), std::string::npos) << LoadError();
  SetUp();
  Rewrite("model.json", [](std::string& s) { s.replace(s.find("\"version\": 1"), 12, "\"version\": 7"); });
  EXPECT_NE(LoadError().find("format version 7 is not supported"), std::string::npos) << LoadError();
  SetUp();
  Rewrite("parameters.safetensors", [](std::string& s) { s[s.size() - 1] ^= 0x55; });
  EXPECT_NE(LoadError().find("parameters.safetensors: checksum mismatch"), std::string::npos) << LoadError();
  SetUp();
  Rewrite("model.json", [](std::string& s) { s.resize(s.size() / 2); });
  EXPECT_NE(LoadError().find("model.json: not valid JSON"), std::string::npos) << LoadError();
  SetUp();
  fs::remove(dir / "parameters.safetensors");
  EXPECT_NE(LoadError().find("parameters.safetensors"), std::string::npos) << LoadError();
}

TEST_F(ModelFormatTest, PredictorMatchesEagerOnEveryDevice) {
  Generator g(8);
  const Tensor x = randn({6, 4}, g);
  const std::vector<float> want = net.Forward(x).ToVector<float>();
  for (const char* device : {"cpu", "kunlun_sim:0", "ascend_sim:1"}) {
    inference::Predictor p({.model_dir = dir, .device = device});
    const std::vector<float> got = p.Run(std::vector<Tensor>{x})[0].to(kCpu).ToVector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i]) + 1e-7) << device;
  }
  inference::Predictor p({.model_dir = dir, .device = "cpu"});
  EXPECT_NE(p.Describe().find("\"B\""), std::string::npos) << p.Describe();
  EXPECT_THROW(p.Run(std::vector<Tensor>{randn({2, 5}, g)}), Error);  // 5 is not the static extent 4
}

TEST_F(ModelFormatTest, ThreadsOptionKeepsResultsAndRefusesNegatives) {
  Generator g(12);
  const Tensor x = randn({9, 4}, g);
  inference::Predictor dflt({.model_dir = dir, .device = "cpu"});
  inference::Predictor one({.model_dir = dir, .device = "cpu", .threads = 1});
  EXPECT_EQ(one.Run(std::vector<Tensor>{x})[0].ToVector<float>(), dflt.Run(std::vector<Tensor>{x})[0].ToVector<float>());
  EXPECT_THROW(inference::Predictor({.model_dir = dir, .device = "cpu", .threads = -1}), Error);
}

TEST_F(ModelFormatTest, OnePredictorServesEightThreadsBitwiseLikeSerialRuns) {
  inference::Predictor p({.model_dir = dir, .device = "cpu"});
  std::vector<Tensor> xs;
  std::vector<std::vector<float>> serial;
  Generator g(10);
  for (int i = 0; i < 8; ++i) {
    xs.push_back(randn({1 + 3 * i, 4}, g));
    serial.push_back(p.Run(std::vector<Tensor>{xs.back()})[0].ToVector<float>());
  }
  std::vector<std::vector<float>> parallel(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < 5; ++r) parallel[i] = p.Run(std::vector<Tensor>{xs[i]})[0].ToVector<float>();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(parallel[i], serial[i]) << i;
}

}  // namespace
}  // namespace oar::jit
