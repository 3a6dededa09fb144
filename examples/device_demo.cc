// device_demo — run a small two-layer network forward pass on the device named on the command line and
// check it against the same computation on cpu.
//
//   device_demo --device ascend_sim:0        (or OAR_DEVICE=... device_demo)
#include <cmath>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "core/ops/ops.h"

int main(int argc, char** argv) {
  CLI::App app{"Run a small computation on a device chosen by name"};
  std::string device_name;
  uint64_t seed = 0;
  app.add_option("--device", device_name, "Device name, e.g. cpu, cuda:0, kunlun_sim:1 (default: OAR_DEVICE or cpu)");
  app.add_option("--seed", seed, "Seed for the random weights");
  CLI11_PARSE(app, argc, argv);
  try {
    const oar::Device device = device_name.empty() ? oar::DefaultDevice() : oar::Device(device_name);
    // A batch of 4 inputs through Linear(8 -> 16) + ReLU + Linear(16 -> 3), then the mean of each row.
    auto forward = [&](oar::Device d) {
      oar::Generator gen(seed);
      const oar::Tensor x = oar::randn({4, 8}, gen, 0, 1, oar::DType::kFloat32, d);
      const oar::Tensor w1 = oar::randn({8, 16}, gen, 0, 0.35, oar::DType::kFloat32, d);
      const oar::Tensor b1 = oar::full({16}, 0.1, oar::DType::kFloat32, d);
      const oar::Tensor w2 = oar::randn({3, 16}, gen, 0, 0.25, oar::DType::kFloat32, d);
      const oar::Tensor h = oar::relu(oar::matmul(x, w1) + b1);
      const oar::Tensor logits = oar::matmul(h, w2.transpose(0, 1));  // a transposed view, no copy
      return oar::mean(oar::exp(logits), {1});
    };
    const oar::Tensor result = forward(device);
    std::printf("device %s\n%s\n", result.device().str().c_str(), result.ToString().c_str());
    const std::vector<float> got = result.ToVector<float>();
    const std::vector<float> want = forward(oar::Device("cpu")).ToVector<float>();
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0f, std::abs(want[i])));
    std::printf("check: %s (max relative difference from cpu %.3g)\n", worst < 1e-4f ? "OK" : "MISMATCH", worst);
    return worst < 1e-4f ? 0 : 1;
  } catch (const oar::Error& e) {
    std::fprintf(stderr, "device_demo: error: %s\n", e.ToString().c_str());
    return 1;
  }
}
