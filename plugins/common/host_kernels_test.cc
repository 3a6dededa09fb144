// Host kernels against plain reference loops written here: every registered key, contiguous, broadcast
// (stride 0), permuted and padded inputs, empty tensors, rank 0 and sizes above the threading threshold.
// Kernels are looked up the way the host does: through register_kernel into a registrar keyed by
// (op, dtypes). The ops of the op library have their own files (host_kernels_*_test.cc).
#include "plugins/common/host_kernels.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "plugins/common/host_kernels_testing.h"

namespace {

using namespace oar::host::testing;  // NOLINT: the test vocabulary

// ===================================================================================================
// Registration
// ===================================================================================================

TEST(Registry, RegistersExactlyTheDocumentedKernels) {
  std::set<std::pair<std::string, std::vector<int32_t>>> expected;
  for (const char* op : {"add", "sub", "mul", "maximum", "minimum"}) {
    for (int32_t t : kArith) expected.insert({op, {t, t, t}});
  }
  for (int32_t t : kFloats) {
    expected.insert({"div", {t, t, t}});
    expected.insert({"exp", {t, t}});
    expected.insert({"mean", {t, t}});
    expected.insert({"matmul", {t, t, t}});
  }
  for (int32_t t : {F32, F64, F16, BF16, I8, I32, I64}) expected.insert({"neg", {t, t}});
  for (int32_t t : kArith) expected.insert({"relu", {t, t}});
  for (int32_t t : {F32, F64, F16, BF16, I32, I64}) expected.insert({"sum", {t, t}});
  for (int32_t t : kAll) {
    expected.insert({"copy", {t, t}});
    expected.insert({"fill", {t}});
    for (int32_t u : kAll) expected.insert({"cast", {t, u}});
  }
  EXPECT_EQ(expected.size(), 176u);  // docs/ops.md: the ops before the op library

  // The op library (docs/ops-library-plan.md).
  const std::vector<int32_t> signed_types = {F32, F64, F16, BF16, I8, I32, I64};
  for (int32_t t : signed_types) {
    expected.insert({"abs", {t, t}});
    expected.insert({"sign", {t, t}});
  }
  for (int32_t t : kFloats) {
    for (const char* op :
         {"log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf", "reciprocal", "softmax",
          "log_softmax", "avg_pool2d", "avg_pool2d_grad", "adaptive_avg_pool2d", "adaptive_avg_pool2d_grad"}) {
      expected.insert({op, {t, t}});
    }
    expected.insert({"isnan", {t, BOOL}});
    expected.insert({"isinf", {t, BOOL}});
    for (const char* op : {"pow", "conv2d", "conv2d_grad_input", "conv2d_grad_weight"})
      expected.insert({op, {t, t, t}});
    const int32_t stat = t == F64 ? F64 : F32;
    expected.insert({"layer_norm", {t, t, t, t, stat, stat}});
    expected.insert({"max_pool2d", {t, t, I64}});
  }
  expected.insert({"logical_not", {BOOL, BOOL}});
  expected.insert({"logical_and", {BOOL, BOOL, BOOL}});
  expected.insert({"logical_or", {BOOL, BOOL, BOOL}});
  for (int32_t t : kAll) {
    expected.insert({"eq", {t, t, BOOL}});
    expected.insert({"ne", {t, t, BOOL}});
    expected.insert({"where", {BOOL, t, t, t}});
    expected.insert({"gather", {t, I64, t}});
    expected.insert({"index_select", {t, I64, t}});
    expected.insert({"pad", {t, t}});
    for (int n = 1; n <= 15; ++n) {
      std::vector<int32_t> key(n + 1, t);
      expected.insert({"concat", key});
    }
  }
  for (int32_t t : kArith) {  // numeric: floating, signed and U8
    for (const char* op : {"lt", "le", "gt", "ge"}) expected.insert({op, {t, t, BOOL}});
    expected.insert({"max", {t, t}});
    expected.insert({"min", {t, t}});
    expected.insert({"argmax", {t, I64}});
    expected.insert({"argmin", {t, I64}});
    expected.insert({"scatter_add", {t, I64, t, t}});
    expected.insert({"topk", {t, t, I64}});
  }
  for (int32_t t : {F32, F64, F16, BF16, I32, I64}) expected.insert({"prod", {t, t}});
  // Fused ops (docs/ops.md).
  for (int32_t t : {F32, F64}) expected.insert({"fused_linear", {t, t, t, t}});
  for (int32_t t : {F32, F64}) expected.insert({"fused_rotary", {t, t, t, t}});
  for (int32_t t : {F32, F64}) expected.insert({"fused_rotary_grad", {t, t, t, t}});
  for (int32_t t : {F32, F64}) expected.insert({"fused_rms_scale", {t, t, t, t, t}});
  for (int32_t t : {F32, F64}) expected.insert({"fused_adam", std::vector<int32_t>(16, t)});
  for (int32_t t : kFloats) expected.insert({"relu_grad", {t, t, t}});
  for (int32_t t : {F32, F64}) expected.insert({"fused_tanh_grad", {t, t, t, t}});
  for (int32_t t : {F32, F64}) expected.insert({"fused_sigmoid_grad", {t, t, t, t}});
  for (int32_t t : {F32, F64}) expected.insert({"fused_log_softmax", {t, t, t}});
  for (int32_t t : {F32, F64}) expected.insert({"batch_norm_train", std::vector<int32_t>(6, t)});
  for (int32_t t : {F32, F64}) expected.insert({"batch_norm_train_grad", std::vector<int32_t>(6, t)});
  for (int32_t t : {F32, F64}) expected.insert({"fused_masked_softmax", {t, t, BOOL, t, t}});
  for (int32_t t : {F32, F64}) expected.insert({"fused_masked_softmax_grad", {t, t, BOOL, t, t, t}});

  std::set<std::pair<std::string, std::vector<int32_t>>> got;
  for (const auto& e : Registrar().entries) {
    got.insert({e.op, e.dtypes});
    EXPECT_EQ(e.format, OAR_FORMAT_PLAIN) << e.op << ": host kernels are for plain tensors only";
  }
  // Name the first differences (the set comparison below would print all 596 keys).
  auto describe = [](const std::pair<std::string, std::vector<int32_t>>& key) {
    std::string s = key.first + " {";
    for (int32_t t : key.second) s += " " + std::string(DTypeName(t));
    return s + " }";
  };
  int missing = 0, unexpected = 0;
  for (const auto& key : expected) {
    if (!got.count(key) && missing++ < 5) ADD_FAILURE() << "missing " << describe(key);
  }
  for (const auto& key : got) {
    if (!expected.count(key) && unexpected++ < 5) ADD_FAILURE() << "unexpected " << describe(key);
  }
  EXPECT_TRUE(got == expected);
  EXPECT_EQ(got.size(), 596u);
  EXPECT_EQ(oar::host::HostKernels().size(), 596u);
}

TEST(Registry, FilterSkipsKeysAndDuplicatesAreReported) {
  oar::sdk::Host() = TestHost();
  oar_kernel_registrar_t r;
  oar::host::RegisterHostKernels(&r, [](std::string_view op, std::span<const int32_t> dtypes) {
    return op == "add" && dtypes[0] == OAR_DTYPE_FLOAT32;
  });
  ASSERT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(r.entries.front().op, "add");
  try {
    oar::host::RegisterHostKernels(&r);
    ADD_FAILURE() << "a duplicate key was accepted";
  } catch (const oar::sdk::StatusError& e) {
    EXPECT_EQ(e.code(), OAR_STATUS_ALREADY_EXISTS);
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos) << e.what();
  }
  const int32_t key[] = {F32, F16};
  ASSERT_NE(oar::host::FindHostKernel("cast", key), nullptr);
  EXPECT_EQ(oar::host::FindHostKernel("cast", std::span<const int32_t>(key, 1)), nullptr);
}

