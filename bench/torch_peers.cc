// libtorch peers of the Oar benchmarks. Built only when CMake finds libtorch, and without -Werror:
// the torch headers are not warning-clean.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/autograd.h>
#include <torch/nn.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim.h>
#include <torch/types.h>
#include <torch/version.h>

#include "bench/bench.h"

namespace oar::bench {
namespace {

/// False (and an error on `state`) when the twin's parameter count differs from Oar's model.
bool SameSize(benchmark::State& state, const std::vector<torch::Tensor>& params, int64_t oar_parameters) {
  int64_t n = 0;
  for (const torch::Tensor& p : params) n += p.numel();
  if (n == oar_parameters) return true;
  state.SkipWithError(("libtorch twin has " + std::to_string(n) + " parameters, the Oar model " +
                       std::to_string(oar_parameters)).c_str());
  return false;
}

/// Times `step` (one training step returning the loss), reading the loss back each time as Oar's
/// TrainStep does.
template <typename Step>
void TimeSteps(benchmark::State& state, Step&& step) {
  for (auto _ : state) benchmark::DoNotOptimize(step().template item<float>());
}

// ---- the tiny Llama, the same composition of ops as core/nn/layers.cc and core/ops/nn.cc ----------------

/// x * rsqrt(mean(x^2) + eps) * w over the last axis, as oar::rms_norm (libtorch 1.13 has no RMSNorm).
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& w) {
  return x * torch::rsqrt((x * x).mean({-1}, true) + 1e-6) * w;
}

/// oar::rotary_embedding (offset 0, base 10000): angles in float64, halves rotated, then concatenated.
torch::Tensor Rotary(const torch::Tensor& x) {
  const int64_t t = x.size(-2), d = x.size(-1);
  const torch::Tensor inv = torch::pow(10000.0, torch::arange(d / 2, torch::kFloat64) * (-2.0 / d));
  const torch::Tensor angle = torch::arange(t, torch::kFloat64).unsqueeze(1) * inv.unsqueeze(0);
  const torch::Tensor cs = angle.cos().to(x.scalar_type()), sn = angle.sin().to(x.scalar_type());
  const torch::Tensor x1 = x.slice(-1, 0, d / 2), x2 = x.slice(-1, d / 2, d);
  return torch::cat({x1 * cs - x2 * sn, x2 * cs + x1 * sn}, -1);
}

struct BlockImpl : torch::nn::Module {
  BlockImpl(const LlamaConfig& c)
      : heads(c.heads),
        attn_norm(register_parameter("attn_norm", torch::ones({c.dim}))),
        mlp_norm(register_parameter("mlp_norm", torch::ones({c.dim}))),
        qkv(register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(c.dim, 3 * c.dim).bias(false)))),
        out(register_module("out", torch::nn::Linear(torch::nn::LinearOptions(c.dim, c.dim).bias(false)))),
        gate(register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(c.dim, c.hidden).bias(false)))),
        up(register_module("up", torch::nn::Linear(torch::nn::LinearOptions(c.dim, c.hidden).bias(false)))),
        down(register_module("down", torch::nn::Linear(torch::nn::LinearOptions(c.hidden, c.dim).bias(false)))) {}

  /// oar::nn::CausalSelfAttention::Forward without a cache.
  torch::Tensor Attention(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
    const torch::Tensor qkv5 = qkv(x).reshape({b, t, 3, heads, hd}).permute({2, 0, 3, 1, 4});
    const torch::Tensor q = Rotary(qkv5[0]), k = Rotary(qkv5[1]), v = qkv5[2];
    // oar::scaled_dot_product_attention, causal (libtorch 1.13 has no fused one either).
    torch::Tensor scores = torch::matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    const torch::Tensor allowed = torch::ones({t, t}, torch::kBool).tril();
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
    const torch::Tensor y = torch::matmul(torch::softmax(scores, -1), v);
    return out(y.permute({0, 2, 1, 3}).reshape({b, t, d}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = x + Attention(RmsNorm(x, attn_norm));
    const torch::Tensor m = RmsNorm(h, mlp_norm);
    return h + down(torch::silu(gate(m)) * up(m));
  }

  int64_t heads;
  torch::Tensor attn_norm, mlp_norm;
  torch::nn::Linear qkv, out, gate, up, down;
};
TORCH_MODULE(Block);

struct LlamaImpl : torch::nn::Module {
  explicit LlamaImpl(const LlamaConfig& c)
      : emb(register_module("tok_emb", torch::nn::Embedding(c.vocab, c.dim))),
        layers(register_module("layers", torch::nn::ModuleList())),
        norm(register_parameter("norm", torch::ones({c.dim}))) {
    for (int64_t i = 0; i < c.layers; ++i) layers->push_back(Block(c));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::Tensor h = emb(tokens);
    for (const auto& layer : *layers) h = layer->as<BlockImpl>()->forward(h);
    return torch::matmul(RmsNorm(h, norm), emb->weight.transpose(0, 1));  // tied output head
  }

  torch::nn::Embedding emb;
  torch::nn::ModuleList layers;
  torch::Tensor norm;
};
TORCH_MODULE(Llama);

}  // namespace

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
  using enum OpCase;
  torch::manual_seed(2);
  auto indices = [](int64_t n, int64_t bound) {
    torch::Tensor t = torch::empty({n}, torch::kLong);
    for (int64_t i = 0; i < n; ++i) t.data_ptr<int64_t>()[i] = BenchIndex(i, bound);
    return t;
  };
  torch::Tensor x, w, b, g;
  switch (which) {
    case kConv2d:
    case kConv2dBackward:
      x = torch::randn({kConvN, kConvC, kConvHW, kConvHW});
      w = torch::randn({kConvO, kConvC, 3, 3});
      g = torch::randn({kConvN, kConvO, kConvHW, kConvHW});
      break;
    case kMaxPool2d:
    case kMaxPool2dBackward:
    case kAvgPool2d:
    case kAvgPool2dBackward:
      x = torch::randn({kPoolN, kPoolC, kPoolHW, kPoolHW});
      g = torch::randn({kPoolN, kPoolC, kPoolHW / 2, kPoolHW / 2});
      break;
    case kEmbedding:
      w = torch::randn({kEmbedRows, kEmbedDim});
      b = indices(kEmbedTokens, kEmbedRows);
      break;
    case kCrossEntropy:
    case kCrossEntropyBackward:
      x = torch::randn({kCeRows, kCeClasses});
      b = indices(kCeRows, kCeClasses);
      break;
    default:
      x = torch::randn({kRows, kCols});
      w = torch::randn({kCols});
      b = torch::randn({kCols});
      g = torch::randn({kRows, kCols});
      break;
  }
  auto run = [&]() -> torch::Tensor {
    switch (which) {
      case kConv2d:
      case kConv2dBackward: return torch::conv2d(x, w, {}, 1, 1);
      case kSoftmax: return torch::softmax(x, -1);
      case kSoftmaxAxis0: return torch::softmax(x, 0);
      case kLogSoftmax: return torch::log_softmax(x, -1);
      case kLayerNorm: return torch::layer_norm(x, {kCols}, w, b, 1e-5);
      case kRmsNormComposed:  // the same primitive composition as Oar's rms_norm
        return x * torch::rsqrt(torch::mean(x * x, {-1}, true) + 1e-6) * w;
      case kExp: return torch::exp(x);
      case kTanh: return torch::tanh(x);
      case kSigmoid: return torch::sigmoid(x);
      case kRelu: return torch::relu(x);
      case kAdd: return torch::add(x, g);
      case kMul: return torch::mul(x, g);
      case kAddRowBroadcast: return torch::add(x, b);
      case kSumLast: return torch::sum(x, {-1});
      case kSumFirst: return torch::sum(x, {0});
      case kMeanLast: return torch::mean(x, {-1});
      case kMeanFirst: return torch::mean(x, {0});
      case kMaxLast: return torch::amax(x, {-1});
      case kMaxFirst: return torch::amax(x, {0});
      case kMaxPool2d:
      case kMaxPool2dBackward: return torch::max_pool2d(x, {2, 2}, {2, 2});
      case kAvgPool2d:
      case kAvgPool2dBackward: return torch::avg_pool2d(x, {2, 2}, {2, 2});
      case kEmbedding: return torch::embedding(w, b);
      case kCrossEntropy:
      case kCrossEntropyBackward: return torch::nn::functional::cross_entropy(x, b);
    }
    return {};
  };
  const bool backward = which == kConv2dBackward || which == kMaxPool2dBackward || which == kAvgPool2dBackward ||
                        which == kCrossEntropyBackward;
  if (!backward) {
    c10::InferenceMode guard;
    for (auto _ : state) {
      torch::Tensor y = run();
      benchmark::DoNotOptimize(y.data_ptr());
    }
    return;
  }
  x.set_requires_grad(true);
  std::vector<torch::Tensor> wrt{x};
  if (which == kConv2dBackward) {
    w.set_requires_grad(true);
    wrt.push_back(w);
  }
  for (auto _ : state) {
    const torch::Tensor y = run();
    std::vector<torch::Tensor> grads =
        torch::autograd::grad({y}, wrt, g.defined() ? std::vector<torch::Tensor>{g} : std::vector<torch::Tensor>{});
    benchmark::DoNotOptimize(grads[0].data_ptr());
  }
}

