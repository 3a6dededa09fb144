// Every VJP of the reference against central finite differences in double (NumericalVjp), plus the
// subgradient conventions at kinks, checked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "conformance/reference/test_util.h"

namespace oar::reference {
namespace {

using testing::Near;
using testing::Random;
using testing::RandomAwayFromZero;
using testing::Same;

using Fn = std::function<Array(const Array&)>;

// The analytic VJP `vjp(grad_y)` of f at x equals the finite-difference one for a random grad_y.
::testing::AssertionResult VjpMatches(const Fn& f, const Fn& vjp, const Array& x, uint32_t seed, double tol = 1e-7) {
  const Array grad_y = Random(f(x).shape, seed);
  const Array numeric = NumericalVjp(f, x, grad_y);
  const Array analytic = vjp(grad_y);
  const CompareResult r = Compare(analytic, numeric, tol, tol);
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "seed " << seed << ": " << r.message;
}

TEST(RefNumericalGradTest, MatchesHandDerivative) {
  const Array x = Array::Make({3}, {1, -2, 0.5});
  const Array g = NumericalGrad([](const Array& p) { return sum(square(p)).data[0]; }, x);
  EXPECT_TRUE(Near(g, Array::Make({3}, {2, -4, 1}), 1e-8));
  EXPECT_OAR_ERROR(NumericalGrad([](const Array&) { return 0.0; }, x, 0), kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------
// Elementwise
// ---------------------------------------------------------------------------------------------------

struct UnaryCase {
  std::string name;
  Fn f;
  std::function<Array(const Array&, const Array&)> grad;
  Array x;
};

TEST(RefElementwiseGrad, EveryUnaryOpMatchesFiniteDifferences) {
  const Array any = Random({2, 5}, 101, -2, 2);
  const Array kinkless = RandomAwayFromZero({2, 5}, 102, 0.1);  // away from relu/abs kinks at 0
  const Array positive = Random({2, 5}, 103, 0.5, 3);
  const std::vector<UnaryCase> cases = {
      {"neg", [](const Array& x) { return neg(x); }, neg_grad, any},
      {"abs", [](const Array& x) { return abs(x); }, abs_grad, kinkless},
      {"sign", [](const Array& x) { return sign(x); }, sign_grad, kinkless},
      {"exp", [](const Array& x) { return exp(x); }, exp_grad, any},
      {"log", [](const Array& x) { return log(x); }, log_grad, positive},
      {"log1p", [](const Array& x) { return log1p(x); }, log1p_grad, positive},
      {"sqrt", [](const Array& x) { return sqrt(x); }, sqrt_grad, positive},
      {"rsqrt", [](const Array& x) { return rsqrt(x); }, rsqrt_grad, positive},
      {"square", [](const Array& x) { return square(x); }, square_grad, any},
      {"reciprocal", [](const Array& x) { return reciprocal(x); }, reciprocal_grad, positive},
      {"sin", [](const Array& x) { return sin(x); }, sin_grad, any},
      {"cos", [](const Array& x) { return cos(x); }, cos_grad, any},
      {"tanh", [](const Array& x) { return tanh(x); }, tanh_grad, any},
      {"sigmoid", [](const Array& x) { return sigmoid(x); }, sigmoid_grad, any},
      {"relu", [](const Array& x) { return relu(x); }, relu_grad, kinkless},
      {"leaky_relu", [](const Array& x) { return leaky_relu(x, 0.2); },
       [](const Array& x, const Array& g) { return leaky_relu_grad(x, g, 0.2); }, kinkless},
      {"gelu", [](const Array& x) { return gelu(x); }, [](const Array& x, const Array& g) { return gelu_grad(x, g); },
       any},
      {"gelu_tanh", [](const Array& x) { return gelu(x, true); },
       [](const Array& x, const Array& g) { return gelu_grad(x, g, true); }, any},
      {"silu", [](const Array& x) { return silu(x); }, silu_grad, any},
      {"erf", [](const Array& x) { return erf(x); }, erf_grad, any},
      {"clip", [](const Array& x) { return clip(x, -0.75, 0.5); },
       [](const Array& x, const Array& g) { return clip_grad(x, g, -0.75, 0.5); }, kinkless},
  };
  for (const UnaryCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(VjpMatches(
        c.f, [&](const Array& g) { return c.grad(c.x, g); }, c.x, 104));
  }
}

TEST(RefElementwiseGrad, SubgradientConventions) {
  const Array g = Array::Full({3}, 1);
  const Array at = Array::Make({3}, {-1, 0, 1});
  EXPECT_TRUE(Same(relu_grad(at, g), Array::Make({3}, {0, 0, 1})));
  EXPECT_TRUE(Same(abs_grad(at, g), Array::Make({3}, {-1, 0, 1})));
  EXPECT_TRUE(Same(leaky_relu_grad(at, g, 0.1), Array::Make({3}, {0.1, 0.1, 1})));
  EXPECT_TRUE(Same(clip_grad(at, g, 0, 1), Array::Make({3}, {0, 1, 1})));  // bounds inclusive
  const BinaryGrads tie = maximum_grad(Array::Make({2}, {2, 1}), Array::Make({2}, {2, 3}), Array::Make({2}, {4, 4}));
  EXPECT_TRUE(Same(tie.da, Array::Make({2}, {2, 0})));
  EXPECT_TRUE(Same(tie.db, Array::Make({2}, {2, 4})));
  const BinaryGrads p = pow_grad(Array::Make({2}, {0, 2}), Array::Make({2}, {2, 0}), Array::Make({2}, {1, 1}));
  EXPECT_TRUE(Same(p.da, Array::Make({2}, {0, 0})));              // d/da 0^2 = 0; b = 0 gives 0
  EXPECT_TRUE(Same(p.db, Array::Make({2}, {0, std::log(2.0)})));  // a = 0, b >= 0 gives 0
}

struct BinaryCase {
  std::string name;
  std::function<Array(const Array&, const Array&)> f;
  std::function<BinaryGrads(const Array&, const Array&, const Array&)> grad;
  Array a, b;
};

TEST(RefElementwiseGrad, EveryBinaryOpWithBroadcasting) {
  const Array a = Random({2, 3}, 111, -2, 2);
  const Array b = Random({3}, 112, -2, 2);  // broadcast along dimension 0
  const Array pa = Random({2, 3}, 113, 0.5, 2), pb = Random({1, 3}, 114, -2, 2);
  const std::vector<BinaryCase> cases = {
      {"add", [](const Array& p, const Array& q) { return add(p, q); }, add_grad, a, b},
      {"sub", [](const Array& p, const Array& q) { return sub(p, q); }, sub_grad, a, b},
      {"mul", [](const Array& p, const Array& q) { return mul(p, q); }, mul_grad, a, b},
      {"div", [](const Array& p, const Array& q) { return div(p, q); }, div_grad, a, pa},
      {"pow", [](const Array& p, const Array& q) { return pow(p, q); }, pow_grad, pa, pb},
      {"maximum", [](const Array& p, const Array& q) { return maximum(p, q); }, maximum_grad, a, b},
      {"minimum", [](const Array& p, const Array& q) { return minimum(p, q); }, minimum_grad, a, b},
  };
  for (const BinaryCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(VjpMatches([&](const Array& x) { return c.f(x, c.b); },
                           [&](const Array& g) { return c.grad(c.a, c.b, g).da; }, c.a, 115));
    EXPECT_TRUE(VjpMatches([&](const Array& x) { return c.f(c.a, x); },
                           [&](const Array& g) { return c.grad(c.a, c.b, g).db; }, c.b, 116));
  }
}

TEST(RefElementwiseGrad, Where) {
  const Array cond = Array::Make({2, 1}, {1, 0});
  const Array a = Random({3}, 121), b = Random({2, 3}, 122);
  EXPECT_TRUE(VjpMatches([&](const Array& x) { return where(cond, x, b); },
                         [&](const Array& g) { return where_grad(cond, a, b, g).da; }, a, 123));
  EXPECT_TRUE(VjpMatches([&](const Array& x) { return where(cond, a, x); },
                         [&](const Array& g) { return where_grad(cond, a, b, g).db; }, b, 124));
}

// ---------------------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------------------

TEST(RefReduceGrad, MatchFiniteDifferences) {
  const Array x = Random({3, 4}, 131, 0.5, 2);
  for (const auto& [axes, keepdim] :
       std::vector<std::pair<std::vector<int64_t>, bool>>{{{}, false}, {{1}, false}, {{0}, true}, {{-1, 0}, true}}) {
    SCOPED_TRACE(ShapeString(axes) + (keepdim ? " keepdim" : ""));
    auto check = [&](const Fn& f, const Fn& vjp) { EXPECT_TRUE(VjpMatches(f, vjp, x, 132)); };
    const auto ax = axes;
    const bool kd = keepdim;
    check([&](const Array& p) { return sum(p, ax, kd); }, [&](const Array& g) { return sum_grad(x, g, ax, kd); });
    check([&](const Array& p) { return mean(p, ax, kd); }, [&](const Array& g) { return mean_grad(x, g, ax, kd); });
    check([&](const Array& p) { return prod(p, ax, kd); }, [&](const Array& g) { return prod_grad(x, g, ax, kd); });
    check([&](const Array& p) { return max(p, ax, kd); }, [&](const Array& g) { return max_grad(x, g, ax, kd); });
    check([&](const Array& p) { return min(p, ax, kd); }, [&](const Array& g) { return min_grad(x, g, ax, kd); });
    check([&](const Array& p) { return var(p, ax, 1, kd); }, [&](const Array& g) { return var_grad(x, g, ax, 1, kd); });
    check([&](const Array& p) { return var(p, ax, 0, kd); }, [&](const Array& g) { return var_grad(x, g, ax, 0, kd); });
    check([&](const Array& p) { return stddev(p, ax, 1, kd); },
          [&](const Array& g) { return stddev_grad(x, g, ax, 1, kd); });
    check([&](const Array& p) { return logsumexp(p, ax, kd); },
          [&](const Array& g) { return logsumexp_grad(x, g, ax, kd); });
  }
}

TEST(RefReduceGrad, StddevGradIsZeroWhereTheVarianceIsZeroAsTheOpDefinesIt) {
  // docs/ops.md ("stddev gradient at zero variance", as torch): a constant row's gradient is 0, not
  // sqrt's 1 / (2 * 0) times a zero deviation (NaN). Other rows keep theirs (unbiased, correction 1:
  // d std / dx_j = (x_j - mean) / ((n - 1) std)), and a NaN input still gives NaN.
  const double nan = std::nan("");
  const Array x = Array::Make({3, 3}, {2, 2, 2, 1, 2, 3, 1, nan, 3});
  const Array want = Array::Make({3, 3}, {0, 0, 0, -0.5, 0, 0.5, nan, nan, nan});
  EXPECT_TRUE(Same(stddev_grad(x, Array::Full({3}, 1.0), {1}, 1, false), want));
  EXPECT_TRUE(Same(stddev_grad(x, Array::Full({3, 1}, 1.0), {1}, 1, true), want));
  // The population form (correction 0) of a constant vector, reduced to a scalar.
  EXPECT_TRUE(Same(stddev_grad(Array::Full({4}, 7.0), Array::Scalar(3.0), {}, 0), Array::Full({4}, 0.0)));
}

TEST(RefReduceGrad, MaxSplitsAmongTiesAndProdHandlesZeros) {
  EXPECT_TRUE(Same(max_grad(Array::Make({3}, {1, 3, 3}), Array::Scalar(1)), Array::Make({3}, {0, 0.5, 0.5})));
  EXPECT_TRUE(Same(min_grad(Array::Make({2, 2}, {1, 1, 2, 0}), Array::Make({2}, {4, 6}), {1}),
                   Array::Make({2, 2}, {2, 2, 0, 6})));
  EXPECT_TRUE(Same(prod_grad(Array::Make({3}, {2, 0, 3}), Array::Scalar(1)), Array::Make({3}, {0, 6, 0})));
  EXPECT_OAR_ERROR(sum_grad(Array::Full({2, 3}, 0), Array::Full({2}, 0), {1}, true), kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------
// Linear algebra
// ---------------------------------------------------------------------------------------------------

TEST(RefLinalgGrad, MatmulAllShapeCases) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3}, {3, 4}}, {{3}, {3}}, {{3}, {3, 2}}, {{2, 3}, {3}}, {{2, 1, 2, 3}, {4, 3, 2}}, {{5, 2, 3}, {3}}};
  uint32_t seed = 141;
  for (const auto& [sa, sb] : shapes) {
    SCOPED_TRACE(ShapeString(sa) + " @ " + ShapeString(sb));
    const Array a = Random(sa, seed++), b = Random(sb, seed++);
    EXPECT_TRUE(VjpMatches([&](const Array& x) { return matmul(x, b); },
                           [&](const Array& g) { return matmul_grad(a, b, g).da; }, a, seed++));
    EXPECT_TRUE(VjpMatches([&](const Array& x) { return matmul(a, x); },
                           [&](const Array& g) { return matmul_grad(a, b, g).db; }, b, seed++));
  }
}

TEST(RefLinalgGrad, Linear) {
  const Array x = Random({2, 3, 4}, 151), w = Random({5, 4}, 152), b = Random({5}, 153);
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return linear(p, w, b); },
                         [&](const Array& g) { return linear_grad(x, w, g).dx; }, x, 154));
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return linear(x, p, b); },
                         [&](const Array& g) { return linear_grad(x, w, g).dweight; }, w, 155));
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return linear(x, w, p); },
                         [&](const Array& g) { return linear_grad(x, w, g).dbias; }, b, 156));
}

