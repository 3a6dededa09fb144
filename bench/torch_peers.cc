// libtorch peers of the Oar benchmarks. Built only when CMake finds libtorch, and without -Werror:
// the torch headers are not warning-clean.
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/types.h>
#include <torch/version.h>

#include "bench/bench.h"

namespace oar::bench {

std::string TorchVersion() { return TORCH_VERSION; }

void TorchSetThreads(int threads) { at::set_num_threads(threads); }

void TorchDispatchAdd(benchmark::State& state) {
  c10::InferenceMode guard;
  const torch::Tensor a = torch::full({kDispatchElements}, 1.0f, torch::kFloat32);
  const torch::Tensor b = torch::full({kDispatchElements}, 2.0f, torch::kFloat32);
  if (torch::add(a, b).item<float>() != 3.0f) {
    state.SkipWithError("torch::add(1, 2) != 3");
    return;
  }
  for (auto _ : state) {
    torch::Tensor c = torch::add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
}

void TorchMatmul(benchmark::State& state) {
  c10::InferenceMode guard;
  torch::manual_seed(1);
  const torch::Tensor a = torch::randn({kMatmulSize, kMatmulSize}, torch::kFloat32);
  const torch::Tensor b = torch::randn({kMatmulSize, kMatmulSize}, torch::kFloat32);
  {
    const torch::Tensor c = torch::matmul(a, b);
    if (!SpotCheckMatmul(state, a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), kMatmulSize)) {
      return;
    }
  }
  for (auto _ : state) {
    torch::Tensor c = torch::matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  SetFlopRate(state, kMatmulFlops);
}

void TorchStreamAdd(benchmark::State& state, bool preallocated_out) {
  c10::InferenceMode guard;
  const torch::Tensor a = torch::full({kStreamElements}, 1.0f, torch::kFloat32);
  const torch::Tensor b = torch::full({kStreamElements}, 2.0f, torch::kFloat32);
  torch::Tensor out = torch::add(a, b);
  if (out[0].item<float>() != 3.0f || out[kStreamElements - 1].item<float>() != 3.0f) {
    state.SkipWithError("torch::add(1, 2) != 3");
    return;
  }
  for (auto _ : state) {
    if (preallocated_out) {
      torch::add_out(out, a, b);
      benchmark::DoNotOptimize(out.data_ptr());
    } else {
      torch::Tensor c = torch::add(a, b);
      benchmark::DoNotOptimize(c.data_ptr());
    }
  }
  SetByteRate(state, 3 * kStreamBytes);
}

void TorchOpCase(benchmark::State& state, OpCase which) {
  c10::InferenceMode guard;
  torch::manual_seed(2);
  const torch::Tensor x = which == OpCase::kConv2d ? torch::randn({kConvN, kConvC, kConvHW, kConvHW})
                                                   : torch::randn({kRows, kCols});
  const torch::Tensor w = which == OpCase::kConv2d ? torch::randn({kConvO, kConvC, 3, 3}) : torch::randn({kCols});
  const torch::Tensor b = torch::randn({kCols});
  auto run = [&]() -> torch::Tensor {
    switch (which) {
      case OpCase::kConv2d: return torch::conv2d(x, w, {}, 1, 1);
      case OpCase::kSoftmax: return torch::softmax(x, -1);
      case OpCase::kLayerNorm: return torch::layer_norm(x, {kCols}, w, b, 1e-5);
      case OpCase::kRmsNormComposed:  // the same primitive composition as Oar's rms_norm
        return x * torch::rsqrt(torch::mean(x * x, {-1}, true) + 1e-6) * w;
    }
    return {};
  };
  for (auto _ : state) {
    torch::Tensor y = run();
    benchmark::DoNotOptimize(y.data_ptr());
  }
}

void TorchMlpTrainStep(benchmark::State& state) {
  torch::manual_seed(3);
  torch::nn::Sequential net(torch::nn::Linear(2, kMlpHidden), torch::nn::Tanh(), torch::nn::Linear(kMlpHidden, kMlpHidden),
                            torch::nn::Tanh(), torch::nn::Linear(kMlpHidden, kMlpHidden), torch::nn::Tanh(),
                            torch::nn::Linear(kMlpHidden, 2));
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-2));
  const torch::Tensor x = torch::randn({kMlpBatch, 2});
  const torch::Tensor y = torch::randint(0, 2, {kMlpBatch}, torch::kLong);
  for (auto _ : state) {
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(loss.item<float>());
  }
}

}  // namespace oar::bench