void TorchRowNorm(benchmark::State& state, int which, int64_t rows, int64_t cols) {
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({rows, cols}), w = torch::randn({cols}), b = torch::randn({cols});
  c10::InferenceMode guard;
  for (auto _ : state) {
    torch::Tensor y = which == 0   ? RmsNorm(x, w)
                      : which == 1 ? torch::softmax(x, -1)
                                   : torch::layer_norm(x, {cols}, w, b, 1e-5);
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
  TimeSteps(state, [&] {
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  });
}

void TorchCnnTrainStep(benchmark::State& state, const CnnConfig& c) {
  namespace nn = torch::nn;
  torch::manual_seed(4);
  auto pool = [] { return nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)); };
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 8, 5).padding(2)), nn::BatchNorm2d(8), nn::ReLU(), pool(),
                     nn::Conv2d(nn::Conv2dOptions(8, 16, 3).padding(1)), nn::BatchNorm2d(16), nn::ReLU(), pool(),
                     nn::Conv2d(nn::Conv2dOptions(16, 16, 3).padding(1)), nn::BatchNorm2d(16), nn::ReLU(), pool(),
                     nn::Flatten(), nn::Linear(16 * (c.image / 8) * (c.image / 8), 3));
  if (!SameSize(state, net->parameters(), c.parameters)) return;
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(c.lr));
  const torch::Tensor x = torch::randn({c.batch, 1, c.image, c.image});
  const torch::Tensor y = torch::randint(0, 3, {c.batch}, torch::kLong);
  TimeSteps(state, [&] {
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  });
}

void TorchLlamaTrainStep(benchmark::State& state, const LlamaConfig& c) {
  torch::manual_seed(5);
  Llama model(c);
  if (!SameSize(state, model->parameters(), c.parameters)) return;
  model->train();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(c.lr).weight_decay(0.01));
  const torch::Tensor x = torch::randint(0, c.vocab, {c.batch, c.context}, torch::kLong);
  const torch::Tensor y = torch::randint(0, c.vocab, {c.batch * c.context}, torch::kLong);
  TimeSteps(state, [&] {
    opt.zero_grad();
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(model->forward(x).reshape({c.batch * c.context, c.vocab}), y);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    return loss;
  });
}

}  // namespace oar::bench