// ---------------------------------------------------------------------------------------------------
// Softmax, normalisation, losses
// ---------------------------------------------------------------------------------------------------

TEST(RefNnGrad, SoftmaxAndLogSoftmax) {
  const Array x = Random({3, 4}, 161, -2, 2);
  for (int64_t axis : {0, -1}) {
    SCOPED_TRACE(axis);
    EXPECT_TRUE(VjpMatches([&](const Array& p) { return softmax(p, axis); },
                           [&](const Array& g) { return softmax_grad(x, g, axis); }, x, 162));
    EXPECT_TRUE(VjpMatches([&](const Array& p) { return log_softmax(p, axis); },
                           [&](const Array& g) { return log_softmax_grad(x, g, axis); }, x, 163));
  }
}

TEST(RefNnGrad, LayerNormAndRmsNorm) {
  const Array x = Random({3, 2, 4}, 171, -2, 2);
  const Array w = Random({2, 4}, 172, 0.5, 1.5), b = Random({2, 4}, 173);
  const double eps = 1e-3;
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return layer_norm(p, 2, w, b, eps); },
                         [&](const Array& g) { return layer_norm_grad(x, g, 2, w, eps).dx; }, x, 174));
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return layer_norm(x, 2, p, b, eps); },
                         [&](const Array& g) { return layer_norm_grad(x, g, 2, w, eps).dweight; }, w, 175));
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return layer_norm(x, 2, w, p, eps); },
                         [&](const Array& g) { return layer_norm_grad(x, g, 2, w, eps).dbias; }, b, 176));
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return layer_norm(p, 1); },
                         [&](const Array& g) { return layer_norm_grad(x, g, 1).dx; }, x, 177));
  const Array w1 = Random({4}, 178, 0.5, 1.5);
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return rms_norm(p, 1, w1, eps); },
                         [&](const Array& g) { return rms_norm_grad(x, g, 1, w1, eps).dx; }, x, 179));
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return rms_norm(x, 1, p, eps); },
                         [&](const Array& g) { return rms_norm_grad(x, g, 1, w1, eps).dweight; }, w1, 180));
}

