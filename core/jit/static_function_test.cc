// StaticFunction replays its captured programs through the scheduler, with the state as program inputs.
#include "core/jit/static_function.h"

#include <gtest/gtest.h>

#include "core/ir/text.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd_meta.h"

namespace oar::jit {
namespace {

// A training-step shape in small: state read and replaced every call (a weight and a step counter).
struct Accumulator {
  Tensor w = zeros({3});
  Tensor steps = zeros({});
  Function Step() {
    return [this](std::span<const Tensor> in) {
      NoGradGuard no_grad;
      w = w + in[0] * in[1];
      steps = steps + 1.0;
      return std::vector<Tensor>{sum(w)};
    };
  }
};

TEST(StaticFunctionTest, StateEntersEveryReplayAsAnInputOfTheExecutor) {
  for (const char* name : {"cpu:0", "kunlun_sim:0"}) {
    const Device device(name);
    Accumulator acc;
    acc.w = acc.w.to(device);
    acc.steps = acc.steps.to(device);
    StaticFunction f(acc.Step(), {{"w", &acc.w}, {"steps", &acc.steps}}, device);
    scheduler::RunProfile profile;
    f.set_profile(&profile);
    const Tensor x = FromVector<float>({1, 2, 3}, Dims{3}, device);
    float want = 0;
    for (int i = 1; i <= 4; ++i) {
      const Tensor scale = full({}, static_cast<double>(i), DType::kFloat32, device);
      want += 6.0f * static_cast<float>(i);
      EXPECT_EQ(f(std::vector<Tensor>{x, scale})[0].to(Device("cpu")).item<float>(), want) << name << " call " << i;
    }
    EXPECT_EQ(f.stats().misses, 1) << name;
    EXPECT_EQ(f.stats().hits, 3) << name;
    EXPECT_EQ(acc.steps.to(Device("cpu")).item<float>(), 4.0f) << name;
    EXPECT_EQ(acc.w.to(Device("cpu")).ToVector<float>(), (std::vector<float>{10, 20, 30})) << name;
    // The program reads the state as inputs (after the function's own two), never as parameters.
    const std::string text = ir::Print(*f.program());
    EXPECT_EQ(text.find("builtin.parameter"), std::string::npos) << text;
    EXPECT_NE(text.find("name = \"w\""), std::string::npos) << text;
    EXPECT_TRUE(f.program()->parameters.empty());
    // The last replay ran on the executor: its instructions were profiled.
    EXPECT_FALSE(profile.instructions.empty()) << name;
    EXPECT_NE(profile.Format().find("peak device memory:"), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace oar::jit
