// Every cpu kernel, through the eager API, against the independent fp64 reference: several dtypes,
// broadcasting, non-contiguous views, empty and size-1 dims, NaN/±inf positions, with the tolerances of
// conformance/tolerances.json.
#include <cmath>
#include <functional>
#include <limits>

#include <gtest/gtest.h>

#include "conformance/reference/reference.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"

namespace oar {
namespace {

namespace ref = oar::reference;
using ref::Array;

const Device kCpu("cpu");

ref::RefDType ToRef(DType t) {
  switch (t) {
    case DType::kFloat32: return ref::RefDType::F32;
    case DType::kFloat64: return ref::RefDType::F64;
    case DType::kFloat16: return ref::RefDType::F16;
    case DType::kBFloat16: return ref::RefDType::BF16;
    case DType::kInt8: return ref::RefDType::I8;
    case DType::kUInt8: return ref::RefDType::U8;
    case DType::kInt32: return ref::RefDType::I32;
    case DType::kInt64: return ref::RefDType::I64;
    default: return ref::RefDType::BOOL;
  }
}

Array ToArray(const Tensor& t) { return Array::Make(std::vector<int64_t>(t.shape().begin(), t.shape().end()), t.ToVector<double>()); }

// A tensor of `dtype` holding `a`'s values (rounded to the dtype), and the Array of the rounded values.
Tensor FromArray(const Array& a, DType dtype) {
  return cast(FromVector<double>(a.data, Dims(std::span<const int64_t>(a.shape)), kCpu), dtype);
}

Array Random(std::vector<int64_t> shape, uint64_t seed, double lo = -2, double hi = 2) {
  Generator g(seed);
  const int64_t n = ref::NumElements(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = lo + (hi - lo) * g.NextDouble();
  return Array::Make(std::move(shape), std::move(v));
}

std::string Tolerances() { return std::string(OAR_SOURCE_DIR) + "/conformance/tolerances.json"; }

void ExpectClose(const Tensor& got, const Array& want, const char* op_class, DType dtype, const std::string& what,
                 int64_t k = 1) {
  const ref::Tolerance tol = ref::LoadTolerance(Tolerances(), op_class, ToRef(dtype)).ForLength(k);
  const ref::CompareResult r = ref::Compare(ToArray(got), want, tol);
  EXPECT_TRUE(r.ok) << what << " [" << DTypeName(dtype) << "]: " << r.message;
}

const DType kFloats[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};

// Inputs rounded to `dtype` so the reference sees exactly what the kernel sees.
struct Input {
  Tensor t;
  Array a;
};
Input Make(std::vector<int64_t> shape, uint64_t seed, DType dtype, double lo = -2, double hi = 2) {
  Tensor t = FromArray(Random(std::move(shape), seed, lo, hi), dtype);
  return {t, ToArray(t)};
}

TEST(CpuVsReference, UnaryMath) {
  using Pair = std::pair<Tensor (*)(const Tensor&), Array (*)(const Array&)>;
  const std::vector<std::tuple<std::string, Pair, double, double>> cases = {
      {"exp", {exp, ref::exp}, -3, 3},         {"log", {log, ref::log}, 0.1, 5},
      {"log1p", {log1p, ref::log1p}, -0.5, 3}, {"sqrt", {sqrt, ref::sqrt}, 0, 5},
      {"rsqrt", {rsqrt, ref::rsqrt}, 0.1, 5},  {"sin", {sin, ref::sin}, -3, 3},
      {"cos", {cos, ref::cos}, -3, 3},         {"tanh", {tanh, ref::tanh}, -4, 4},
      {"sigmoid", {sigmoid, ref::sigmoid}, -8, 8}, {"erf", {erf, ref::erf}, -3, 3},
      {"reciprocal", {reciprocal, ref::reciprocal}, 0.2, 3}, {"abs", {abs, ref::abs}, -3, 3},
      {"neg", {neg, ref::neg}, -3, 3},         {"relu", {relu, ref::relu}, -3, 3},
      {"sign", {sign, ref::sign}, -3, 3},
  };
  for (DType dt : kFloats) {
    for (const auto& [name, fns, lo, hi] : cases) {
      const Input x = Make({3, 5}, 1, dt, lo, hi);
      const bool exact = name == "abs" || name == "neg" || name == "relu" || name == "sign";
      const Array want = fns.second(x.a);
      ExpectClose(fns.first(x.t), exact ? ref::RoundTo(want, ToRef(dt)) : want,
                  exact ? "elementwise_exact" : "elementwise_transcendental", dt, name);
      // A transposed (non-contiguous) view gives the same answer.
      ExpectClose(fns.first(x.t.transpose(0, 1)), ref::transpose(exact ? ref::RoundTo(want, ToRef(dt)) : want, 0, 1),
                  exact ? "elementwise_exact" : "elementwise_transcendental", dt, name + " of a transposed view");
    }
  }
}

TEST(CpuVsReference, SpecialValuesKeepTheirPositions) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Array special = Array::Make({6}, {0.0, -0.0, inf, -inf, nan, 1e30});
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Tensor x = FromArray(special, dt);
    const Array xa = ToArray(x);
    ExpectClose(exp(x), ref::exp(xa), "elementwise_transcendental", dt, "exp of specials");
    ExpectClose(tanh(x), ref::tanh(xa), "elementwise_transcendental", dt, "tanh of specials");
    ExpectClose(sigmoid(x), ref::sigmoid(xa), "elementwise_transcendental", dt, "sigmoid of specials");
    ExpectClose(maximum(x, zeros_like(x)), ref::maximum(xa, Array::Full({6}, 0)), "elementwise_exact", dt, "maximum");
    ExpectClose(cast(isnan(x), DType::kFloat64), ref::isnan(xa), "elementwise_exact", DType::kFloat64, "isnan");
    ExpectClose(cast(isinf(x), DType::kFloat64), ref::isinf(xa), "elementwise_exact", DType::kFloat64, "isinf");
    ExpectClose(softmax(FromArray(Array::Make({2, 3}, {1e4, 0, -1e4, -inf, 0, 1}), dt), 1),
                ref::softmax(Array::Make({2, 3}, {1e4, 0, -1e4, -inf, 0, 1}), 1), "normalization", dt,
                "softmax of huge and -inf logits");
  }
}

TEST(CpuVsReference, BinaryWithBroadcastingAndViews) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  using RefFn = Array (*)(const Array&, const Array&);
  const std::vector<std::tuple<std::string, Fn, RefFn, bool>> cases = {
      {"add", add, ref::add, true},         {"sub", sub, ref::sub, true},         {"mul", mul, ref::mul, true},
      {"div", div, ref::div, false},        {"maximum", maximum, ref::maximum, true},
      {"minimum", minimum, ref::minimum, true}, {"pow", pow, ref::pow, false},
  };
  for (DType dt : kFloats) {
    for (const auto& [name, f, rf, exact] : cases) {
      const Input a = Make({4, 1, 3}, 2, dt, 0.5, 2);
      const Input b = Make({5, 3}, 3, dt, 0.5, 2);
      const Array want = rf(a.a, b.a);
      const char* cls = exact ? "elementwise_exact" : "elementwise_transcendental";
      ExpectClose(f(a.t, b.t), exact ? ref::RoundTo(want, ToRef(dt)) : want, cls, dt, name + " broadcast");
      // b given as a transposed view of a [3, 5] tensor.
      const Input bt = Make({3, 5}, 4, dt, 0.5, 2);
      const Array want2 = rf(a.a, ref::transpose(bt.a, 0, 1));
      ExpectClose(f(a.t, bt.t.transpose(0, 1)), exact ? ref::RoundTo(want2, ToRef(dt)) : want2, cls, dt,
                  name + " with a transposed operand");
    }
  }
  // Empty and size-1 dims.
  const Input e = Make({0, 3}, 5, DType::kFloat32);
  EXPECT_EQ((e.t + Make({1, 3}, 6, DType::kFloat32).t).shape(), (Dims{0, 3}));
}

