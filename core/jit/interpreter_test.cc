#include "core/jit/interpreter.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/ir/text.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/passes/pass.h"
#include "core/scheduler/testing_programs.h"

namespace oar::jit {
namespace {

class InterpreterTest : public ::testing::Test {
 protected:
  std::unique_ptr<ir::Program> Mlp() {
    auto p = ir::ParseProgram(ctx, scheduler::test_programs::kMlp, "mlp.oir");
    Generator g(7);
    p->parameters["w1"] = randn({2, 32}, g, 0, 1, DType::kFloat32, Device("cpu:0"));
    p->parameters["b1"] = randn({32}, g, 0, 1, DType::kFloat32, Device("cpu:0"));
    p->parameters["w2"] = randn({32, 2}, g, 0, 1, DType::kFloat32, Device("cpu:0"));
    return p;
  }
  // The same computation written with the eager API.
  std::vector<Tensor> Eager(const ir::Program& p, const Tensor& x) {
    const Tensor h = tanh(matmul(x, p.parameters.at("w1")) + p.parameters.at("b1"));
    const Tensor probs = softmax(matmul(h, p.parameters.at("w2")), -1);
    return {probs, log(cast(probs, DType::kFloat64)).permute(std::vector<int64_t>{1, 0})};
  }
  ir::IrContext ctx;
};

TEST_F(InterpreterTest, MatchesEagerBitwiseOnCpuForEveryBatch) {
  auto p = Mlp();
  Generator g(3);
  for (int64_t batch : {1, 5, 17}) {  // one program, any batch: B is symbolic
    const Tensor x = randn({batch, 2}, g, 0, 1, DType::kFloat32, Device("cpu:0"));
    const std::vector<Tensor> got = Interpret(*p, std::vector<Tensor>{x}, Device("cpu:0"));
    const std::vector<Tensor> want = Eager(*p, x);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].ToVector<float>(), want[0].ToVector<float>()) << batch;
    EXPECT_EQ(got[1].ToVector<double>(), want[1].ToVector<double>()) << batch;
    EXPECT_EQ(got[1].shape(), (Dims{2, batch}));
  }
}

TEST_F(InterpreterTest, KernelSelectedProgramsAgreeWithCpuOnEverySimulator) {
  Generator g(11);
  const Tensor x = randn({9, 2}, g, 0, 1, DType::kFloat32, Device("cpu:0"));
  auto reference = Mlp();
  const std::vector<Tensor> want = Interpret(*reference, std::vector<Tensor>{x}, Device("cpu:0"));
  for (const char* device : {"kunlun_sim:0", "ascend_sim:1"}) {
    auto p = Mlp();
    passes::PassManager pm;
    pm.AddPipeline(std::string("kernel-select{device=") + device + "},canonicalize,cse");
    pm.Run(*p);
    const std::string text = ir::Print(*p);
    if (std::string(device) == "kunlun_sim:0") {
      // float64 has no kunlun_sim kernel: the cast and the log fall back to the cpu, with transfers.
      EXPECT_NE(text.find("kernel.log(%"), std::string::npos) << text;
      EXPECT_NE(text.find("kernel.transfer"), std::string::npos) << text;
    }
    const std::vector<Tensor> got = Interpret(*p, std::vector<Tensor>{x}, Device(device));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].device(), Device(device));
    const std::vector<float> a = got[0].to(Device("cpu:0")).ToVector<float>(), b = want[0].ToVector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6 * std::max(1.0f, std::fabs(b[i]))) << device;
    const std::vector<double> c = got[1].to(Device("cpu:0")).ToVector<double>(), d = want[1].ToVector<double>();
    for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], d[i], 1e-5 * std::max(1.0, std::fabs(d[i]))) << device;
  }
}