// ===================================================================================================
// Elementwise
// ===================================================================================================

template <typename T>
long double RefBinary(const std::string& op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return 0;
  } else if constexpr (std::is_integral_v<T>) {
    const int64_t x = a, y = b;
    int64_t r = 0;
    if (op == "add") r = x + y;
    if (op == "sub") r = x - y;
    if (op == "mul") r = x * y;
    if (op == "maximum") r = std::max(x, y);
    if (op == "minimum") r = std::min(x, y);
    return static_cast<T>(static_cast<uint64_t>(r));  // wraps like the kernel
  } else {
    using C = std::conditional_t<kHalfLike<T>, float, T>;
    const C x = static_cast<C>(a), y = static_cast<C>(b);
    C r = 0;
    if (op == "add") r = x + y;
    if (op == "sub") r = x - y;
    if (op == "mul") r = x * y;
    if (op == "div") r = x / y;
    if (op == "maximum") r = std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y);
    if (op == "minimum") r = std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y);
    if (op == "relu_grad") r = y > C(0) ? x * C(1) : x * C(0);  // x the gradient, y relu's input
    return ToLong(T(r));  // rounded to T once, as the kernel does
  }
}

template <typename T>
long double RefUnary(const std::string& op, T a) {
  if constexpr (std::is_same_v<T, bool>) {
    return 0;
  } else if constexpr (std::is_integral_v<T>) {
    const int64_t x = a;
    const int64_t r = op == "neg" ? -x : std::max<int64_t>(x, 0);
    return static_cast<T>(static_cast<uint64_t>(r));
  } else {
    using C = std::conditional_t<kHalfLike<T>, float, T>;
    const C x = static_cast<C>(a);
    C r = 0;
    if (op == "neg") r = -x;
    if (op == "exp") r = std::exp(x);
    if (op == "relu") r = std::isnan(x) ? x : std::max(x, C(0));
    return ToLong(T(r));
  }
}

/// Run a binary op and compare every output element with RefBinary.
void CheckBinary(const std::string& op, Tensor& a, Tensor& b, const Shape& out_shape) {
  Tensor out = Contiguous(a.dtype, out_shape);
  EXPECT_OK(RunKernel(op, {&a, &b}, {&out}));
  int mismatches = 0;
  oar::sdk::VisitDType(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    ForEachIndex(out_shape, [&](const Shape& idx) {
      const long double want = RefBinary<T>(op, a.At<T>(idx), b.At<T>(idx));
      const long double got = ToLong(out.At<T>(idx));
      if (!SameValue(got, want) && mismatches++ < 5) {
        ADD_FAILURE() << op << " " << DTypeName(a.dtype) << " at linear " << out.Index(idx) << ": got "
                      << static_cast<double>(got) << ", want " << static_cast<double>(want);
      }
    });
  });
}

std::vector<int32_t> BinaryTypes(const std::string& op) { return op == "div" || op == "relu_grad" ? kFloats : kArith; }

class BinaryTest : public ::testing::TestWithParam<const char*> {};