TEST(CpuVsReference, ComparisonsAndWhere) {
  for (DType dt : {DType::kFloat32, DType::kInt32, DType::kInt64}) {
    const Input a = Make({3, 4}, 7, dt, -3, 3), b = Make({4}, 8, dt, -3, 3);
    const std::vector<std::tuple<std::string, Tensor (*)(const Tensor&, const Tensor&), Array (*)(const Array&, const Array&)>>
        cmp = {{"eq", eq, ref::eq}, {"ne", ne, ref::ne}, {"lt", lt, ref::lt},
               {"le", le, ref::le}, {"gt", gt, ref::gt}, {"ge", ge, ref::ge}};
    for (const auto& [name, f, rf] : cmp) {
      ExpectClose(cast(f(a.t, b.t), DType::kFloat64), rf(a.a, b.a), "elementwise_exact", DType::kFloat64,
                  name + " " + std::string(DTypeName(dt)));
    }
    const Tensor cond = gt(a.t, b.t);
    ExpectClose(where(cond, a.t, b.t), ref::where(ref::gt(a.a, b.a), a.a, b.a), "elementwise_exact", dt, "where");
  }
}

TEST(CpuVsReference, Reductions) {
  for (DType dt : kFloats) {
    const Input x = Make({4, 5, 6}, 9, dt);
    for (const std::vector<int64_t>& axes : std::vector<std::vector<int64_t>>{{}, {0}, {2}, {0, 2}, {-1, 1}}) {
      const std::string tag = "axes [" + std::to_string(axes.size()) + "]";
      ExpectClose(sum(x.t, axes), ref::sum(x.a, axes), "reduction", dt, "sum " + tag, 120);
      ExpectClose(mean(x.t, axes, true), ref::mean(x.a, axes, true), "reduction", dt, "mean " + tag, 120);
      ExpectClose(amax(x.t, axes), ref::max(x.a, axes), "reduction", dt, "max " + tag);
      ExpectClose(amin(x.t, axes), ref::min(x.a, axes), "reduction", dt, "min " + tag);
    }
    ExpectClose(sum(x.t.permute({2, 0, 1}), {1}), ref::sum(ref::permute(x.a, {2, 0, 1}), {1}), "reduction", dt,
                "sum of a permuted view", 4);
    const Input p = Make({3, 4}, 10, dt, 0.5, 1.5);
    ExpectClose(prod(p.t, {1}), ref::prod(p.a, {1}), "reduction", dt, "prod", 4);
    ExpectClose(cast(argmax(x.t, 1), DType::kFloat64), ref::argmax(x.a, 1), "indexing", DType::kFloat64, "argmax");
    ExpectClose(cast(argmin(x.t, 2, true), DType::kFloat64), ref::argmin(x.a, 2, true), "indexing", DType::kFloat64,
                "argmin");
  }
  // A long reduction (accuracy) in float32.
  const Input big = Make({1 << 18}, 11, DType::kFloat32, 0, 1);
  ExpectClose(sum(big.t), ref::sum(big.a), "reduction", DType::kFloat32, "sum of 2^18", 1 << 18);
}

