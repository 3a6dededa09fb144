// Finite-difference gradient checks (float64) for the math, reduction, softmax, normalisation,
// convolution, pooling and indexing ops and for the composite ops built from them.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <map>

#include "core/autograd/autograd.h"
#include "core/autograd/grad_check.h"
#include "core/ops/decompose.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/runtime/profiler.h"

namespace oar {
namespace {

using testing::GradCheck;
using testing::RandomF64;

TEST(NnGradCheck, UnaryMath) {
  const Tensor x = RandomF64({2, 3}, 11, 0.2, 1.5);  // positive: log, sqrt, rsqrt are defined
  for (auto [name, f] : std::vector<std::pair<std::string, Tensor (*)(const Tensor&)>>{
           {"log", log}, {"log1p", log1p}, {"expm1", expm1}, {"sqrt", sqrt}, {"rsqrt", rsqrt}, {"sin", sin}, {"cos", cos},
           {"tanh", tanh}, {"sigmoid", sigmoid}, {"erf", erf}, {"reciprocal", reciprocal}, {"abs", abs},
           {"square", square}, {"silu", silu}}) {
    GradCheck([f](auto& v) { return f(v[0]); }, {x}, name);
  }
  const Tensor y = RandomF64({2, 3}, 12, -2, 2);
  GradCheck([](auto& v) { return gelu(v[0]); }, {y}, "gelu erf");
  GradCheck([](auto& v) { return gelu(v[0], true); }, {y}, "gelu tanh");
  GradCheck([](auto& v) { return leaky_relu(v[0], 0.1); }, {y}, "leaky_relu");
  GradCheck([](auto& v) { return relu(v[0]); }, {y}, "relu");
}

// ---- relu_grad: relu's VJP as one kernel, bit for bit the composed rule it replaced ------------------------

// n values of `dt` with NaN, +-inf, +-0 and subnormals mixed into normal ones (seeded).
Tensor MixedValues(int64_t n, uint32_t seed, DType dt) {
  const double specials[] = {std::nan(""), INFINITY, -INFINITY, 0.0, -0.0, 1e-40, -1e-41, 3.0};
  std::vector<double> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (double& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (s >> 28) < 5 ? specials[(s >> 8) % 8] : (static_cast<double>(s >> 8) / (1 << 24) - 0.5) * 8;
  }
  return cast(FromVector<double>(v, {n}, Device("cpu")), dt);
}

bool SameBits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         (x.nbytes() == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0);
}

Tensor ComposedReluGrad(const Tensor& g, const Tensor& x) { return g * cast(gt(x, 0.0), x.dtype()); }

TEST(ReluGrad, IsTheComposedRuleBitForBitOnSpecialsEveryLengthAndLayout) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    // Around the vector widths (16 lanes, two vectors a step), below and above the threading threshold.
    for (int64_t n : {0, 1, 15, 31, 32, 33, 63, 64, 65, 1000, 70001}) {
      SCOPED_TRACE(std::string(DTypeName(dt)) + " n " + std::to_string(n));
      const Tensor g = MixedValues(n, 7 + static_cast<uint32_t>(n), dt), x = MixedValues(n, 91, dt);
      const Tensor got = relu_grad(g, x);
      EXPECT_EQ(got.shape(), g.shape());
      EXPECT_TRUE(SameBits(got, ComposedReluGrad(g, x)));
    }
    // Strided operands: x transposed, g every other column.
    const Tensor x = MixedValues(6 * 50, 3, dt).reshape({50, 6}).transpose(0, 1);
    const Tensor g = MixedValues(6 * 100, 4, dt).reshape({6, 100}).slice(1, 0, 100, 2);
    EXPECT_TRUE(SameBits(relu_grad(g, x), ComposedReluGrad(g, x))) << DTypeName(dt);
  }
}

