// Modules: parameter naming, forward passes against the functional ops, train/eval, state dicts,
// moving between devices, and clear errors for a mismatched state.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "core/nn/layers.h"

namespace oar::nn {
namespace {

class TwoLayer : public UnaryModule {
 public:
  explicit TwoLayer(Generator& gen) {
    fc1 = RegisterModule("fc1", std::make_shared<Linear>(3, 4, true, gen));
    norm = RegisterModule("norm", std::make_shared<BatchNorm2d>(4));
    fc2 = RegisterModule("fc2", std::make_shared<Linear>(4, 2, false, gen));
  }
  Tensor Forward(const Tensor& x) override { return fc2->Forward(relu(fc1->Forward(x))); }
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<BatchNorm2d> norm;
};

TEST(Module, NamesParametersAndBuffersHierarchically) {
  Generator gen(1);
  TwoLayer m(gen);
  std::vector<std::string> names;
  for (auto& [n, t] : m.NamedParameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "norm.weight", "norm.bias", "fc2.weight"}));
  EXPECT_EQ(m.NamedBuffers().size(), 2u);
  EXPECT_EQ(m.NumParameters(), 3 * 4 + 4 + 4 + 4 + 4 * 2);
  for (Tensor* p : m.Parameters()) EXPECT_TRUE(p->requires_grad());
  m.Eval();
  EXPECT_FALSE(m.norm->training());
}

TEST(Module, LinearMatchesTheFunctionalForm) {
  Generator gen(2);
  Linear fc(3, 2, true, gen);
  const Tensor x = randn({5, 3}, gen, 0, 1, DType::kFloat32, Device("cpu"));
  const std::vector<float> got = fc.Forward(x).ToVector<float>();
  const std::vector<float> want = (matmul(x, fc.weight.transpose(0, 1)) + *fc.bias).ToVector<float>();
  EXPECT_EQ(got, want);
}

TEST(Module, StateDictRoundTripAndMismatchErrors) {
  Generator g1(3), g2(4);
  TwoLayer a(g1), b(g2);
  const auto path = std::filesystem::temp_directory_path() / ("oar_nn_test.safetensors." + std::to_string(::getpid()));
  a.Save(path);
  b.Load(path);
  const Tensor x = randn({2, 3}, g1, 0, 1, DType::kFloat32, Device("cpu"));
  EXPECT_EQ(a.Forward(x).ToVector<float>(), b.Forward(x).ToVector<float>());
  std::filesystem::remove(path);

  auto state = a.StateDict();
  state.erase("fc2.weight");
  state["extra"] = zeros({1});
  state["fc1.bias"] = zeros({5});
  try {
    b.LoadStateDict(state);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("missing 'fc2.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected 'extra'"), std::string::npos) << m;
    EXPECT_NE(m.find("'fc1.bias' is float32[5] but the module expects float32[4]"), std::string::npos) << m;
  }
}

TEST(Module, BatchNormUsesBatchStatisticsInTrainingAndRunningOnesInEval) {
  BatchNorm2d bn(2);
  Generator gen(5);
  const Tensor x = randn({4, 2, 3, 3}, gen, 3, 2, DType::kFloat32, Device("cpu"));
  const Tensor y = bn.Forward(x);
  EXPECT_NEAR(mean(y).item<float>(), 0.0f, 1e-5);  // normalised with the batch's own statistics
  EXPECT_NEAR(bn.running_mean.ToVector<float>()[0], 0.1 * mean(x.slice(1, 0, 1)).item<float>(), 1e-5);
  bn.Eval();
  const Tensor z = bn.Forward(x);  // running statistics: far from normalised after one step
  EXPECT_GT(mean(z).item<float>(), 1.0f);
}

TEST(Module, CausalAttentionWithKvCacheMatchesTheFullSequence) {
  Generator gen(6);
  CausalSelfAttention attn(8, 2, gen);
  const Tensor x = randn({1, 5, 8}, gen, 0, 1, DType::kFloat32, Device("cpu"));
  const std::vector<float> full = attn.Forward(x).ToVector<float>();
  CausalSelfAttention::KvCache cache;
  std::vector<float> stepwise;
  for (int t = 0; t < 5; ++t) {
    const std::vector<float> y = attn.Forward(x.slice(1, t, t + 1), &cache).ToVector<float>();
    stepwise.insert(stepwise.end(), y.begin(), y.end());
  }
  ASSERT_EQ(full.size(), stepwise.size());
  for (size_t i = 0; i < full.size(); ++i) EXPECT_NEAR(full[i], stepwise[i], 1e-5) << i;
}

}  // namespace
}  // namespace oar::nn
