// StaticFunction replays its captured programs through the scheduler, with the state as program inputs.
#include "core/jit/static_function.h"

#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "core/ir/text.h"
#include "core/scheduler/executor.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd_meta.h"

namespace oar::jit {
namespace {

// A training-step shape in small: state read and replaced every call (a weight and a step counter).
struct Accumulator {
  explicit Accumulator(Device device) : w(zeros({3}).to(device)), steps(zeros({}).to(device)) {}
  Tensor w;
  Tensor steps;
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
    Accumulator acc(device);
    StaticFunction f(acc.Step(), {{"w", &acc.w}, {"steps", &acc.steps}}, device);
    scheduler::RunProfile profile;
    f.set_profile(&profile);
    const Tensor x = FromVector<float>({1, 2, 3}, Dims{3}, device);
    float want = 0;
    const Storage* w_bytes = nullptr;
    for (int i = 1; i <= 4; ++i) {
      const Tensor scale = full({}, static_cast<double>(i), DType::kFloat32, device);
      want += 6.0f * static_cast<float>(i);
      EXPECT_EQ(f(std::vector<Tensor>{x, scale})[0].to(Device("cpu")).item<float>(), want) << name << " call " << i;
      // Replays write the new state into the old one's bytes (the update of w reads w once, elementwise).
      if (i > 2) {
        EXPECT_EQ(acc.w.storage().get(), w_bytes) << name << " call " << i;
      }
      // With the first replay the state moved into one allocation of its own: w's 12 bytes, then steps at
      // the next 256-byte boundary (the capture's blocks were apart, each of at least 512 bytes).
      if (i >= 2) {
        EXPECT_EQ(static_cast<const char*>(acc.steps.storage()->data()) - static_cast<const char*>(acc.w.storage()->data()),
                  256)
            << name << " call " << i;
      }
      w_bytes = acc.w.storage().get();
    }
    ASSERT_NE(f.executor(), nullptr);
    EXPECT_EQ(f.executor()->donations().size(), 2u) << name;
    EXPECT_EQ(f.executor()->stats().donated_outputs, 6u) << name;  // w and steps, in every replay
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

// The capture lifts tensors the function made outside the traced ops (over 16 elements) into program
// parameters. Made between the capture's temporaries, each would pin a segment of them for as long as the
// program is cached (the llama training step's 24 constants of 512 and 4096 bytes held 2-4 segments of 2 MiB):
// before the first replay they move into one allocation (with the state, it is all the step keeps between
// calls outside the executor's arena); a constant whose bytes the caller still holds stays where it is rather
// than being held twice.
TEST(StaticFunctionTest, FirstReplayMovesTheProgramsConstantsIntoOneAllocation) {
  for (const char* name : {"cpu:0", "kunlun_sim:0"}) {
    const Device device(name);
    Accumulator acc(device);
    const Tensor table = FromVector<float>(std::vector<float>(96, 0.5f), Dims{3, 32}, device);  // the caller's
    auto fn = [&](std::span<const Tensor> in) {
      NoGradGuard no_grad;
      // Made anew by every call, outside the traced ops, between temporaries.
      const Tensor big = full({64, 1024}, 1.0, DType::kFloat32, device);
      const Tensor fresh = FromVector<float>(std::vector<float>(96, 2.0f), Dims{3, 32}, device);
      const Tensor fresh2 = FromVector<float>(std::vector<float>(32, 1.0f), Dims{32}, device);
      acc.w = acc.w + in[0] + sum(big) * 0.0;
      acc.steps = acc.steps + 1.0;
      return std::vector<Tensor>{sum(fresh * table * fresh2 + acc.w.reshape({3, 1}))};
    };
    StaticFunction f(fn, {{"w", &acc.w}, {"steps", &acc.steps}}, device);
    const Tensor x = FromVector<float>({1, 2, 3}, Dims{3}, device);
    std::map<std::string, const void*> captured;  // where the capture left each constant
    for (int i = 1; i <= 3; ++i) {
      // fresh * table * fresh2 sums to 96; w broadcast over 32 columns adds 32 * (1 + 2 + 3) * i.
      EXPECT_EQ(f(std::vector<Tensor>{x})[0].to(Device("cpu")).item<float>(), 96.0f + 192.0f * static_cast<float>(i))
          << name << " call " << i;
      ASSERT_EQ(f.program()->parameters.size(), 3u) << name;
      if (i == 1) {
        for (const auto& [param, value] : f.program()->parameters) captured[param] = value.data_ptr();
      }
    }
    // The two the function made moved into one allocation, in the parameters' order, each at a 256-byte
    // boundary (the caller's keeps its place in it, unused).
    const char* base = nullptr;
    int64_t offset = 0;
    int moved = 0;
    for (const auto& [param, value] : f.program()->parameters) {
      const int64_t bytes = (static_cast<int64_t>(value.nbytes()) + 255) / 256 * 256;
      if (captured[param] == table.data_ptr()) {
        EXPECT_EQ(value.data_ptr(), table.data_ptr()) << name << ": the caller's constant was copied";
      } else {
        const char* at = static_cast<const char*>(value.data_ptr());
        EXPECT_NE(at, captured[param]) << name << " " << param << " did not move";
        if (base == nullptr) base = at - offset;
        EXPECT_EQ(at - base, offset) << name << " " << param;
        ++moved;
      }
      offset += bytes;
    }
    EXPECT_EQ(moved, 2) << name;
  }
}

}  // namespace
}  // namespace oar::jit

namespace oar::jit {
namespace {

// State read inside a cf.if region becomes an input too (placed before the cf.if): a replay with new state
// sees it, rather than the value bound when the executor compiled.
TEST(StaticFunctionTest, StateReadInsideARegionBecomesAnInput) {
  ir::IrContext ctx;
  auto p = ir::ParseProgram(ctx, R"(builtin.module() ({
  %flag = builtin.data() {name = "flag", index = 0} : () -> tensor<[], i1>
  %r = cf.if(%flag) ({
    %w = builtin.parameter() {name = "w"} : () -> tensor<[3], f32>
    %n = op.neg(%w) : (tensor<[3], f32>) -> tensor<[3], f32>
    cf.yield(%n) : (tensor<[3], f32>) -> ()
  }, {
    %z = builtin.constant() {value = [0.0, 0.0, 0.0]} : () -> tensor<[3], f32>
    cf.yield(%z) : (tensor<[3], f32>) -> ()
  }) : (tensor<[], i1>) -> tensor<[3], f32>
  builtin.output(%r) : (tensor<[3], f32>) -> ()
}) : () -> ()
)", "region.oir");
  Tensor w = FromVector<float>({1, 2, 3}, Dims{3});
  p->parameters["w"] = w;
  const std::vector<size_t> slots = StateAsInputs(ctx, *p, {{"w", &w}}, 1);
  EXPECT_EQ(slots, std::vector<size_t>{0});
  const std::string text = ir::Print(*p);
  EXPECT_EQ(text.find("builtin.parameter"), std::string::npos) << text;
  EXPECT_LT(text.find("name = \"w\""), text.find("cf.if")) << text;
  EXPECT_TRUE(p->parameters.empty());
  scheduler::Executor exec(*p, Device("cpu:0"));
  const Tensor yes = full({}, 1.0, DType::kBool);
  EXPECT_EQ(exec.Run(std::vector<Tensor>{yes, w})[0].ToVector<float>(), (std::vector<float>{-1, -2, -3}));
  const Tensor w2 = FromVector<float>({4, 5, 6}, Dims{3});
  EXPECT_EQ(exec.Run(std::vector<Tensor>{yes, w2})[0].ToVector<float>(), (std::vector<float>{-4, -5, -6}));
}

}  // namespace
}  // namespace oar::jit