TEST(ReluGrad, RelusBackwardRunsItAndItsOwnGradientIsLinearInGrad) {
  const Tensor x0 = MixedValues(300, 5, DType::kFloat32), r = MixedValues(300, 6, DType::kFloat32);
  Tensor x = x0.detach().clone().set_requires_grad(true);
  const Tensor loss = sum(relu(x) * r);
  runtime::Profiler::Get().Start();  // the backward pass: one relu_grad launch, no gt or cast
  loss.backward();
  std::map<std::string, uint64_t> calls;
  for (const runtime::Profiler::Row& row : runtime::Profiler::Get().Stop()) calls[row.name] += row.calls;
  EXPECT_EQ(calls["relu_grad"], 1u);
  EXPECT_EQ(calls["gt"], 0u);
  EXPECT_EQ(calls["cast"], 0u);
  EXPECT_TRUE(SameBits(x.grad(), ComposedReluGrad(r, x0)));
  // Second order: relu_grad's VJP with respect to grad is relu_grad again; x gets none.
  Tensor g = r.detach().clone().set_requires_grad(true);
  Tensor xs = x0.detach().clone().set_requires_grad(true);
  const Tensor w = MixedValues(300, 8, DType::kFloat32);
  sum(relu_grad(g, xs) * w).backward();
  EXPECT_TRUE(SameBits(g.grad(), ComposedReluGrad(w, x0)));
  EXPECT_FALSE(xs.grad().defined());
  const Tensor y = RandomF64({2, 3}, 12, -2, 2);
  GradCheck([&](auto& v) { return relu_grad(v[0], y); }, {RandomF64({2, 3}, 13)}, "relu_grad");
}