TEST(RefNnGrad, BatchNormTrainAndRotary) {
  const Array x = Random({3, 2, 2, 2}, 190, -2, 2);
  const Array w = Random({2}, 191, 0.5, 1.5), b = Random({2}, 192);
  const double eps = 1e-3;
  auto grads = [&](const Array& g) { return batch_norm_train_grad(x, g, w, eps); };
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return batch_norm_train(p, w, b, eps).y; },
                         [&](const Array& g) { return grads(g).dx; }, x, 193));
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return batch_norm_train(x, p, b, eps).y; },
                         [&](const Array& g) { return grads(g).dweight; }, w, 194));
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return batch_norm_train(x, w, p, eps).y; },
                         [&](const Array& g) { return grads(g).dbias; }, b, 195));
  const Array q = Random({2, 3, 6}, 196);
  const Array pos = Array::Make({3}, {0, 1.5, 7});
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return rotary_embedding(p, pos, 100.0); },
                         [&](const Array& g) { return rotary_embedding_grad(q, pos, g, 100.0); }, q, 197));
  EXPECT_OAR_ERROR(layer_norm(x, 1, std::nullopt, std::nullopt, -1), kInvalidArgument);
}

TEST(RefNnGrad, Losses) {
  const Array logits = Random({4, 3}, 181, -2, 2);
  const Array target = Array::Make({4}, {2, -100, 0, 1});
  for (Reduction red : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    SCOPED_TRACE(static_cast<int>(red));
    EXPECT_TRUE(VjpMatches([&](const Array& p) { return cross_entropy(p, target, -100, 0.2, red); },
                           [&](const Array& g) { return cross_entropy_grad(logits, target, g, -100, 0.2, red); },
                           logits, 182));
    EXPECT_TRUE(VjpMatches([&](const Array& p) { return nll_loss(p, target, -100, red); },
                           [&](const Array& g) { return nll_loss_grad(logits, target, g, -100, red); }, logits, 183));
    const Array a = Random({2, 3}, 184), b = Random({2, 3}, 185);
    EXPECT_TRUE(VjpMatches([&](const Array& p) { return mse_loss(p, b, red); },
                           [&](const Array& g) { return mse_loss_grad(a, b, g, red).da; }, a, 186));
    EXPECT_TRUE(VjpMatches([&](const Array& p) { return mse_loss(a, p, red); },
                           [&](const Array& g) { return mse_loss_grad(a, b, g, red).db; }, b, 187));
  }
  const Array spatial = Random({2, 3, 2}, 188, -2, 2);
  const Array spatial_target = Array::Make({2, 2}, {0, 2, 1, 1});
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return cross_entropy(p, spatial_target); },
                         [&](const Array& g) { return cross_entropy_grad(spatial, spatial_target, g); }, spatial, 189));
  EXPECT_OAR_ERROR(cross_entropy_grad(logits, target, Array::Full({4}, 1)), kInvalidArgument);  // kMean: scalar
}

