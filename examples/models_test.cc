// The example models learn on cpu with a few steps, are bitwise reproducible from a seed, and their
// checkpoints round-trip; bad input gives oar::Error.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>

#include "core/base/error.h"
#include "examples/models.h"

namespace oar::examples {
namespace {

double Mean(const std::vector<double>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(to),
                         0.0) / static_cast<double>(to - from);
}

// Mean loss over the last 5 steps must be below `ratio` times the mean over the first 5.
void ExpectLearns(const std::string& kind, int64_t steps, double ratio) {
  auto e = MakeExample(kind, Device("cpu"), 1);
  const std::vector<double> losses = Train(*e, steps);
  ASSERT_EQ(losses.size(), static_cast<size_t>(steps));
  const double first = Mean(losses, 0, 5), last = Mean(losses, losses.size() - 5, losses.size());
  EXPECT_LT(last, ratio * first) << kind << ": first " << first << " last " << last;
}

TEST(Examples, MlpLearns) { ExpectLearns("mlp", 150, 0.6); }
TEST(Examples, CnnLearns) { ExpectLearns("cnn", 40, 0.7); }
TEST(Examples, LlamaLearns) { ExpectLearns("llama", 40, 0.8); }

// The documented quality with each model's default step count (the CLI's `oar train KIND`).
TEST(Examples, MlpReachesItsTargetWithDefaultSteps) {
  auto e = MakeExample("mlp", Device("cpu"), 0);
  Train(*e, -1);
  EXPECT_GE(e->Evaluate(), 0.95);
}
TEST(Examples, CnnReachesItsTargetWithDefaultSteps) {
  auto e = MakeExample("cnn", Device("cpu"), 0);
  Train(*e, -1);
  EXPECT_GE(e->Evaluate(), 0.90);
}
TEST(Examples, LlamaFallsWellBelowTheUnigramEntropyWithDefaultSteps) {
  auto e = MakeExample("llama", Device("cpu"), 0);
  Train(*e, -1);
  EXPECT_LT(e->Evaluate(), UnigramEntropy(*e) - 1.0);
}

TEST(Examples, SameSeedGivesBitwiseIdenticalLossCurves) {
  for (const std::string kind : {"mlp", "cnn", "llama"}) {
    auto a = MakeExample(kind, Device("cpu"), 7);
    auto b = MakeExample(kind, Device("cpu"), 7);
    const std::vector<double> la = Train(*a, 5), lb = Train(*b, 5);
    EXPECT_EQ(la, lb) << kind;
    auto c = MakeExample(kind, Device("cpu"), 8);
    EXPECT_NE(Train(*c, 5), la) << kind;
  }
}

TEST(Examples, CheckpointRoundTripGivesTheSameMetric) {
  const auto dir = std::filesystem::temp_directory_path() / ("oar_examples_test_ckpt." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto e = MakeExample("mlp", Device("cpu"), 2);
  Train(*e, 20);
  SaveCheckpoint(*e, dir);
  auto loaded = LoadCheckpoint(dir, Device("cpu"));
  EXPECT_EQ(loaded->kind(), "mlp");
  EXPECT_EQ(loaded->Evaluate(), e->Evaluate());
  std::filesystem::remove_all(dir);
}

TEST(Examples, LlamaGeneratesWithTheKvCache) {
  auto e = MakeExample("llama", Device("cpu"), 3);
  Train(*e, 5);
  EXPECT_GT(UnigramEntropy(*e), 2.0);
  const std::string greedy = Generate(*e, "The ", 20);
  EXPECT_EQ(greedy.size(), 24u);
  EXPECT_EQ(greedy.substr(0, 4), "The ");
  EXPECT_EQ(Generate(*e, "The ", 20), greedy);  // greedy is deterministic
  EXPECT_EQ(Generate(*e, "The ", 20, 5, 11).size(), 24u);
}

TEST(Examples, BadInputIsAClearError) {
  EXPECT_THROW(MakeExample("nosuchmodel", Device("cpu"), 0), Error);
  EXPECT_THROW(MakeExample("mlp", Device("nosuch:0"), 0), Error);
  EXPECT_THROW(LoadCheckpoint("/nonexistent/oar/checkpoint", Device("cpu")), Error);
  const auto dir = std::filesystem::temp_directory_path() / ("oar_examples_test_corrupt." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "config.json") << "{not json"; }
  { std::ofstream(dir / "model.safetensors") << "garbage"; }
  EXPECT_THROW(LoadCheckpoint(dir, Device("cpu")), Error);
  { std::ofstream(dir / "config.json") << R"({"kind": "mlp", "seed": 0, "model": {}})"; }
  EXPECT_THROW(LoadCheckpoint(dir, Device("cpu")), Error);
  auto e = MakeExample("mlp", Device("cpu"), 0);
  EXPECT_THROW(Generate(*e, "x", 3), Error);
  SaveCheckpoint(*e, dir);  // a valid config with truncated weights
  { std::ofstream(dir / "model.safetensors", std::ios::trunc) << "garbage"; }
  EXPECT_THROW(LoadCheckpoint(dir, Device("cpu")), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace oar::examples