TEST(ReluGrad, RejectsMismatchedShapesAndDTypesNamingTheOp) {
  const Tensor a = zeros({2, 3}), b = zeros({3, 2});
  try {
    relu_grad(a, b);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("relu_grad"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(relu_grad(a, zeros({2, 3}, DType::kFloat64)), Error);
  EXPECT_THROW(relu_grad(zeros({2, 3}, DType::kInt32), zeros({2, 3}, DType::kInt32)), Error);
}

// ---- batch_norm_train(_grad): batch_norm's training forward and its VJP chain, bit for bit the composed ops ---

struct BatchNormResult {
  Tensor y, mean, var, gx, gw, gb;
};

// The composed ops batch_norm ran before batch_norm_train (main's nn.cc, written out), with autograd through
// them: the reference, values and the engine's order of adding gradient contributions both.
BatchNormResult ComposedBatchNorm(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g, double eps) {
  Tensor x = x0.detach().clone().set_requires_grad(true);
  Tensor w = w0.detach().clone().set_requires_grad(true);
  Tensor b = b0.detach().clone().set_requires_grad(true);
  const std::vector<int64_t> axes = x.rank() == 4 ? std::vector<int64_t>{0, 2, 3} : std::vector<int64_t>{0};
  Dims stat = Dims::Filled(x.rank(), 1);
  stat[1] = x.dim(1);
  const Tensor m = mean(x, axes, true);
  const Tensor d = x - m;
  const Tensor v = mean(d * d, axes, true);
  Tensor scale = rsqrt(v + eps);
  scale = scale * w.reshape(stat);
  const Tensor y = d * scale + b.reshape(stat);
  y.backward(g);
  return {y.detach(), m.detach(), v.detach(), x.grad(), w.grad(), b.grad()};
}

// The same through batch_norm (the kernels where the device has them) and autograd.
BatchNormResult ViaBatchNorm(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g, double eps) {
  Tensor x = x0.detach().clone().set_requires_grad(true);
  Tensor w = w0.detach().clone().set_requires_grad(true);
  Tensor b = b0.detach().clone().set_requires_grad(true);
  const Tensor y = batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, eps);
  y.backward(g);
  if (x0.device() != Device("cpu")) return {y.detach(), Tensor(), Tensor(), x.grad(), w.grad(), b.grad()};
  NoGradGuard no_grad;  // the statistics batch_norm gave the running ones
  const std::vector<Tensor> stats = batch_norm_train(x0, w0, b0, eps);
  return {y.detach(), stats[1], stats[2], x.grad(), w.grad(), b.grad()};
}

// Bit for bit on the host (a simulator's tensors are copied first). With `any_nan_for_grad_x`, a NaN in
// grad_x matches any NaN: where two NaNs of different sign meet in one addition (x's specials below), which
// one survives is the compiler's choice of operand order, in the add kernel and in batch_norm_train_grad alike.
bool SameOnHost(const Tensor& a, const Tensor& b, bool any_nan = false) {
  const Tensor x = a.to(Device("cpu")), y = b.to(Device("cpu"));
  if (!any_nan || x.dtype() != DType::kFloat32 || x.shape() != y.shape()) return SameBits(x, y);
  const std::vector<float> u = x.contiguous().ToVector<float>(), v = y.contiguous().ToVector<float>();
  for (size_t i = 0; i < u.size(); ++i) {
    if (std::isnan(u[i]) && std::isnan(v[i])) continue;
    if (std::memcmp(&u[i], &v[i], sizeof(float)) != 0) return false;
  }
  return true;
}

void ExpectSameBatchNorm(const BatchNormResult& got, const BatchNormResult& want, bool any_nan_for_grad_x = false) {
  EXPECT_TRUE(SameOnHost(got.y, want.y)) << "y";
  if (got.mean.defined()) {
    EXPECT_TRUE(SameOnHost(got.mean, want.mean)) << "mean";
    EXPECT_TRUE(SameOnHost(got.var, want.var)) << "var";
  }
  EXPECT_TRUE(SameOnHost(got.gx, want.gx, any_nan_for_grad_x)) << "grad x";
  EXPECT_TRUE(SameOnHost(got.gw, want.gw)) << "grad weight";
  EXPECT_TRUE(SameOnHost(got.gb, want.gb)) << "grad bias";
}

// Values on a large offset (so that the mean's and the variance's roundings matter), some specials.
Tensor BatchNormInput(const Dims& shape, uint32_t seed, DType dt, double offset) {
  int64_t n = 1;
  for (int d = 0; d < shape.size(); ++d) n *= shape[d];
  std::vector<double> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (double& x : v) {
    s = s * 1664525u + 1013904223u;
    x = offset + (static_cast<double>(s >> 8) / (1 << 24) - 0.5) * 6;
  }
  return cast(FromVector<double>(v, shape, Device("cpu")), dt);
}

TEST(BatchNormTrain, ForwardAndGradientsAreTheComposedOpsBitForBitAtOneAndTwoThreads) {
  const int threads = omp_get_max_threads();
  // The cnn example's three layers (8 channels: the sums split over threads; 16: over channels), the
  // column-wise sums ([N, C] and H = W = 1 with C >= 4), H = 1 (SumTo sums fewer axes than the mean), a
  // single element per channel (copies, no sums), odd extents around the pairwise blocks.
  const std::vector<Dims> shapes = {{32, 8, 32, 32}, {32, 16, 16, 16}, {32, 16, 8, 8}, {4, 3, 5, 7},   {40, 6},
                                    {7, 6, 1, 1},    {3, 4, 1, 5},     {1, 3, 1, 1},   {2, 5, 17, 19}, {3, 2}};
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        const Dims& shape = shapes[i];
        SCOPED_TRACE(std::string(DTypeName(dt)) + " " + shape.ToString() + " threads " + std::to_string(t));
        const auto seed = static_cast<uint32_t>(i * 4);
        const Tensor x = BatchNormInput(shape, seed + 1, dt, i % 2 ? 100.0 : -3.0);
        const Tensor w = BatchNormInput({shape[1]}, seed + 2, dt, 1.0);
        const Tensor b = BatchNormInput({shape[1]}, seed + 3, dt, 0.0);
        const Tensor g = BatchNormInput(shape, seed + 4, dt, 0.0) * 0.01;
        ExpectSameBatchNorm(ViaBatchNorm(x, w, b, g, 1e-5), ComposedBatchNorm(x, w, b, g, 1e-5));
        // The ops' decompositions are those composed ops too.
        const std::vector<Tensor> fwd =
            ops::RunDecomposition(ops::Op::kBatchNormTrain, std::vector<Tensor>{x, w, b}, {1e-5});
        const std::vector<Tensor> kernel = batch_norm_train(x, w, b, 1e-5);
        for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(SameBits(fwd[k], kernel[k])) << "decomposed output " << k;
        const std::vector<Tensor> bwd =
            ops::RunDecomposition(ops::Op::kBatchNormTrainGrad, std::vector<Tensor>{g, x, w}, {1e-5});
        const std::vector<Tensor> grads = batch_norm_train_grad(g, x, w, 1e-5);
        for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(SameBits(bwd[k], grads[k])) << "decomposed gradient " << k;
      }
    }
  }
  // NaN and infinities in x and in the gradient go where the composed ops send them.
  const Tensor x = MixedValues(2 * 3 * 4 * 5, 21, DType::kFloat32).reshape({2, 3, 4, 5});
  const Tensor g = MixedValues(2 * 3 * 4 * 5, 22, DType::kFloat32).reshape({2, 3, 4, 5});
  const Tensor w = MixedValues(3, 23, DType::kFloat32), b = MixedValues(3, 24, DType::kFloat32);
  ExpectSameBatchNorm(ViaBatchNorm(x, w, b, g, 1e-5), ComposedBatchNorm(x, w, b, g, 1e-5), true);
  omp_set_num_threads(threads);
}