TEST_P(BinaryTest, MatchesReferenceOnEveryLayout) {
  const std::string op = GetParam();
  for (int32_t dt : BinaryTypes(op)) {
    SCOPED_TRACE(op + " " + std::string(DTypeName(dt)));
    std::mt19937 rng(1234);
    const double lo = op == "div" ? 0.5 : -4, hi = 4;  // keep divisors away from 0
    {                                                  // contiguous
      Tensor a = Contiguous(dt, {3, 5}), b = Contiguous(dt, {3, 5});
      FillRandom(a, rng, -4, 4), FillRandom(b, rng, lo, hi);
      CheckBinary(op, a, b, {3, 5});
    }
    {  // a broadcast along dim 1, b a broadcast scalar
      Tensor a = Broadcast(dt, {4, 5, 6}, {false, true, false});
      Tensor b = Broadcast(dt, {4, 5, 6}, {true, true, true});
      FillRandom(a, rng, -4, 4), FillRandom(b, rng, lo, hi);
      CheckBinary(op, a, b, {4, 5, 6});
      CheckBinary(op, b, a, {4, 5, 6});
    }
    {  // a transposed, b padded with an offset
      Tensor a = Permuted(dt, {6, 7}, {1, 0});
      Tensor b = Strided(dt, {6, 7}, {9, 1}, 2);
      FillRandom(a, rng, -4, 4), FillRandom(b, rng, lo, hi);
      CheckBinary(op, a, b, {6, 7});
    }
    {  // empty (NULL data pointers) and rank 0
      Tensor a = Contiguous(dt, {3, 0, 2}), b = Contiguous(dt, {3, 0, 2});
      CheckBinary(op, a, b, {3, 0, 2});
      Tensor s = Contiguous(dt, {}), t = Contiguous(dt, {});
      FillRandom(s, rng, -4, 4), FillRandom(t, rng, lo, hi);
      CheckBinary(op, s, t, {});
    }
    {  // above the threading threshold, odd size, a broadcast row
      Tensor a = Broadcast(dt, {3, 33001}, {true, false});
      Tensor b = Contiguous(dt, {3, 33001});
      FillRandom(a, rng, -4, 4), FillRandom(b, rng, lo, hi);
      CheckBinary(op, a, b, {3, 33001});
      Tensor c = Permuted(dt, {257, 301}, {1, 0});
      Tensor d = Contiguous(dt, {257, 301});
      FillRandom(c, rng, -4, 4), FillRandom(d, rng, lo, hi);
      CheckBinary(op, c, d, {257, 301});
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryTest,
                         ::testing::Values("add", "sub", "mul", "div", "maximum", "minimum", "relu_grad"));

TEST(Binary, IntegerArithmeticWrapsAround) {
  Tensor a = Contiguous(I8, {2}), b = Contiguous(I8, {2}), out = Contiguous(I8, {2});
  a.At<int8_t>({0}) = 100, b.At<int8_t>({0}) = 100;
  a.At<int8_t>({1}) = -128, b.At<int8_t>({1}) = 1;
  EXPECT_OK(RunKernel("add", {&a, &b}, {&out}));
  EXPECT_EQ(out.At<int8_t>({0}), -56);
  EXPECT_OK(RunKernel("sub", {&a, &b}, {&out}));
  EXPECT_EQ(out.At<int8_t>({1}), 127);
  Tensor x = Contiguous(I64, {1}), y = Contiguous(I64, {1}), z = Contiguous(I64, {1});
  x.At<int64_t>({0}) = std::numeric_limits<int64_t>::max(), y.At<int64_t>({0}) = 1;
  EXPECT_OK(RunKernel("add", {&x, &y}, {&z}));
  EXPECT_EQ(z.At<int64_t>({0}), std::numeric_limits<int64_t>::min());
}

TEST(Binary, MaximumAndMinimumPropagateNaN) {
  for (int32_t dt : kFloats) {
    Tensor a = Contiguous(dt, {2}), b = Contiguous(dt, {2}), out = Contiguous(dt, {2});
    Set(a, {0}, NAN), Set(b, {0}, 1), Set(a, {1}, 1), Set(b, {1}, NAN);
    for (const char* op : {"maximum", "minimum"}) {
      EXPECT_OK(RunKernel(op, {&a, &b}, {&out}));
      EXPECT_TRUE(std::isnan(Get(out, {0}))) << op << " " << DTypeName(dt);
      EXPECT_TRUE(std::isnan(Get(out, {1}))) << op << " " << DTypeName(dt);
    }
  }
}

TEST(Binary, RejectsMismatchedShapesNamingOpAndShapes) {
  Tensor a = Contiguous(F32, {2, 3}), b = Contiguous(F32, {3, 2}), out = Contiguous(F32, {2, 3});
  const Result r = RunKernel("add", {&a, &b}, {&out});
  EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("op 'add'"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("[3, 2]"), std::string::npos) << r.message;
  const Result arity = RunKernel("add", {&a}, {&out}, {}, {F32, F32, F32});
  EXPECT_EQ(arity.code, OAR_STATUS_INVALID_ARGUMENT);
}

void CheckUnary(const std::string& op, Tensor& x) {
  Tensor out = Contiguous(x.dtype, x.shape);
  EXPECT_OK(RunKernel(op, {&x}, {&out}));
  int mismatches = 0;
  oar::sdk::VisitDType(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    ForEachIndex(x.shape, [&](const Shape& idx) {
      const long double want = RefUnary<T>(op, x.At<T>(idx));
      const long double got = ToLong(out.At<T>(idx));
      // exp may differ from this libm call by an ulp when vectorised.
      const long double tol = op == "exp" ? std::fabs(want) * (x.dtype == F64 ? 1e-14L : 1e-2L) : 0;
      const bool ok = SameValue(got, want) || std::fabs(got - want) <= tol;
      if (!ok && mismatches++ < 5) {
        ADD_FAILURE() << op << " " << DTypeName(x.dtype) << ": got " << static_cast<double>(got) << ", want "
                      << static_cast<double>(want);
      }
    });
  });
}

TEST(Unary, MatchesReferenceOnEveryLayout) {
  const std::map<std::string, std::vector<int32_t>> ops = {
      {"neg", {F32, F64, F16, BF16, I8, I32, I64}}, {"exp", kFloats}, {"relu", kArith}};
  for (const auto& [op, types] : ops) {
    for (int32_t dt : types) {
      SCOPED_TRACE(op + " " + std::string(DTypeName(dt)));
      std::mt19937 rng(99);
      Tensor a = Contiguous(dt, {4, 9});
      Tensor b = Permuted(dt, {5, 6, 7}, {2, 0, 1});
      Tensor c = Broadcast(dt, {3, 4}, {false, true});
      Tensor d = Contiguous(dt, {0, 5});
      Tensor e = Contiguous(dt, {});
      Tensor f = Strided(dt, {40000}, {2}, 1);
      for (Tensor* t : {&a, &b, &c, &d, &e, &f}) {
        FillRandom(*t, rng);
        CheckUnary(op, *t);
      }
    }
  }
}

TEST(Unary, ReluKeepsNaNAndIntegerNegWraps) {
  Tensor x = Contiguous(F32, {3}), out = Contiguous(F32, {3});
  Set(x, {0}, NAN), Set(x, {1}, -2), Set(x, {2}, 3);
  EXPECT_OK(RunKernel("relu", {&x}, {&out}));
  EXPECT_TRUE(std::isnan(Get(out, {0})));
  EXPECT_EQ(Get(out, {1}), 0);
  EXPECT_EQ(Get(out, {2}), 3);
  Tensor i = Contiguous(I8, {1}), o = Contiguous(I8, {1});
  i.At<int8_t>({0}) = -128;
  EXPECT_OK(RunKernel("neg", {&i}, {&o}));
  EXPECT_EQ(o.At<int8_t>({0}), -128);
}

// ===================================================================================================
// Reductions
// ===================================================================================================

/// Run sum/mean and compare with a long-double reference. `tol` is relative to the sum of |x|.
void CheckReduce(const std::string& op, Tensor& x, const Shape& axes, double tol = -1) {
  Shape out_shape = x.shape;
  for (int64_t a : axes) out_shape[a] = 1;
  Tensor out = Contiguous(x.dtype, out_shape);
  const oar_attr_t attr = oar::sdk::IntsAttr("axes", axes);
  EXPECT_OK(RunKernel(op, {&x}, {&out}, {attr}));
  if (tol < 0) {
    tol = x.dtype == F64 ? 1e-13 : x.dtype == F32 ? 1e-5 : x.dtype == F16 ? 2e-3 : x.dtype == BF16 ? 1.6e-2 : 0;
  }
  std::map<Shape, std::array<long double, 3>> ref;  // sum, sum |x|, count
  ForEachIndex(out_shape, [&](const Shape& idx) { ref[idx] = {0, 0, 0}; });
  ForEachIndex(x.shape, [&](const Shape& idx) {
    Shape o = idx;
    for (int64_t a : axes) o[a] = 0;
    const long double v = Get(x, idx);
    ref[o][0] += v, ref[o][1] += std::fabs(v), ref[o][2] += 1;
  });
  int mismatches = 0;
  for (const auto& [idx, r] : ref) {
    long double want = op == "mean" ? r[0] / r[2] : r[0];
    if (x.dtype == I32) want = static_cast<int32_t>(static_cast<uint64_t>(static_cast<int64_t>(want)));
    const long double got = Get(out, idx);
    const long double scale = op == "mean" ? r[1] / r[2] : r[1];
    const bool ok = SameValue(got, want) || std::fabs(got - want) <= tol * scale;
    if (!ok && mismatches++ < 5) {
      ADD_FAILURE() << op << " " << DTypeName(x.dtype) << " at output " << out.Index(idx) << ": got "
                    << static_cast<double>(got) << ", want " << static_cast<double>(want);
    }
  }
}

std::vector<Shape> AllAxisSets(int rank) {
  std::vector<Shape> sets;
  for (int mask = 0; mask < (1 << rank); ++mask) {
    Shape axes;
    for (int d = 0; d < rank; ++d) {
      if (mask & (1 << d)) axes.push_back(d);
    }
    sets.push_back(axes);
  }
  return sets;
}

TEST(Reduce, EveryAxisSetOnEveryLayout) {
  const std::map<std::string, std::vector<int32_t>> ops = {{"sum", {F32, F64, F16, BF16, I32, I64}}, {"mean", kFloats}};
  for (const auto& [op, types] : ops) {
    for (int32_t dt : types) {
      SCOPED_TRACE(op + " " + std::string(DTypeName(dt)));
      std::mt19937 rng(7);
      Tensor a = Contiguous(dt, {3, 4, 5});
      Tensor b = Permuted(dt, {3, 4, 5}, {2, 0, 1});
      Tensor c = Broadcast(dt, {3, 4, 5}, {false, true, false});
      Tensor d = Strided(dt, {3, 1, 5}, {11, 7, 2}, 3);
      for (Tensor* t : {&a, &b, &c, &d}) {
        FillRandom(*t, rng, -50, 50);
        for (const Shape& axes : AllAxisSets(3)) CheckReduce(op, *t, axes);
      }
      Tensor s = Contiguous(dt, {});
      FillRandom(s, rng);
      CheckReduce(op, s, {});
    }
  }
}

TEST(Reduce, LargeRowsColumnsAndEverything) {
  std::mt19937 rng(11);
  for (int32_t dt : {F32, F64, BF16, I64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor rows = Contiguous(dt, {2, 50000});  // few outputs: split over the reduced axis
    Tensor cols = Contiguous(dt, {50000, 3});  // few outputs, column layout
    Tensor mid = Contiguous(dt, {400, 300});   // many outputs either way
    Tensor trans = Permuted(dt, {64, 2048}, {1, 0});
    for (Tensor* t : {&rows, &cols, &mid, &trans}) FillRandom(*t, rng, -9, 9);
    CheckReduce("sum", rows, {1});
    CheckReduce("sum", cols, {0});
    CheckReduce("sum", mid, {0});
    CheckReduce("sum", mid, {1});
    CheckReduce("sum", mid, {0, 1});
    CheckReduce("sum", trans, {1});
    CheckReduce("sum", trans, {0});
    if (dt != I64) CheckReduce("mean", cols, {0});
  }
}

// A naive float32 loop loses ~1e-3 of these sums; partial sums must keep them near float precision.
TEST(Reduce, Float32SumsStayAccurate) {
  Tensor flat = Contiguous(F32, {1 << 21});
  Tensor same = Broadcast(F32, {1 << 21}, {true});
  Tensor cols = Contiguous(F32, {1 << 16, 4});
  for (Tensor* t : {&flat, &same, &cols}) ForEachIndex(t->shape, [&](const Shape& i) { Set(*t, i, 0.1f); });
  CheckReduce("sum", flat, {0}, 2e-6);
  CheckReduce("sum", same, {0}, 2e-6);
  CheckReduce("sum", cols, {0}, 2e-5);
  CheckReduce("mean", flat, {0}, 2e-6);
}

TEST(Reduce, EmptySetsIntegerWrapAndErrors) {
  for (int32_t dt : kFloats) {
    Tensor x = Contiguous(dt, {3, 0, 2}), s = Contiguous(dt, {3, 1, 2}), m = Contiguous(dt, {3, 1, 2});
    const Shape axes = {1};
    EXPECT_OK(RunKernel("sum", {&x}, {&s}, {oar::sdk::IntsAttr("axes", axes)}));
    EXPECT_OK(RunKernel("mean", {&x}, {&m}, {oar::sdk::IntsAttr("axes", axes)}));
    ForEachIndex(s.shape, [&](const Shape& i) {
      EXPECT_EQ(Get(s, i), 0);
      EXPECT_TRUE(std::isnan(Get(m, i)));
    });
    Tensor e = Contiguous(dt, {3, 0, 2});  // no outputs at all
    CheckReduce("sum", e, {0, 2});
  }
  Tensor big = Contiguous(I32, {3});
  for (int64_t i = 0; i < 3; ++i) big.At<int32_t>({i}) = 2000000000;
  Tensor out = Contiguous(I32, {1});
  const Shape all = {0};
  EXPECT_OK(RunKernel("sum", {&big}, {&out}, {oar::sdk::IntsAttr("axes", all)}));
  EXPECT_EQ(out.At<int32_t>({0}), static_cast<int32_t>(6000000000ll - 4294967296ll));

  Tensor x = Contiguous(F32, {2, 3});
  Tensor o = Contiguous(F32, {2, 1});
  const Shape unsorted = {1, 0}, outside = {2};
  EXPECT_EQ(RunKernel("sum", {&x}, {&o}, {oar::sdk::IntsAttr("axes", unsorted)}).code, OAR_STATUS_INVALID_ARGUMENT);
  const Result r = RunKernel("sum", {&x}, {&o}, {oar::sdk::IntsAttr("axes", outside)});
  EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("op 'sum'"), std::string::npos) << r.message;
  Tensor wrong = Contiguous(F32, {1, 3});  // keeps dim 0 instead of reducing dim 1
  EXPECT_EQ(RunKernel("sum", {&x}, {&wrong}, {oar::sdk::IntsAttr("axes", Shape{1})}).code, OAR_STATUS_INVALID_ARGUMENT);
}

// ===================================================================================================
// Matmul
// ===================================================================================================

/// Run matmul and compare with a long-double reference; `tol` is relative to sum |a||b|.
void CheckMatmul(Tensor& a, Tensor& b) {
  const size_t r = a.shape.size();
  Shape out_shape = a.shape;
  out_shape[r - 1] = b.shape[r - 1];
  Tensor out = Contiguous(a.dtype, out_shape);
  EXPECT_OK(RunKernel("matmul", {&a, &b}, {&out}));
  const double tol = a.dtype == F64 ? 1e-13 : a.dtype == F32 ? 1e-5 : a.dtype == F16 ? 1e-3 : 8e-3;
  const int64_t k = a.shape[r - 1];
  int mismatches = 0;
  ForEachIndex(out_shape, [&](const Shape& idx) {
    Shape ai = idx, bi = idx;
    long double sum = 0, mag = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      ai[r - 1] = kk, bi[r - 2] = kk;
      const long double p = Get(a, ai) * Get(b, bi);
      sum += p, mag += std::fabs(p);
    }
    const long double got = Get(out, idx);
    if (!(std::fabs(got - sum) <= tol * mag) && mismatches++ < 5) {
      ADD_FAILURE() << "matmul " << DTypeName(a.dtype) << " at output " << out.Index(idx) << ": got "
                    << static_cast<double>(got) << ", want " << static_cast<double>(sum);
    }
  });
}

