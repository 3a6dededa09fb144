// The example models train on the simulated accelerators like on cpu: the loss of every step within 1 %
// (relative) of the cpu curve, and the same held-out metric at the end. ascend_sim runs in its default
// `exact` precision mode, and its 4-D elementwise ops go through NC1HWC0 (private-format kernels).
// Where the build has the gpu_emu test plugin, the same holds for the shared GPU kernels (the cuda and hip
// plugins' code) on gpu_emu:0, with no fallback at all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/runtime/runtime.h"
#include "examples/models.h"

namespace oar::examples {
namespace {

struct Case {
  std::string model;
  int64_t steps;
  double metric_band;  // allowed |device - cpu| of the final metric
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " x" << c.steps; }  // readable test names

#if defined(OAR_GPU_EMU_PLUGIN)
// The runtime discovers gpu_emu only where OAR_PLUGIN_PATH names it; set before the runtime starts.
[[maybe_unused]] const bool kGpuEmuOnPath = setenv("OAR_PLUGIN_PATH", OAR_GPU_EMU_PLUGIN, 1) == 0;
std::vector<std::string> Devices() { return {"kunlun_sim:0", "ascend_sim:0", "gpu_emu:0"}; }
#else
std::vector<std::string> Devices() { return {"kunlun_sim:0", "ascend_sim:0"}; }
#endif

class SimCurves : public ::testing::TestWithParam<std::tuple<Case, std::string>> {};

TEST_P(SimCurves, LossWithinOnePercentOfCpuAtEveryStep) {
  const auto& [c, device] = GetParam();
  const std::string type = Device(device).type();
  // gpu_emu runs every GPU thread on the host, 10-40x slower than the simulators: a fifth of the steps
  // exercises the same kernels (each step runs the same ops) and keeps CI time proportionate.
  const int64_t steps = type == "gpu_emu" ? std::max<int64_t>(c.steps / 5, 5) : c.steps;
  auto on_cpu = MakeExample(c.model, Device("cpu:0"), 7);
  auto on_dev = MakeExample(c.model, Device(device), 7);
  const std::vector<double> cpu = Train(*on_cpu, steps), dev = Train(*on_dev, steps);
  ASSERT_EQ(cpu.size(), dev.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_LE(std::abs(dev[i] - cpu[i]), 0.01 * std::abs(cpu[i]))
        << c.model << " on " << device << " step " << i << ": " << dev[i] << " vs cpu " << cpu[i];
  }
  const double m_cpu = on_cpu->Evaluate(), m_dev = on_dev->Evaluate();
  EXPECT_NEAR(m_dev, m_cpu, c.metric_band) << c.model << " " << on_cpu->metric_name() << " on " << device;
  // What may run on cpu instead: the dtypes each simulator declares unsupported — float64 on both (data
  // preparation casts, the float64 sums of gradient-norm clipping), and on kunlun_sim int64 arithmetic
  // and comparisons (label masks of cross-entropy, position arithmetic of the KV cache).
  // gpu_emu has a kernel for every op and dtype: nothing may fall back.
  const std::set<std::string> allowed = type == "kunlun_sim"
                                            ? std::set<std::string>{"cast", "sum", "add", "le", "ne", "where"}
                                        : type == "gpu_emu" ? std::set<std::string>{}
                                                            : std::set<std::string>{"cast", "sum"};
  for (const auto& [op, n] : runtime::Runtime::Get().FindType(Device(device).type())->FallbackCounts()) {
    EXPECT_TRUE(allowed.count(op)) << c.model << " on " << device << ": op '" << op << "' fell back " << n << " times";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SimCurves,
                         ::testing::Combine(::testing::Values(Case{"mlp", 150, 0.02}, Case{"cnn", 40, 0.02},
                                                              Case{"llama", 30, 0.01}),
                                            ::testing::ValuesIn(Devices())),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param).model + "_" + std::get<1>(info.param);
                           for (char& ch : name) {
                             if (ch == ':') ch = '_';
                           }
                           return name;
                         });

TEST(SimCurves, AscendRanPrivateFormatKernels) {
  auto e = MakeExample("cnn", Device("ascend_sim:0"), 7);
  const auto before = runtime::Runtime::Get().FindType("ascend_sim")->format_stats().kernel_calls;
  Train(*e, 1);
  EXPECT_GT(runtime::Runtime::Get().FindType("ascend_sim")->format_stats().kernel_calls, before);
}

}  // namespace
}  // namespace oar::examples