TEST(BatchNormTrain, RunsTheTwoKernelsOnCpuTheComposedOpsOnTheSimulatorsAndSecondOrderThroughThem) {
  const Dims shape = {8, 4, 6, 6};
  for (const char* device : {"cpu", "kunlun_sim:0", "ascend_sim:0"}) {
    SCOPED_TRACE(device);
    const Device dev(device);
    const Tensor x = BatchNormInput(shape, 31, DType::kFloat32, 2.0).to(dev);
    const Tensor w = BatchNormInput({4}, 32, DType::kFloat32, 1.0).to(dev);
    const Tensor b = BatchNormInput({4}, 33, DType::kFloat32, 0.0).to(dev);
    const Tensor g = BatchNormInput(shape, 34, DType::kFloat32, 0.0).to(dev);
    runtime::Profiler::Get().Start();
    const BatchNormResult got = ViaBatchNorm(x, w, b, g, 1e-5);
    std::map<std::string, uint64_t> calls;
    for (const runtime::Profiler::Row& row : runtime::Profiler::Get().Stop()) calls[row.name] += row.calls;
    const bool cpu = std::string(device) == "cpu";
    // cpu: the forward, the statistics ViaBatchNorm reads again, the backward, and no composed `mean`; the
    // simulators: the composed ops, as before (they register neither kernel), so their values too.
    EXPECT_EQ(calls["batch_norm_train"], cpu ? 2u : 0u);
    EXPECT_EQ(calls["batch_norm_train_grad"], cpu ? 1u : 0u);
    EXPECT_EQ(calls["mean"], cpu ? 0u : 2u);
    ExpectSameBatchNorm(got, ComposedBatchNorm(x, w, b, g, 1e-5));
  }
  // Second order (create_graph): batch_norm_train's VJP runs the composed chain, recorded, so the gradient of a
  // gradient is the composed ops' too.
  const Tensor x0 = RandomF64({4, 3, 2, 2}, 51), w0 = RandomF64({3}, 52, 0.5, 1.5), b0 = RandomF64({3}, 53);
  const Tensor r = RandomF64({4, 3, 2, 2}, 54);
  auto second = [&](bool fused) {
    Tensor x = x0.detach().clone().set_requires_grad(true);
    const Tensor w = w0.detach().clone().set_requires_grad(true);
    Tensor y;
    if (fused) {
      y = batch_norm(x, Tensor(), Tensor(), w, b0, true);
    } else {
      const Tensor m = mean(x, {0, 2, 3}, true);
      const Tensor d = x - m;
      y = d * (rsqrt(mean(d * d, {0, 2, 3}, true) + 1e-5) * w.reshape({1, 3, 1, 1})) + b0.reshape({1, 3, 1, 1});
    }
    const Tensor gx = grad({sum(y * r)}, {x}, {}, /*create_graph=*/true)[0];
    sum(gx * gx).backward();
    return x.grad();
  };
  EXPECT_TRUE(SameBits(second(true), second(false)));
  GradCheck([](auto& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
            {RandomF64({3, 2, 2, 2}, 55), RandomF64({2}, 56, 0.5, 1.5), RandomF64({2}, 57)}, "batch_norm");
}

TEST(BatchNormTrain, RejectsBadShapesAndDTypesNamingTheOpAndTheArgument) {
  const Tensor x = zeros({2, 3, 4, 4}), w = ones({3}), b = zeros({3});
  auto expect_error = [](auto&& f, std::initializer_list<const char*> words) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      for (const char* word : words) EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  expect_error([&] { batch_norm_train(zeros({2, 3, 4}), w, b); }, {"batch_norm_train", "[2, 3, 4]"});
  expect_error([&] { batch_norm_train(x, ones({4}), b); }, {"batch_norm_train", "weight", "[4]"});
  expect_error([&] { batch_norm_train(x, w, zeros({3}, DType::kFloat64)); }, {"batch_norm_train", "bias", "float64"});
  expect_error([&] { batch_norm_train_grad(zeros({2, 3, 4, 5}), x, w); }, {"batch_norm_train_grad", "grad"});
  EXPECT_THROW(
      batch_norm_train(zeros({2, 3, 4, 4}, DType::kFloat16), ones({3}, DType::kFloat16), zeros({3}, DType::kFloat16)),
      Error);
}

TEST(NnGradCheck, BinaryAndWhere) {
  const Tensor a = RandomF64({2, 3}, 13, 0.5, 2), b = RandomF64({3}, 14, 0.5, 2);
  GradCheck([](auto& v) { return pow(v[0], v[1]); }, {a, b}, "pow");
  GradCheck([](auto& v) { return maximum(v[0], v[1]); }, {a, b}, "maximum");
  GradCheck([](auto& v) { return minimum(v[0], v[1]); }, {a, b}, "minimum");
  GradCheck([](auto& v) { return where(gt(v[0], 1.0), v[0], v[1]); }, {a, b}, "where");
  GradCheck([](auto& v) { return clip(v[0], 0.8, 1.6); }, {a}, "clip");
}

TEST(NnGradCheck, Reductions) {
  const Tensor x = RandomF64({3, 4}, 15);
  GradCheck([](auto& v) { return amax(v[0], {1}); }, {x}, "amax");
  GradCheck([](auto& v) { return amin(v[0], {0}, true); }, {x}, "amin");
  GradCheck([](auto& v) { return prod(v[0], {1}); }, {RandomF64({3, 4}, 16, 0.5, 1.5)}, "prod");
  GradCheck([](auto& v) { return var(v[0], {1}); }, {x}, "var");
  GradCheck([](auto& v) { return stddev(v[0], {0}); }, {x}, "std");
  GradCheck([](auto& v) { return logsumexp(v[0], {1}); }, {x}, "logsumexp");
  GradCheck([](auto& v) { return softmax(v[0], 1); }, {x}, "softmax");
  GradCheck([](auto& v) { return log_softmax(v[0], 0); }, {x}, "log_softmax");
}

TEST(NnGradCheck, Normalisation) {
  const Tensor x = RandomF64({2, 3, 4}, 17), w = RandomF64({4}, 18), b = RandomF64({4}, 19);
  GradCheck([](auto& v) { return layer_norm(v[0], 1, v[1], v[2]); }, {x, w, b}, "layer_norm");
  GradCheck([](auto& v) { return rms_norm(v[0], 1, v[1]); }, {x, w}, "rms_norm");
  const Tensor xb = RandomF64({4, 3, 2, 2}, 20), g = RandomF64({3}, 21), bb = RandomF64({3}, 22);
  GradCheck([](auto& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); }, {xb, g, bb}, "batch_norm");
}