TEST(Matmul, StridesTransposesAndBroadcastBatches) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(5);
    int case_number = 0;
    auto check = [&](Tensor a, Tensor b) {
      SCOPED_TRACE("case " + std::to_string(case_number++));
      FillRandom(a, rng, -2, 2), FillRandom(b, rng, -2, 2);
      CheckMatmul(a, b);
    };
    check(Contiguous(dt, {5, 7}), Contiguous(dt, {7, 3}));
    check(Permuted(dt, {5, 7}, {1, 0}), Contiguous(dt, {7, 3}));             // a transposed
    check(Contiguous(dt, {5, 7}), Permuted(dt, {7, 3}, {1, 0}));             // b transposed
    check(Permuted(dt, {5, 7}, {1, 0}), Permuted(dt, {7, 3}, {1, 0}));       // both
    check(Strided(dt, {5, 7}, {10, 1}, 3), Strided(dt, {7, 3}, {1, 9}, 1));  // padded leading dims
    check(Contiguous(dt, {2, 3, 4, 5}), Contiguous(dt, {2, 3, 5, 6}));       // batched
    check(Contiguous(dt, {2, 3, 4, 5}), Broadcast(dt, {2, 3, 5, 6}, {true, true, false, false}));
    check(Broadcast(dt, {2, 3, 4, 5}, {false, true, false, false}), Contiguous(dt, {2, 3, 5, 6}));
    check(Permuted(dt, {3, 4, 5}, {0, 2, 1}), Broadcast(dt, {3, 5, 6}, {true, false, false}));
    check(Broadcast(dt, {3, 4, 5}, {true, false, false}), Permuted(dt, {3, 5, 6}, {0, 2, 1}));
    check(Permuted(dt, {3, 4, 5}, {1, 2, 0}), Contiguous(dt, {3, 5, 6}));  // batch innermost in memory
    check(Contiguous(dt, {4, 5}), Broadcast(dt, {5, 6}, {true, false}));   // stride-0 rows: packed
    check(Contiguous(dt, {1, 7}), Contiguous(dt, {7, 1}));
    check(Contiguous(dt, {6, 1}), Contiguous(dt, {1, 5}));
    check(Contiguous(dt, {2, 70, 130}), Permuted(dt, {2, 130, 90}, {0, 2, 1}));
    // Empty output, and K = 0 (zeros, overwriting the sentinel).
    check(Contiguous(dt, {0, 4}), Contiguous(dt, {4, 3}));
    check(Contiguous(dt, {3, 0}), Contiguous(dt, {0, 4}));
  }
}