// ---------------------------------------------------------------------------------------------------
// Convolution and pooling
// ---------------------------------------------------------------------------------------------------

TEST(RefConvGrad, MatchesFiniteDifferences) {
  struct Config {
    Pair2 stride, padding, dilation;
    int64_t groups;
  };
  uint32_t seed = 191;
  for (const Config& c :
       {Config{{1, 1}, {0, 0}, {1, 1}, 1}, Config{{2, 1}, {1, 2}, {1, 1}, 1}, Config{{1, 2}, {1, 1}, {2, 1}, 2}}) {
    SCOPED_TRACE(seed);
    const Array x = Random({2, 4, 5, 6}, seed++), w = Random({6, 4 / c.groups, 3, 2}, seed++);
    const Array b = Random({6}, seed++);
    auto grads = [&](const Array& g) { return conv2d_grad(x, w, g, c.stride, c.padding, c.dilation, c.groups); };
    EXPECT_TRUE(VjpMatches([&](const Array& p) { return conv2d(p, w, b, c.stride, c.padding, c.dilation, c.groups); },
                           [&](const Array& g) { return grads(g).dx; }, x, seed++));
    EXPECT_TRUE(VjpMatches([&](const Array& p) { return conv2d(x, p, b, c.stride, c.padding, c.dilation, c.groups); },
                           [&](const Array& g) { return grads(g).dweight; }, w, seed++));
    EXPECT_TRUE(VjpMatches([&](const Array& p) { return conv2d(x, w, p, c.stride, c.padding, c.dilation, c.groups); },
                           [&](const Array& g) { return grads(g).dbias; }, b, seed++));
  }
}

