// Self-tests of conv/pooling and the nn ops: hand-computed cases and identities.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "conformance/reference/test_util.h"

namespace oar::reference {
namespace {

using testing::Near;
using testing::Random;
using testing::Same;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------------
// conv2d
// ---------------------------------------------------------------------------------------------------

TEST(RefConv2d, HandComputed) {
  const Array x = Array::Make({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const Array w = Array::Make({1, 1, 2, 2}, {1, 0, 0, -1});  // x[i, j] - x[i+1, j+1] = -4
  EXPECT_TRUE(Same(conv2d(x, w), Array::Full({1, 1, 2, 2}, -4)));
  EXPECT_TRUE(Same(conv2d(x, w, Array::Make({1}, {1})), Array::Full({1, 1, 2, 2}, -3)));
}

TEST(RefConv2d, StrideAndDilation) {
  Array x = Array::Full({1, 1, 5, 5}, 0);
  for (int64_t h = 0; h < 5; ++h) {
    for (int64_t w = 0; w < 5; ++w) x.At({0, 0, h, w}) = static_cast<double>(5 * h + w);
  }
  // Ho = (5 - 2·1 - 1) / 2 + 1 = 2; out[i, j] = x[2i, 2j] + x[2i, 2j+2] + x[2i+2, 2j] + x[2i+2, 2j+2].
  const Array y = conv2d(x, Array::Full({1, 1, 2, 2}, 1), std::nullopt, {2, 2}, {0, 0}, {2, 2});
  EXPECT_TRUE(Same(y, Array::Make({1, 1, 2, 2}, {24, 32, 64, 72})));
}

TEST(RefConv2d, Groups) {
  const Array x = Array::Make({1, 4, 1, 1}, {1, 2, 3, 4});
  const Array w = Array::Make({2, 2, 1, 1}, {1, 1, 1, -1});  // group 0 sees channels 0-1, group 1 sees 2-3
  EXPECT_TRUE(Same(conv2d(x, w, std::nullopt, {1, 1}, {0, 0}, {1, 1}, 2), Array::Make({1, 2, 1, 1}, {3, -1})));
}

TEST(RefConv2d, DeltaKernelIsAShift) {
  // Depthwise 3x3 kernel with its 1 at (0, 0), padding 1: out[i, j] = x[i - 1, j - 1], zero at the border.
  const Array x = Random({2, 3, 4, 5}, 21);
  Array w = Array::Full({3, 1, 3, 3}, 0);
  for (int64_t c = 0; c < 3; ++c) w.At({c, 0, 0, 0}) = 1;
  const Array y = conv2d(x, w, std::nullopt, {1, 1}, {1, 1}, {1, 1}, 3);
  ASSERT_EQ(y.shape, x.shape);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t n = i / 60, c = i / 20 % 3, h = i / 5 % 4, ww = i % 5;
    const double want = (h == 0 || ww == 0) ? 0.0 : x.At({n, c, h - 1, ww - 1});
    EXPECT_EQ(y.data[i], want) << i;
  }
}

TEST(RefConv2d, OneByOneIsLinearOverChannels) {
  const Array x = Random({2, 3, 2, 2}, 22);
  const Array w = Random({4, 3, 1, 1}, 23);
  const Array b = Random({4}, 24);
  const Array via_linear =
      permute(linear(permute(x, {0, 2, 3, 1}), reshape(w, {4, 3}), b), {0, 3, 1, 2});  // NHWC linear
  EXPECT_TRUE(Near(conv2d(x, w, b), via_linear, 1e-15));
}

TEST(RefConv2d, Errors) {
  const Array x = Array::Full({1, 4, 3, 3}, 0);
  EXPECT_OAR_ERROR(conv2d(x, Array::Full({1, 4, 4, 4}, 0)), kInvalidArgument);  // kernel larger than input
  EXPECT_OAR_ERROR(conv2d(x, Array::Full({3, 2, 1, 1}, 0), std::nullopt, {1, 1}, {0, 0}, {1, 1}, 2),
                   kInvalidArgument);  // O = 3 not divisible by groups
  EXPECT_OAR_ERROR(conv2d(x, Array::Full({2, 4, 1, 1}, 0), std::nullopt, {1, 1}, {0, 0}, {1, 1}, 2),
                   kInvalidArgument);  // weight must have C/groups = 2 channels
  EXPECT_OAR_ERROR(conv2d(x, Array::Full({1, 4, 1, 1}, 0), Array::Full({2}, 0)), kInvalidArgument);
  EXPECT_OAR_ERROR(conv2d(x, Array::Full({1, 4, 1, 1}, 0), std::nullopt, {0, 1}), kInvalidArgument);
  EXPECT_OAR_ERROR(conv2d(Array::Full({4, 3, 3}, 0), Array::Full({1, 4, 1, 1}, 0)), kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------------------

TEST(RefPool, MaxPoolValuesAndIndices) {
  Array x = Array::Full({1, 1, 4, 4}, 0);
  for (int64_t i = 0; i < 16; ++i) x.data[i] = static_cast<double>(i);
  const MaxPoolResult r = max_pool2d(x, {2, 2});
  EXPECT_TRUE(Same(r.values, Array::Make({1, 1, 2, 2}, {5, 7, 13, 15})));
  EXPECT_TRUE(Same(r.indices, Array::Make({1, 1, 2, 2}, {5, 7, 13, 15})));
}

TEST(RefPool, MaxPoolPaddingNeverWins) {
  const Array x = Array::Make({1, 1, 2, 2}, {-1, -2, -3, -4});
  const MaxPoolResult r = max_pool2d(x, {2, 2}, Pair2{1, 1}, {1, 1});
  EXPECT_TRUE(Same(r.values, Array::Make({1, 1, 3, 3}, {-1, -1, -2, -1, -1, -2, -3, -3, -4})));
  EXPECT_TRUE(Same(r.indices, Array::Make({1, 1, 3, 3}, {0, 0, 1, 0, 0, 1, 2, 2, 3})));
}

TEST(RefPool, MaxPoolTiesNaNAndDilation) {
  EXPECT_TRUE(Same(max_pool2d(Array::Full({1, 1, 2, 2}, 7), {2, 2}).indices, Array::Make({1, 1, 1, 1}, {0})));
  const MaxPoolResult nan = max_pool2d(Array::Make({1, 1, 2, 2}, {1, kNaN, 5, kNaN}), {2, 2});
  EXPECT_TRUE(Same(nan.values, Array::Make({1, 1, 1, 1}, {kNaN})));
  EXPECT_TRUE(Same(nan.indices, Array::Make({1, 1, 1, 1}, {1})));
  // Dilation 2 on a 3x3: the window is the four corners.
  const Array x = Array::Make({1, 1, 3, 3}, {1, 9, 2, 9, 9, 9, 3, 9, 0});
  const MaxPoolResult d = max_pool2d(x, {2, 2}, std::nullopt, {0, 0}, {2, 2});
  EXPECT_TRUE(Same(d.values, Array::Make({1, 1, 1, 1}, {3})));
  EXPECT_TRUE(Same(d.indices, Array::Make({1, 1, 1, 1}, {6})));
  EXPECT_OAR_ERROR(max_pool2d(x, {2, 2}, std::nullopt, {2, 2}), kInvalidArgument);  // padding > kernel / 2
  EXPECT_OAR_ERROR(max_pool2d(Array::Full({1, 1, 1, 1}, 0), {1, 2}, Pair2{1, 1}, {0, 2}, {1, 3}),
                   kInvalidArgument);  // a window entirely in the padding
}

TEST(RefPool, AvgPoolCountIncludePad) {
  const Array x = Array::Make({1, 1, 2, 2}, {-1, -2, -3, -4});
  const Array with_pad = avg_pool2d(x, {2, 2}, Pair2{1, 1}, {1, 1}, true);
  const Array without = avg_pool2d(x, {2, 2}, Pair2{1, 1}, {1, 1}, false);
  EXPECT_TRUE(Same(with_pad, Array::Make({1, 1, 3, 3}, {-0.25, -0.75, -0.5, -1, -2.5, -1.5, -0.75, -1.75, -1})));
  EXPECT_TRUE(Same(without, Array::Make({1, 1, 3, 3}, {-1, -1.5, -2, -2, -2.5, -3, -3, -3.5, -4})));
  EXPECT_TRUE(Same(avg_pool2d(x, {2, 2}), Array::Make({1, 1, 1, 1}, {-2.5})));
}

TEST(RefPool, AdaptiveAvgPoolWindows) {
  Array x = Array::Full({1, 1, 3, 3}, 0);
  for (int64_t i = 0; i < 9; ++i) x.data[i] = static_cast<double>(i);
  // Rows/cols of output 0: [0, 2); of output 1: [1, 3).
  EXPECT_TRUE(Same(adaptive_avg_pool2d(x, {2, 2}), Array::Make({1, 1, 2, 2}, {2, 3, 5, 6})));
  EXPECT_TRUE(Same(adaptive_avg_pool2d(x, {1, 1}), Array::Make({1, 1, 1, 1}, {4})));
  EXPECT_TRUE(Same(adaptive_avg_pool2d(x, {3, 3}), x));
  // Upsampling repeats: 2 -> 3 windows [0,1), [0,2), [1,2).
  EXPECT_TRUE(
      Same(adaptive_avg_pool2d(Array::Make({1, 1, 1, 2}, {2, 4}), {1, 3}), Array::Make({1, 1, 1, 3}, {2, 3, 4})));
  EXPECT_OAR_ERROR(adaptive_avg_pool2d(x, {0, 1}), kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------
// Softmax and normalisation
// ---------------------------------------------------------------------------------------------------

TEST(RefSoftmax, KnownValuesAndIdentities) {
  EXPECT_TRUE(Near(softmax(Array::Make({3}, {1, 2, 3})),
                   Array::Make({3}, {0.09003057317038046, 0.24472847105479764, 0.6652409557748219}), 1e-16));
  const Array x = Random({3, 4, 5}, 31, -5, 5);
  for (int64_t axis : {0, 1, -1}) {
    EXPECT_TRUE(Near(sum(softmax(x, axis), {axis}), Array::Full(sum(x, {axis}).shape, 1.0), 1e-15));
    EXPECT_TRUE(Near(softmax(add(x, Array::Scalar(1000)), axis), softmax(x, axis), 1e-15));
    EXPECT_TRUE(Near(log_softmax(x, axis), log(softmax(x, axis)), 1e-14));
  }
  EXPECT_TRUE(Near(log_softmax(Array::Make({2}, {1000, 0})), Array::Make({2}, {0, -1000}), 1e-12));
  EXPECT_TRUE(Same(softmax(Array::Make({2}, {0, -kInf})), Array::Make({2}, {1, 0})));
  EXPECT_TRUE(Same(softmax(Array::Make({2}, {-kInf, -kInf})), Array::Make({2}, {kNaN, kNaN})));
  EXPECT_OAR_ERROR(softmax(Array::Scalar(1)), kInvalidArgument);
  EXPECT_OAR_ERROR(softmax(x, 3), kInvalidArgument);
}

TEST(RefNorm, LayerNormHandComputed) {
  const Array x = Array::Make({4}, {1, 2, 3, 4});  // mean 2.5, biased var 1.25
  const double s = 1 / std::sqrt(1.25);
  EXPECT_TRUE(Near(layer_norm(x, 1, std::nullopt, std::nullopt, 0),
                   Array::Make({4}, {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s}), 1e-15));
  EXPECT_TRUE(Near(layer_norm(x, 1, Array::Make({4}, {1, 2, 3, 4}), Array::Make({4}, {0, 0, 0, 1}), 0),
                   Array::Make({4}, {-1.5 * s, -1.0 * s, 1.5 * s, 6 * s + 1}), 1e-15));
  const LayerNormStats st = layer_norm_stats(Array::Make({2, 2}, {1, 3, 5, 5}), 1, 1);
  EXPECT_TRUE(Near(st.mean, Array::Make({2, 1}, {2, 5}), 1e-15));
  EXPECT_TRUE(Near(st.rstd, Array::Make({2, 1}, {1 / std::sqrt(2.0), 1}), 1e-15));
}

TEST(RefNorm, LayerNormNormalisesTrailingDims) {
  const Array x = Random({3, 4, 5}, 41, -3, 7);
  const Array y = layer_norm(x, 2, std::nullopt, std::nullopt, 0);
  EXPECT_TRUE(Near(mean(y, {1, 2}), Array::Full({3}, 0), 1e-14));
  EXPECT_TRUE(Near(var(y, {1, 2}, 0), Array::Full({3}, 1), 1e-14));
  EXPECT_OAR_ERROR(layer_norm(x, 0), kInvalidArgument);
  EXPECT_OAR_ERROR(layer_norm(x, 4), kInvalidArgument);
  EXPECT_OAR_ERROR(layer_norm(x, 2, Array::Full({5}, 1)), kInvalidArgument);
}

TEST(RefNorm, RmsNorm) {
  // mean(x^2) = 12.5.
  EXPECT_TRUE(Near(rms_norm(Array::Make({2}, {3, 4}), 1, std::nullopt, 0),
                   Array::Make({2}, {3 / std::sqrt(12.5), 4 / std::sqrt(12.5)}), 1e-15));
  EXPECT_TRUE(Near(rms_norm(Array::Make({2}, {3, 4}), 1, Array::Make({2}, {2, -1}), 0),
                   Array::Make({2}, {6 / std::sqrt(12.5), -4 / std::sqrt(12.5)}), 1e-15));
  const Array y = rms_norm(Random({4, 6}, 42), 1, std::nullopt, 0);
  EXPECT_TRUE(Near(mean(square(y), {1}), Array::Full({4}, 1), 1e-14));
}

TEST(RefNorm, BatchNorm) {
  // x [N=2, C=2, L=1]: channel 0 holds {1, 3}, channel 1 holds {2, 6}.
  const Array x = Array::Make({2, 2, 1}, {1, 2, 3, 6});
  const BatchNormTrainResult t = batch_norm_train(x, std::nullopt, std::nullopt, 0);
  EXPECT_TRUE(Near(t.y, Array::Make({2, 2, 1}, {-1, -1, 1, 1}), 1e-15));
  EXPECT_TRUE(Same(t.batch_mean, Array::Make({2}, {2, 4})));
  EXPECT_TRUE(Same(t.batch_var_unbiased, Array::Make({2}, {2, 8})));
  const BatchNormTrainResult affine = batch_norm_train(x, Array::Make({2}, {2, 3}), Array::Make({2}, {0.5, -1}), 0);
  EXPECT_TRUE(Near(affine.y, Array::Make({2, 2, 1}, {-1.5, -4, 2.5, 2}), 1e-15));
  // Inference with the batch's biased statistics reproduces training's output.
  EXPECT_TRUE(Near(batch_norm(x, Array::Make({2}, {2, 4}), Array::Make({2}, {1, 4}), std::nullopt, std::nullopt, 0),
                   t.y, 1e-15));
  EXPECT_TRUE(Near(batch_norm(x, Array::Make({2}, {0, 0}), Array::Make({2}, {4, 1}), Array::Make({2}, {1, 2}),
                              Array::Make({2}, {1, 0}), 0),
                   Array::Make({2, 2, 1}, {1.5, 4, 2.5, 12}), 1e-15));
  EXPECT_OAR_ERROR(batch_norm_train(Array::Full({1, 2}, 0)), kInvalidArgument);  // one value per channel
  EXPECT_OAR_ERROR(batch_norm(x, Array::Full({3}, 0), Array::Full({2}, 1)), kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------------------------------

TEST(RefLoss, CrossEntropyHandComputed) {
  const double ln2 = std::log(2.0);
  EXPECT_TRUE(Near(cross_entropy(Array::Make({1, 2}, {0, 0}), Array::Make({1}, {0})), Array::Scalar(ln2), 1e-15));
  // -log softmax([1, 2, 3])[2] = 0.40760596444437554; smoothing 0.3 adds 0.1·(1 + 2) + 0.3·0.4076 - 0.3·0.4076.
  const Array logits = Array::Make({1, 3}, {1, 2, 3});
  EXPECT_TRUE(Near(cross_entropy(logits, Array::Make({1}, {2})), Array::Scalar(0.40760596444437554), 1e-15));
  EXPECT_TRUE(
      Near(cross_entropy(logits, Array::Make({1}, {2}), -100, 0.3), Array::Scalar(0.40760596444437554 + 0.3), 1e-15));
  // Unbatched [C] with a scalar target.
  EXPECT_TRUE(
      Near(cross_entropy(Array::Make({3}, {1, 2, 3}), Array::Scalar(2)), Array::Scalar(0.40760596444437554), 1e-15));
}

TEST(RefLoss, CrossEntropyIgnoreIndexAndReductions) {
  const double a = std::log(2.0), b = -std::log(0.75);  // softmax([0, ln 3])[1] = 3/4
  const Array logits = Array::Make({3, 2}, {0, 0, 5, 5, 0, std::log(3.0)});
  const Array target = Array::Make({3}, {0, -100, 1});
  EXPECT_TRUE(Near(cross_entropy(logits, target), Array::Scalar((a + b) / 2), 1e-15));
  EXPECT_TRUE(Near(cross_entropy(logits, target, -100, 0, Reduction::kSum), Array::Scalar(a + b), 1e-15));
  EXPECT_TRUE(Near(cross_entropy(logits, target, -100, 0, Reduction::kNone), Array::Make({3}, {a, 0, b}), 1e-15));
  EXPECT_TRUE(Same(cross_entropy(logits, Array::Full({3}, 7), 7), Array::Scalar(kNaN)));  // all ignored: 0 / 0
  EXPECT_OAR_ERROR(cross_entropy(logits, Array::Make({3}, {0, 2, 1})), kOutOfRange);
  EXPECT_OAR_ERROR(cross_entropy(logits, Array::Make({3}, {0, 0.5, 1})), kInvalidArgument);
  EXPECT_OAR_ERROR(cross_entropy(logits, Array::Make({2}, {0, 1})), kInvalidArgument);
  EXPECT_OAR_ERROR(cross_entropy(logits, target, -100, 1.5), kInvalidArgument);
}

TEST(RefLoss, CrossEntropySpatialMatchesFlattened) {
  // [N=2, C=3, d=4] equals the [8, 3] problem with the class dimension moved last.
  const Array logits = Random({2, 3, 4}, 51, -2, 2);
  const Array target = Array::Make({2, 4}, {0, 1, 2, 1, 2, 2, 0, 1});
  const Array flat_logits = reshape(permute(logits, {0, 2, 1}), {8, 3});
  EXPECT_TRUE(Near(cross_entropy(logits, target, -100, 0.1),
                   cross_entropy(flat_logits, reshape(target, {8}), -100, 0.1), 1e-15));
  EXPECT_TRUE(Near(cross_entropy(logits, target), nll_loss(log_softmax(logits, 1), target), 1e-15));
}

TEST(RefLoss, NllAndMse) {
  const Array lp = Array::Make({2, 2}, {-1, -2, -3, -4});
  EXPECT_TRUE(Same(nll_loss(lp, Array::Make({2}, {1, 0})), Array::Scalar(2.5)));
  EXPECT_TRUE(Same(nll_loss(lp, Array::Make({2}, {1, 0}), 1, Reduction::kNone), Array::Make({2}, {0, 3})));
  const Array p = Array::Make({3}, {1, 2, 3});
  const Array q = Array::Make({3}, {1, 0, 0});
  EXPECT_TRUE(Near(mse_loss(p, q), Array::Scalar(13.0 / 3), 1e-15));
  EXPECT_TRUE(Same(mse_loss(p, q, Reduction::kSum), Array::Scalar(13)));
  EXPECT_TRUE(Same(mse_loss(p, q, Reduction::kNone), Array::Make({3}, {0, 4, 9})));
  EXPECT_OAR_ERROR(mse_loss(p, Array::Full({1}, 0)), kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------
// Embedding, rotary, attention
// ---------------------------------------------------------------------------------------------------

TEST(RefEmbedding, LooksUpRows) {
  const Array w = Array::Make({3, 2}, {0, 1, 2, 3, 4, 5});
  EXPECT_TRUE(Same(embedding(w, Array::Make({1, 2}, {2, 0})), Array::Make({1, 2, 2}, {4, 5, 0, 1})));
  EXPECT_TRUE(Same(embedding(w, Array::Scalar(1)), Array::Make({2}, {2, 3})));
  EXPECT_OAR_ERROR(embedding(w, Array::Make({1}, {3})), kOutOfRange);
  EXPECT_OAR_ERROR(embedding(w, Array::Make({1}, {-1})), kOutOfRange);
}

TEST(RefRotary, RotatesHalvesByPositionTimesFrequency) {
  // D = 2: one pair (x0, x1) rotated by the position itself.
  const Array x = Array::Make({1, 2}, {1, 0});
  EXPECT_TRUE(Near(rotary_embedding(x, Array::Make({1}, {std::numbers::pi / 2})), Array::Make({1, 2}, {0, 1}), 1e-16));
  EXPECT_TRUE(Same(rotary_embedding(Random({3, 4}, 61), Array::Full({3}, 0)), Random({3, 4}, 61)));
  // D = 4, base 10000: pair (0, 2) turns by p, pair (1, 3) by p / 100.
  const Array y = rotary_embedding(Array::Make({1, 4}, {1, 1, 0, 0}), Array::Make({1}, {2}));
  EXPECT_TRUE(Near(y, Array::Make({1, 4}, {std::cos(2.0), std::cos(0.02), std::sin(2.0), std::sin(0.02)}), 1e-16));
}

TEST(RefRotary, DotProductDependsOnRelativePosition) {
  const Array q = Random({1, 8}, 62), k = Random({1, 8}, 63);
  auto at = [](const Array& v, double p) { return rotary_embedding(v, Array::Make({1}, {p})); };
  auto dot = [](const Array& a, const Array& b) { return sum(mul(a, b)); };
  EXPECT_TRUE(Near(dot(at(q, 5), at(k, 3)), dot(at(q, 2), at(k, 0)), 1e-14));
  // Positions broadcast to x.shape[:-1]: [T] against [B, T, D].
  const Array x = Random({2, 3, 4}, 64);
  const Array pos = Array::Make({3}, {0, 1, 2});
  const Array y = rotary_embedding(x, pos);
  EXPECT_TRUE(Same(slice(y, 0, 1, 2), rotary_embedding(slice(x, 0, 1, 2), pos)));
  EXPECT_OAR_ERROR(rotary_embedding(Array::Full({2, 3}, 0), Array::Full({2}, 0)), kInvalidArgument);  // odd D
}

TEST(RefAttention, SpecialCases) {
  const Array v = Random({1, 3, 2}, 71);
  // Zero queries give uniform weights: the mean of v.
  const Array mean_v = mean(v, {1}, true);
  const Array out = scaled_dot_product_attention(Array::Full({1, 2, 4}, 0), Random({1, 3, 4}, 72), v);
  EXPECT_TRUE(Near(out, concat({mean_v, mean_v}, 1), 1e-15));
  // A mask hiding all but key 1.
  const Array mask = Array::Make({3}, {-kInf, 0, -kInf});
  const Array picked = scaled_dot_product_attention(Random({1, 2, 4}, 73), Random({1, 3, 4}, 74), v, false, mask);
  EXPECT_TRUE(Near(picked, concat({slice(v, 1, 1, 2), slice(v, 1, 1, 2)}, 1), 1e-15));
  // Causal, top-left aligned: query 0 sees only key 0.
  const Array causal = scaled_dot_product_attention(Random({1, 2, 4}, 75), Random({1, 3, 4}, 76), v, true);
  EXPECT_TRUE(Near(slice(causal, 1, 0, 1), slice(v, 1, 0, 1), 1e-15));
  EXPECT_OAR_ERROR(scaled_dot_product_attention(v, v, v, true, mask), kInvalidArgument);
  EXPECT_OAR_ERROR(scaled_dot_product_attention(Random({1, 2, 4}, 1), Random({1, 3, 5}, 2), v), kInvalidArgument);
}

TEST(RefAttention, MatchesTheFormula) {
  const Array q = Random({2, 3, 4}, 81), k = Random({2, 5, 4}, 82), v = Random({2, 5, 3}, 83);
  const Array mask = Random({3, 5}, 84);
  const Array scores = add(mul(matmul(q, transpose(k, -1, -2)), Array::Scalar(0.5)), mask);  // 1/sqrt(4)
  EXPECT_TRUE(Near(scaled_dot_product_attention(q, k, v, false, mask), matmul(softmax(scores), v), 1e-15));
  EXPECT_TRUE(Near(scaled_dot_product_attention(q, k, v, false, std::nullopt, 0.5),
                   scaled_dot_product_attention(q, k, v), 1e-15));
}

}  // namespace
}  // namespace oar::reference