TEST(Matmul, LargeFloat64CrossesBlockEdges) {
  std::mt19937 rng(8);
  Tensor a = Contiguous(F64, {70, 300}), b = Permuted(F64, {300, 600}, {1, 0});
  FillRandom(a, rng), FillRandom(b, rng);
  CheckMatmul(a, b);
  Tensor c = Permuted(F64, {2, 37, 301}, {0, 2, 1}), d = Contiguous(F64, {2, 301, 263});  // ragged tiles
  FillRandom(c, rng), FillRandom(d, rng);
  CheckMatmul(c, d);
}

// Two threads running the same shapes at once (two simulated devices' stream workers under data
// parallelism): each must get its serial result bit for bit. The shared oneDNN primitive's library
// scratchpad made concurrent executions overwrite each other's partial sums on AVX-512 (brgemm) machines.
TEST(Matmul, ConcurrentCallsOfOneShapeEqualSerialOnes) {
  struct Case {
    Tensor a, b, out, want;
  };
  const std::vector<std::pair<Shape, Shape>> shapes = {{{16, 64}, {64, 192}}, {{2, 16, 16}, {2, 16, 64}},
                                                       {{64, 256}, {256, 64}}};
  std::vector<Case> cases;
  std::mt19937 rng(21);
  for (int t = 0; t < 2; ++t) {
    for (const auto& [sa, sb] : shapes) {
      Shape so = sa;
      so.back() = sb.back();
      // A linear layer's weight is read transposed; the batched case is plain.
      Case c{Contiguous(F32, sa), sb.size() == 2 ? Permuted(F32, sb, {1, 0}) : Contiguous(F32, sb),
             Contiguous(F32, so), Contiguous(F32, so)};
      FillRandom(c.a, rng, -2, 2), FillRandom(c.b, rng, -2, 2);
      EXPECT_OK(RunKernel("matmul", {&c.a, &c.b}, {&c.want}));
      cases.push_back(std::move(c));
    }
  }
  std::array<int, 2> wrong{};
  auto work = [&](int t) {
    for (int rep = 0; rep < 200; ++rep) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        Case& c = cases[t * shapes.size() + i];
        if (RunKernel("matmul", {&c.a, &c.b}, {&c.out}).code != OAR_STATUS_OK ||
            c.out.storage != c.want.storage) {
          ++wrong[t];
        }
      }
    }
  };
  std::thread other(work, 1);
  work(0);
  other.join();
  EXPECT_EQ(wrong[0], 0) << "thread 0: products unlike its serial ones";
  EXPECT_EQ(wrong[1], 0) << "thread 1: products unlike its serial ones";
}