TEST(RefPoolGrad, MatchesFiniteDifferences) {
  const Array x = Random({2, 2, 5, 5}, 201);  // continuous values: no ties
  EXPECT_TRUE(VjpMatches(
      [&](const Array& p) {
        return max_pool2d(p, {3, 3}, Pair2{2, 2}, {1, 1}).values;
      },
      [&](const Array& g) {
        return max_pool2d_grad(x, g, {3, 3}, Pair2{2, 2}, {1, 1});
      },
      x, 202));
  EXPECT_TRUE(VjpMatches(
      [&](const Array& p) {
        return max_pool2d(p, {2, 2}, Pair2{1, 1}, {0, 0}, {2, 2}).values;
      },
      [&](const Array& g) {
        return max_pool2d_grad(x, g, {2, 2}, Pair2{1, 1}, {0, 0}, {2, 2});
      },
      x, 203));
  for (bool include : {true, false}) {
    EXPECT_TRUE(VjpMatches(
        [&](const Array& p) {
          return avg_pool2d(p, {3, 2}, Pair2{2, 1}, {1, 1}, include);
        },
        [&](const Array& g) {
          return avg_pool2d_grad(x, g, {3, 2}, Pair2{2, 1}, {1, 1}, include);
        },
        x, 204));
  }
  EXPECT_TRUE(VjpMatches(
      [&](const Array& p) {
        return adaptive_avg_pool2d(p, {3, 2});
      },
      [&](const Array& g) { return adaptive_avg_pool2d_grad(x, g); }, x, 205));
  // Overlapping windows that pick the same element accumulate.
  const Array peak = Array::Make({1, 1, 2, 2}, {0, 0, 0, 9});
  // Nine 2x2 windows over the padded 2x2: the four holding the 9 pick it; among zeros the first in window
  // order wins (element 0 for three windows, elements 1 and 2 for one each).
  EXPECT_TRUE(Same(max_pool2d_grad(peak, Array::Full({1, 1, 3, 3}, 1), {2, 2}, Pair2{1, 1}, {1, 1}),
                   Array::Make({1, 1, 2, 2}, {3, 1, 1, 4})));
}