TEST(CpuVsReference, SoftmaxAndNorms) {
  for (DType dt : kFloats) {
    const Input x = Make({4, 7}, 12, dt, -5, 5);
    ExpectClose(softmax(x.t, 1), ref::softmax(x.a, 1), "normalization", dt, "softmax");
    ExpectClose(log_softmax(x.t, 0), ref::log_softmax(x.a, 0), "normalization", dt, "log_softmax");
    const Input w = Make({7}, 13, dt), b = Make({7}, 14, dt);
    ExpectClose(layer_norm(x.t, 1, w.t, b.t), ref::layer_norm(x.a, 1, w.a, b.a), "normalization", dt, "layer_norm");
    ExpectClose(rms_norm(x.t, 1, w.t), ref::rms_norm(x.a, 1, w.a), "normalization", dt, "rms_norm");
  }
}

TEST(CpuVsReference, MatmulShapes) {
  for (DType dt : kFloats) {
    const Input a = Make({2, 3, 17}, 15, dt), b = Make({17, 5}, 16, dt);
    ExpectClose(matmul(a.t, b.t), ref::matmul(a.a, b.a), "matmul", dt, "batched x broadcast", 17);
    const Input bt = Make({5, 17}, 17, dt);
    ExpectClose(matmul(a.t, bt.t.transpose(0, 1)), ref::matmul(a.a, ref::transpose(bt.a, 0, 1)), "matmul", dt,
                "transposed operand", 17);
    const Input v = Make({17}, 18, dt);
    ExpectClose(matmul(a.t, v.t), ref::matmul(a.a, v.a), "matmul", dt, "matrix-vector", 17);
  }
}

TEST(CpuVsReference, ConvolutionAndPooling) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Input x = Make({2, 4, 9, 8}, 19, dt), w = Make({6, 2, 3, 3}, 20, dt), b = Make({6}, 21, dt);
    ExpectClose(conv2d(x.t, w.t, b.t, {2, 1}, {1, 2}, {1, 2}, 2),
                ref::conv2d(x.a, w.a, b.a, {2, 1}, {1, 2}, {1, 2}, 2), "conv", dt, "conv2d groups/dilation", 18);
    ExpectClose(max_pool2d(x.t, {3, 2}, {2, 2}, {1, 1}), ref::max_pool2d(x.a, {3, 2}, ref::Pair2{2, 2}, {1, 1}).values,
                "elementwise_exact", dt, "max_pool2d");
    ExpectClose(avg_pool2d(x.t, {3, 3}, {2, 2}, {1, 1}, false),
                ref::avg_pool2d(x.a, {3, 3}, ref::Pair2{2, 2}, {1, 1}, false), "reduction", dt, "avg_pool2d", 9);
    ExpectClose(adaptive_avg_pool2d(x.t, {4, 3}), ref::adaptive_avg_pool2d(x.a, {4, 3}), "reduction", dt,
                "adaptive_avg_pool2d", 9);
  }
}