TEST(Matmul, RejectsInconsistentShapes) {
  Tensor a = Contiguous(F32, {2, 3}), b = Contiguous(F32, {4, 5}), out = Contiguous(F32, {2, 5});
  const Result r = RunKernel("matmul", {&a, &b}, {&out});
  EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("[2, 3], [4, 5] -> [2, 5]"), std::string::npos) << r.message;
  Tensor v = Contiguous(F32, {3}), w = Contiguous(F32, {3}), s = Contiguous(F32, {});
  EXPECT_EQ(RunKernel("matmul", {&v, &w}, {&s}).code, OAR_STATUS_INVALID_ARGUMENT);
}

// ===================================================================================================
// Cast, fill, copy
// ===================================================================================================

/// The cast rules, written independently of the kernels.
template <typename To>
long double RefConvert(long double v, bool from_floating) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != 0 || std::isnan(v);
  } else if constexpr (std::is_integral_v<To>) {
    if (!from_floating) return static_cast<To>(static_cast<uint64_t>(static_cast<int64_t>(v)));
    if (std::isnan(v)) return 0;
    const long double t = std::trunc(v);
    if (t > static_cast<long double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (t < static_cast<long double>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    return t;
  } else if constexpr (kHalfLike<To>) {
    return static_cast<float>(To(static_cast<float>(v)));
  } else {
    return static_cast<To>(v);
  }
}

long double RefConvertTo(int32_t to, long double v, bool from_floating) {
  long double r = 0;
  oar::sdk::VisitDType(to, [&](auto tag) { r = RefConvert<decltype(tag)>(v, from_floating); });
  return r;
}

/// Values worth casting from `dt`: specials, saturation points, ties.
std::vector<long double> CastSamples(int32_t dt) {
  if (dt == BOOL) return {0, 1};
  const long double inf = std::numeric_limits<long double>::infinity();
  std::vector<long double> v = {0, 1, -1, 2, 127, -128, 255, 256, 300, -300, 65504, 1e6};
  if (oar::sdk::IsFloating(dt)) {
    for (long double x : {-0.0L, 2.7L, -2.7L, 127.5L, -128.7L, 255.9L, -0.5L, 1.00048828125L, 3.1e9L, -3.1e9L, 1e19L,
                          -1e19L, 1e30L, inf, -inf, static_cast<long double>(NAN)}) {
      v.push_back(x);
    }
  } else {
    for (long double x : {2147483647.0L, -2147483648.0L, 9223372036854775807.0L, -9223372036854775808.0L,
                          9007199254740993.0L, 16777217.0L}) {
      v.push_back(x);
    }
  }
  std::vector<long double> stored;  // keep what the dtype can hold (integers wrap; floats round)
  Tensor probe = Contiguous(dt, {1});
  for (long double x : v) {
    if (!oar::sdk::IsFloating(dt)) {
      stored.push_back(RefConvertTo(dt, x, false));
    } else if (dt == F64 || dt == F32) {
      stored.push_back(dt == F32 ? static_cast<float>(x) : static_cast<double>(x));
    } else {
      Set(probe, {0}, x);
      stored.push_back(Get(probe, {0}));
    }
  }
  return stored;
}

TEST(Cast, EveryPairFollowsTheRules) {
  for (int32_t from : kAll) {
    const std::vector<long double> samples = CastSamples(from);
    const int64_t n = static_cast<int64_t>(samples.size());
    for (int32_t to : kAll) {
      SCOPED_TRACE(std::string(DTypeName(from)) + " -> " + std::string(DTypeName(to)));
      Tensor in = Strided(from, {n}, {3}, 1);  // strided input, too
      for (int64_t i = 0; i < n; ++i) Set(in, {i}, samples[i]);
      Tensor out = Contiguous(to, {n});
      EXPECT_OK(RunKernel("cast", {&in}, {&out}));
      for (int64_t i = 0; i < n; ++i) {
        const long double want = RefConvertTo(to, samples[i], oar::sdk::IsFloating(from));
        const long double got = Get(out, {i});
        EXPECT_TRUE(SameValue(got, want)) << "sample " << static_cast<double>(samples[i]) << ": got "
                                          << static_cast<double>(got) << ", want " << static_cast<double>(want);
      }
      Tensor e = Contiguous(from, {0, 3}), eo = Contiguous(to, {0, 3});
      EXPECT_OK(RunKernel("cast", {&e}, {&eo}));
    }
  }
}

TEST(Cast, SpotChecksOfTheRules) {
  Tensor f = Contiguous(F32, {6}), i = Contiguous(I32, {6});
  const float values[] = {2.7f, -2.7f, NAN, 1e10f, -1e10f, 2147483520.0f};
  for (int k = 0; k < 6; ++k) f.At<float>({k}) = values[k];
  EXPECT_OK(RunKernel("cast", {&f}, {&i}));
  const int32_t want[] = {2, -2, 0, INT32_MAX, INT32_MIN, 2147483520};
  for (int k = 0; k < 6; ++k) EXPECT_EQ(i.At<int32_t>({k}), want[k]) << k;

  Tensor h = Contiguous(F16, {6});
  const float ties[] = {1.00048828125f, 1.00146484375f, 65520.0f, NAN, 1.0f, -0.0f};
  for (int k = 0; k < 6; ++k) f.At<float>({k}) = ties[k];
  EXPECT_OK(RunKernel("cast", {&f}, {&h}));
  EXPECT_EQ(h.At<Half>({0}).bits, 0x3c00);  // 1 + 2^-11 ties to even: 1.0
  EXPECT_EQ(h.At<Half>({1}).bits, 0x3c02);  // 1 + 3 * 2^-11 ties to even: 1 + 2^-9
  EXPECT_EQ(h.At<Half>({2}).bits, 0x7c00);  // overflows to inf

  Tensor b = Contiguous(BOOL, {6});
  EXPECT_OK(RunKernel("cast", {&f}, {&b}));
  EXPECT_EQ(b.At<uint8_t>({3}), 1);  // NaN -> true
  EXPECT_EQ(b.At<uint8_t>({5}), 0);  // -0 -> false

  Tensor w = Contiguous(I64, {2}), u = Contiguous(U8, {2});
  w.At<int64_t>({0}) = 300, w.At<int64_t>({1}) = -1;
  EXPECT_OK(RunKernel("cast", {&w}, {&u}));
  EXPECT_EQ(u.At<uint8_t>({0}), 44);
  EXPECT_EQ(u.At<uint8_t>({1}), 255);
}

TEST(Cast, LargePermutedInputs) {
  std::mt19937 rng(3);
  for (auto [from, to] : {std::pair{F32, F16}, std::pair{I32, F32}, std::pair{BF16, F64}, std::pair{F64, I8}}) {
    Tensor in = Permuted(from, {211, 307}, {1, 0}), out = Contiguous(to, {211, 307});
    FillRandom(in, rng, -100, 100);
    EXPECT_OK(RunKernel("cast", {&in}, {&out}));
    int bad = 0;
    ForEachIndex(in.shape, [&](const Shape& i) {
      bad += !SameValue(Get(out, i), RefConvertTo(to, Get(in, i), oar::sdk::IsFloating(from)));
    });
    EXPECT_EQ(bad, 0) << DTypeName(from) << " -> " << DTypeName(to);
  }
}

TEST(Fill, EveryDTypeFromIntOrFloat) {
  for (int32_t dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor out = Contiguous(dt, {3, 4});
    EXPECT_OK(RunKernel("fill", {}, {&out}, {oar::sdk::FloatAttr("value", 2.5)}));
    ForEachIndex(out.shape, [&](const Shape& i) { EXPECT_EQ(Get(out, i), RefConvertTo(dt, 2.5, true)); });
    EXPECT_OK(RunKernel("fill", {}, {&out}, {oar::sdk::IntAttr("value", -3)}));
    ForEachIndex(out.shape, [&](const Shape& i) { EXPECT_EQ(Get(out, i), RefConvertTo(dt, -3, false)); });
    Tensor scalar = Contiguous(dt, {}), empty = Contiguous(dt, {2, 0});
    EXPECT_OK(RunKernel("fill", {}, {&scalar}, {oar::sdk::IntAttr("value", 1)}));
    EXPECT_EQ(Get(scalar, {}), 1);
    EXPECT_OK(RunKernel("fill", {}, {&empty}, {oar::sdk::IntAttr("value", 1)}));
  }
  Tensor big = Contiguous(F32, {100003});
  EXPECT_OK(RunKernel("fill", {}, {&big}, {oar::sdk::FloatAttr("value", NAN)}));
  int not_nan = 0;
  ForEachIndex(big.shape, [&](const Shape& i) { not_nan += !std::isnan(Get(big, i)); });
  EXPECT_EQ(not_nan, 0);
  Tensor ints = Contiguous(I32, {2});
  EXPECT_OK(RunKernel("fill", {}, {&ints}, {oar::sdk::FloatAttr("value", 1e20)}));
  EXPECT_EQ(ints.At<int32_t>({1}), INT32_MAX);
  EXPECT_EQ(RunKernel("fill", {}, {&ints}).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(RunKernel("fill", {}, {&ints}, {oar::sdk::StringAttr("value", "1")}).code, OAR_STATUS_INVALID_ARGUMENT);
}

/// Copy `in` into `out` and compare the bytes of every element; storage outside `out`'s elements must
/// keep the sentinel.
void CheckCopy(Tensor& in, Tensor& out) {
  std::vector<bool> is_element(out.storage.size() * 8 / out.esize(), false);
  ForEachIndex(out.shape, [&](const Shape& i) { is_element[out.Index(i)] = true; });
  EXPECT_OK(RunKernel("copy", {&in}, {&out}));
  int bad = 0;
  ForEachIndex(in.shape, [&](const Shape& i) { bad += std::memcmp(in.Bytes(i), out.Bytes(i), in.esize()) != 0; });
  EXPECT_EQ(bad, 0) << DTypeName(in.dtype);
  for (size_t e = 0; e < is_element.size(); ++e) {
    if (is_element[e]) continue;
    for (size_t byte = 0; byte < out.esize(); ++byte) {
      ASSERT_EQ(static_cast<uint8_t>(out.base()[e * out.esize() + byte]), 0xcd) << "wrote outside the view";
    }
  }
}

TEST(Copy, EveryDTypeAnyStridesBothSides) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> byte(0, 255);
  auto randomize = [&](Tensor& t) {
    ForEachIndex(t.shape, [&](const Shape& i) {
      for (size_t b = 0; b < t.esize(); ++b) t.Bytes(i)[b] = static_cast<char>(byte(rng));
    });
  };
  for (int32_t dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    std::vector<std::pair<Tensor, Tensor>> cases;
    cases.emplace_back(Contiguous(dt, {37, 1001}), Contiguous(dt, {37, 1001}));         // memcpy, parallel
    cases.emplace_back(Permuted(dt, {5, 6, 7}, {2, 0, 1}), Contiguous(dt, {5, 6, 7}));  // gather
    cases.emplace_back(Contiguous(dt, {4, 5}), Strided(dt, {4, 5}, {12, 2}, 1));        // into a view
    cases.emplace_back(Permuted(dt, {300, 200}, {1, 0}), Strided(dt, {300, 200}, {401, 2}, 5));
    cases.emplace_back(Broadcast(dt, {6, 7}, {true, false}), Contiguous(dt, {6, 7}));  // stride 0 in
    cases.emplace_back(Contiguous(dt, {}), Contiguous(dt, {}));
    cases.emplace_back(Contiguous(dt, {3, 0}), Strided(dt, {3, 0}, {5, 1}));
    for (auto& [in, out] : cases) {
      randomize(in);
      CheckCopy(in, out);
    }
  }
}

}  // namespace