TEST_F(InterpreterTest, PrivateFormatProgramsOnAscendMatchCpu) {
  // A conv block whose relu runs in NC1HWC0 on ascend_sim, with explicit format casts in the program.
  auto make = [&] {
    auto p = ir::ParseProgram(ctx, R"(builtin.module() ({
  %x = builtin.data() {name = "images", index = 0} : () -> tensor<[2, 1, 12, 12], f32>
  %w = builtin.parameter() {name = "w"} : () -> tensor<[4, 1, 3, 3], f32>
  %c = op.conv2d(%x, %w) {padding = [1, 1]} : (tensor<[2, 1, 12, 12], f32>, tensor<[4, 1, 3, 3], f32>) -> tensor<[2, 4, 12, 12], f32>
  %r = op.relu(%c) : (tensor<[2, 4, 12, 12], f32>) -> tensor<[2, 4, 12, 12], f32>
  %p, %i = op.max_pool2d(%r) : (tensor<[2, 4, 12, 12], f32>) -> (tensor<[2, 4, 6, 6], f32>, tensor<[2, 4, 6, 6], i64>)
  builtin.output(%p) : (tensor<[2, 4, 6, 6], f32>) -> ()
}) : () -> ()
)");
    Generator g(5);
    p->parameters["w"] = randn({4, 1, 3, 3}, g, 0, 1, DType::kFloat32, Device("cpu:0"));
    return p;
  };
  Generator g(9);
  const Tensor x = randn({2, 1, 12, 12}, g, 0, 1, DType::kFloat32, Device("cpu:0"));
  const std::vector<float> want = Interpret(*make(), std::vector<Tensor>{x}, Device("cpu:0"))[0].ToVector<float>();
  auto p = make();
  passes::PassManager pm;
  pm.AddPipeline("kernel-select{device=ascend_sim:0}");
  pm.Run(*p);
  ASSERT_NE(ir::Print(*p).find("format = \"NC1HWC0\""), std::string::npos) << ir::Print(*p);
  const std::vector<float> got =
      Interpret(*p, std::vector<Tensor>{x}, Device("ascend_sim:0"))[0].to(Device("cpu:0")).ToVector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0f, std::fabs(want[i])));
}

TEST_F(InterpreterTest, RunsControlFlow) {
  // Sum 1 + 2 + ... while the total stays below a limit given as input; then negate it if a flag is set.
  auto p = ir::ParseProgram(ctx, scheduler::test_programs::kControlFlow);

  for (const char* device : {"cpu:0", "kunlun_sim:0"}) {
    const Device d(device);
    auto run = [&](double limit, bool flag) {
      const std::vector<Tensor> in = {full({}, limit, DType::kFloat32, d), full({}, flag ? 1 : 0, DType::kBool, d)};
      const std::vector<Tensor> out = Interpret(*p, in, d);
      return std::make_pair(out[0].item<double>(), out[1].item<double>());
    };
    EXPECT_EQ(run(10, false), std::make_pair(10.0, 4.0)) << device;  // 1+2+3+4
    EXPECT_EQ(run(11, true), std::make_pair(-15.0, 5.0)) << device;
    EXPECT_EQ(run(0, false), std::make_pair(0.0, 0.0)) << device;
  }
}

TEST_F(InterpreterTest, RefusesInputsThatDoNotMatchTheSpecs) {
  auto p = ir::ParseProgram(ctx, R"(builtin.module() ({
  %a = builtin.data() {name = "a", index = 0} : () -> tensor<[B, 3], f32>
  %b = builtin.data() {name = "b", index = 1} : () -> tensor<[B, 3], f32>
  %w = builtin.parameter() {name = "w"} : () -> tensor<[3], f32>
  %s = op.add(%a, %b) : (tensor<[B, 3], f32>, tensor<[B, 3], f32>) -> tensor<[B, 3], f32>
  %t = op.mul(%s, %w) : (tensor<[B, 3], f32>, tensor<[3], f32>) -> tensor<[B, 3], f32>
  builtin.output(%t) : (tensor<[B, 3], f32>) -> ()
}) : () -> ()
)");
  const Device cpu("cpu:0");
  auto error = [&](std::vector<Tensor> in) {
    try {
      Interpret(*p, in, cpu);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor ok = zeros({2, 3}, DType::kFloat32, cpu);
  EXPECT_NE(error({ok}).find("the program's input 'b' is input 1 but 1 inputs were given"), std::string::npos);
  EXPECT_NE(error({ok, zeros({2, 3}, DType::kFloat64, cpu)}).find("input 1 ('b') must be tensor<[B, 3], f32>, got float64[2, 3]"),
            std::string::npos) << error({ok, zeros({2, 3}, DType::kFloat64, cpu)});
  EXPECT_NE(error({ok, zeros({2, 4}, DType::kFloat32, cpu)}).find("input 1 ('b') must be tensor<[B, 3], f32>, got shape [2, 4]"),
            std::string::npos);
  EXPECT_NE(error({ok, zeros({5, 3}, DType::kFloat32, cpu)}).find("extent 5 for symbol B in dimension 0, but an earlier input bound B = 2"),
            std::string::npos);
  EXPECT_NE(error({ok, ok}).find("parameter 'w' has no value in the program"), std::string::npos);
  p->parameters["w"] = zeros({4}, DType::kFloat32, cpu);
  EXPECT_NE(error({ok, ok}).find("parameter 'w' is float32[4] but the program declares tensor<[3], f32>"), std::string::npos);
  p->parameters["w"] = ones({3}, DType::kFloat32, cpu);
  EXPECT_EQ(error({ok, ok}), "no error");
}

}  // namespace
}  // namespace oar::jit