TEST(CpuVsReference, Indexing) {
  const Input x = Make({4, 5}, 22, DType::kFloat32);
  const Array idx = Array::Make({2, 5}, {3, 0, 1, 2, 3, 0, 0, 3, 1, 2});
  const Tensor idx_t = cast(FromArray(idx, DType::kFloat64), DType::kInt64);
  ExpectClose(gather(x.t, 0, idx_t), ref::gather(x.a, 0, idx), "indexing", DType::kFloat32, "gather");
  const Array sel = Array::Make({3}, {4, 0, 4});
  const Tensor sel_t = cast(FromArray(sel, DType::kFloat64), DType::kInt64);
  ExpectClose(index_select(x.t, 1, sel_t), ref::index_select(x.a, 1, sel), "indexing", DType::kFloat32, "index_select");
  const Input src = Make({2, 5}, 23, DType::kFloat32);
  ExpectClose(scatter_add(x.t, 0, idx_t, src.t), ref::scatter_add(x.a, 0, idx, src.a), "reduction", DType::kFloat32,
              "scatter_add");
  const auto [vals, inds] = topk(x.t, 3, 1);
  const ref::TopKResult want = ref::topk(x.a, 3, 1);
  ExpectClose(vals, want.values, "indexing", DType::kFloat32, "topk values");
  ExpectClose(cast(inds, DType::kFloat64), want.indices, "indexing", DType::kFloat64, "topk indices");
  const int64_t pads[] = {1, 2, 0, 3};
  ExpectClose(pad(x.t, pads, 0.5), ref::pad(x.a, {1, 2, 0, 3}, 0.5), "indexing", DType::kFloat32, "pad");
  const Input y = Make({4, 2}, 24, DType::kFloat32);
  const Tensor parts[] = {x.t, y.t};
  ExpectClose(concat(parts, 1), ref::concat({x.a, y.a}, 1), "indexing", DType::kFloat32, "concat");
  // A bad index is a clean error naming it.
  const Tensor bad = cast(FromArray(Array::Make({1}, {9}), DType::kFloat64), DType::kInt64);
  try {
    index_select(x.t, 0, bad);
    ADD_FAILURE() << "index 9 of an extent-4 axis was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange) << e.what();
  }
}

TEST(CpuVsReference, CompositeOps) {
  const Input logits = Make({5, 4}, 25, DType::kFloat64);
  const Array target = Array::Make({5}, {1, 3, -100, 0, 2});
  const Tensor target_t = cast(FromArray(target, DType::kFloat64), DType::kInt64);
  ExpectClose(cross_entropy(logits.t, target_t, -100, 0.1), ref::cross_entropy(logits.a, target, -100, 0.1),
              "normalization", DType::kFloat64, "cross_entropy");
  const Input x = Make({3, 4}, 26, DType::kFloat64);
  ExpectClose(gelu(x.t), ref::gelu(x.a), "elementwise_transcendental", DType::kFloat64, "gelu");
  ExpectClose(gelu(x.t, true), ref::gelu(x.a, true), "elementwise_transcendental", DType::kFloat64, "gelu tanh");
  ExpectClose(var(x.t, {1}), ref::var(x.a, {1}), "reduction", DType::kFloat64, "var");
  ExpectClose(logsumexp(x.t, {0}), ref::logsumexp(x.a, {0}), "reduction", DType::kFloat64, "logsumexp");
  // Same query and key lengths: the reference aligns its causal mask top-left, Oar bottom-right (for KV
  // caches); the two agree when the lengths are equal.
  const Input q = Make({2, 5, 4}, 27, DType::kFloat64), k = Make({2, 5, 4}, 28, DType::kFloat64),
              v = Make({2, 5, 4}, 29, DType::kFloat64);
  ExpectClose(scaled_dot_product_attention(q.t, k.t, v.t, true), ref::scaled_dot_product_attention(q.a, k.a, v.a, true),
              "matmul", DType::kFloat64, "causal attention", 5);
  const Tensor ids = cast(FromArray(Array::Make({2, 2}, {1, 0, 2, 1}), DType::kFloat64), DType::kInt64);
  ExpectClose(embedding(x.t, ids), ref::embedding(x.a, Array::Make({2, 2}, {1, 0, 2, 1})), "indexing", DType::kFloat64,
              "embedding");
  ExpectClose(tril(x.t, 1), ref::tril(x.a, 1), "elementwise_exact", DType::kFloat64, "tril");
  ExpectClose(triu(x.t, -1), ref::triu(x.a, -1), "elementwise_exact", DType::kFloat64, "triu");
}

}  // namespace
}  // namespace oar