TEST(NnGradCheck, ConvolutionAndPooling) {
  const Tensor x = RandomF64({2, 4, 5, 5}, 23), w = RandomF64({6, 2, 3, 3}, 24), b = RandomF64({6}, 25);
  GradCheck([](auto& v) { return conv2d(v[0], v[1], v[2], {2, 1}, {1, 1}, {1, 1}, 2); }, {x, w, b}, "conv2d groups");
  GradCheck([](auto& v) { return conv2d(v[0], v[1], Tensor(), {1, 1}, {0, 0}, {2, 2}, 2); }, {x, w}, "conv2d dilated");
  GradCheck([](auto& v) { return max_pool2d(v[0], {2, 2}, {2, 2}); }, {x}, "max_pool2d");
  GradCheck([](auto& v) { return avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}, false); }, {x}, "avg_pool2d");
  GradCheck([](auto& v) { return adaptive_avg_pool2d(v[0], {2, 3}); }, {x}, "adaptive_avg_pool2d");
}

TEST(NnGradCheck, ConvolutionSecondOrder) {
  // Grad of grad through conv2d's gradient ops (they have VJPs of their own).
  Tensor x = RandomF64({1, 2, 4, 4}, 26), w = RandomF64({3, 2, 3, 3}, 27);
  GradCheck([](auto& v) { return grad({sum(conv2d(v[0], v[1]) * conv2d(v[0], v[1]))}, {v[0]}, {}, true)[0]; }, {x, w},
            "d/dx of conv2d's input gradient", 1e-5);
}