// ---------------------------------------------------------------------------------------------------
// Indexing
// ---------------------------------------------------------------------------------------------------

TEST(RefIndexGrad, EmbeddingGatherIndexSelect) {
  const Array weight = Random({4, 3}, 211);
  const Array ids = Array::Make({2, 2}, {1, 3, 1, 0});  // repeated row 1 accumulates
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return embedding(p, ids); },
                         [&](const Array& g) { return embedding_grad(weight, ids, g); }, weight, 212));
  const Array x = Random({3, 4}, 213);
  const Array index = Array::Make({2, 4}, {0, 2, 2, 1, 1, 1, 0, 2});
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return gather(p, 0, index); },
                         [&](const Array& g) { return gather_grad(x, index, g, 0); }, x, 214));
  const Array sel = Array::Make({3}, {3, 0, 3});
  EXPECT_TRUE(VjpMatches([&](const Array& p) { return index_select(p, 1, sel); },
                         [&](const Array& g) { return index_select_grad(x, sel, g, 1); }, x, 215));
  EXPECT_TRUE(Same(embedding_grad(Array::Full({2, 1}, 0), Array::Make({3}, {1, 1, 0}), Array::Make({3, 1}, {1, 2, 4})),
                   Array::Make({2, 1}, {4, 3})));
}

}  // namespace
}  // namespace oar::reference