TEST(NnGradCheck, IndexingAndShape) {
  const Tensor x = RandomF64({3, 4}, 28);
  const Tensor idx = FromVector<int64_t>({2, 0, 1, 1, 0, 2, 2, 1}, {2, 4}, Device("cpu"));
  GradCheck([idx](auto& v) { return gather(v[0], 0, idx); }, {x}, "gather");
  const Tensor sel = FromVector<int64_t>({3, 0, 3}, {3}, Device("cpu"));
  GradCheck([sel](auto& v) { return index_select(v[0], 1, sel); }, {x}, "index_select");
  GradCheck([idx](auto& v) { return scatter_add(v[0], 0, idx, v[1]); }, {x, RandomF64({2, 4}, 29)}, "scatter_add");
  GradCheck([](auto& v) { return topk(v[0], 2, 1).first; }, {x}, "topk");
  const int64_t pads[] = {1, 0, 2, 1};
  GradCheck([&](auto& v) { return pad(v[0], pads, 0.5); }, {x}, "pad");
  GradCheck([](auto& v) {
    const Tensor parts[] = {v[0], v[1]};
    return concat(parts, 1);
  }, {x, RandomF64({3, 2}, 30)}, "concat");
  GradCheck([](auto& v) { return tril(v[0], 1) + triu(v[0], 2); }, {x}, "tril + triu");
}

TEST(NnGradCheck, LossesAndAttention) {
  const Tensor logits = RandomF64({4, 5}, 31);
  const Tensor target = FromVector<int64_t>({1, 4, -100, 0}, {4}, Device("cpu"));
  GradCheck([target](auto& v) { return cross_entropy(v[0], target, -100, 0.1); }, {logits}, "cross_entropy");
  GradCheck([](auto& v) { return mse_loss(v[0], v[1]); }, {logits, RandomF64({4, 5}, 32)}, "mse_loss");
  const Tensor ids = FromVector<int64_t>({1, 0, 1, 2}, {2, 2}, Device("cpu"));
  GradCheck([ids](auto& v) { return embedding(v[0], ids); }, {RandomF64({3, 4}, 33)}, "embedding");
  const Tensor q = RandomF64({2, 3, 4}, 34), k = RandomF64({2, 5, 4}, 35), val = RandomF64({2, 5, 4}, 36);
  GradCheck([](auto& v) { return scaled_dot_product_attention(v[0], v[1], v[2], true); }, {q, k, val}, "causal sdpa");
  GradCheck([](auto& v) { return rotary_embedding(v[0], 3); }, {RandomF64({2, 3, 4}, 37)}, "rotary embedding");
}

}  // namespace
}  // namespace oar

namespace oar {
namespace {

TEST(Dropout, DropsAboutPScalesSurvivorsIsSeededAndIdleInEval) {
  const Tensor x = ones({100000}, DType::kFloat32, Device("cpu"));
  Generator g1(5), g2(5);
  const std::vector<float> a = dropout(x, 0.3, g1).ToVector<float>();
  const std::vector<float> b = dropout(x, 0.3, g2).ToVector<float>();
  EXPECT_EQ(a, b);  // same seed, same mask
  int64_t zeros = 0;
  for (float v : a) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      EXPECT_NEAR(v, 1.0f / 0.7f, 1e-6);  // survivors scaled by 1 / (1 - p)
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 100000, 0.3, 0.01);
  Generator g3(5);
  EXPECT_EQ(dropout(x, 0.3, g3, /*training=*/false).ToVector<float>(), std::vector<float>(100000, 1.0f));
  EXPECT_THROW(dropout(x, 1.0, g3), Error);
  // The gradient flows through the kept elements only, with the same scale.
  Tensor w = ones({1000}, DType::kFloat64, Device("cpu"));
  w.set_requires_grad(true);
  Generator g4(6);
  const Tensor y = dropout(w, 0.5, g4);
  sum(y).backward();
  EXPECT_EQ(w.grad().ToVector<double>(), y.detach().ToVector<double>());
}

}  // namespace
}  // namespace oar
