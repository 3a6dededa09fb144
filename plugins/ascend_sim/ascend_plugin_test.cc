// ascend_sim through the ABI only (dlopen): private storage formats (NC1HWC0, FRACTAL_NZ) declared
// through oar_format_api_t, format_cast round trips for odd channel counts and shapes that are not
// multiples of 16, kernels that consume the private formats, and no float64.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "plugins/common/sim/sim_test_util.h"

namespace oar::simtest {
namespace {

using sdk::BFloat16;
using sdk::Half;

const bool kEnvironment = [] {
  setenv("OAR_SIM_JITTER", "7", 0);
  unsetenv("OAR_SIM_FAULTS");
  unsetenv("OAR_ASCEND_SIM_MEMORY");
  unsetenv("OAR_ASCEND_SIM_DEVICES");
  unsetenv("OAR_ASCEND_SIM_PRECISION");
  return true;
}();

constexpr int32_t F32 = OAR_DTYPE_FLOAT32, F64 = OAR_DTYPE_FLOAT64, F16 = OAR_DTYPE_FLOAT16, BF16 = OAR_DTYPE_BFLOAT16,
                  I8 = OAR_DTYPE_INT8, I64 = OAR_DTYPE_INT64, BOOL = OAR_DTYPE_BOOL;
constexpr int32_t PLAIN = OAR_FORMAT_PLAIN, NC1HWC0 = OAR_FORMAT_NC1HWC0, NZ = OAR_FORMAT_FRACTAL_NZ;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The layouts as docs/simulators.md states them, written independently of the plugin.
int64_t ExpectedIndex(int32_t format, const std::vector<int64_t>& shape, const std::vector<int64_t>& idx) {
  const size_t r = shape.size();
  if (format == NC1HWC0) {
    const int64_t c1 = CeilDiv(shape[1], 16);
    return ((((idx[0] * c1) + idx[1] / 16) * shape[2] + idx[2]) * shape[3] + idx[3]) * 16 + idx[1] % 16;
  }
  int64_t batch = 0;
  for (size_t d = 0; d + 2 < r; ++d) batch = batch * shape[d] + idx[d];
  const int64_t m1 = CeilDiv(shape[r - 2], 16), n1 = CeilDiv(shape[r - 1], 16);
  const int64_t m = idx[r - 2], n = idx[r - 1];
  return batch * n1 * m1 * 256 + (n / 16) * m1 * 256 + (m / 16) * 256 + (m % 16) * 16 + n % 16;
}

void ForEachIndex(const std::vector<int64_t>& shape,
                  const std::function<void(const std::vector<int64_t>&, int64_t)>& fn) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t linear = 0; linear < n; ++linear) {
    fn(idx, linear);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

class Ascend : public ::testing::Test {
 public:  // RoundTrip below drives the fixture's helpers
  static const Plugin& P() {
    static const Plugin p = Load(OAR_ASCEND_PLUGIN);
    return p;
  }
  static oar_stream_t S() {
    static oar_stream_t s = [] {
      oar_stream_t st = nullptr;
      EXPECT_TRUE(Take(P().dev()->stream_create(1, &st)).ok());
      return st;
    }();
    return s;
  }
  void SetUp() override {
    ASSERT_TRUE(kEnvironment);
    ASSERT_EQ(P().error, "");
  }
  void TearDown() override {
    for (void* p : allocations_) OAR_EXPECT_OK(P().dev()->free(1, p));
  }
  const oar_format_api_t* F() const { return P().api->format; }
  size_t StorageBytes(int32_t format, int32_t dtype, const std::vector<int64_t>& shape) {
    size_t bytes = 0;
    const Result r =
        Take(F()->storage_bytes(1, format, dtype, static_cast<int32_t>(shape.size()), shape.data(), &bytes));
    EXPECT_TRUE(r.ok()) << r.message;
    return bytes;
  }
  void* Alloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_TRUE(Take(P().dev()->malloc(1, std::max<size_t>(bytes, 1), &p)).ok());
    allocations_.push_back(p);
    return p;
  }
  void* Upload(const std::vector<char>& bytes) {
    void* p = Alloc(bytes.size());
    if (!bytes.empty()) OAR_EXPECT_OK(P().dev()->memcpy_h2d(1, p, bytes.data(), bytes.size()));
    return p;
  }
  std::vector<char> Download(const void* p, size_t bytes) {
    std::vector<char> v(bytes);
    if (bytes > 0) OAR_EXPECT_OK(P().dev()->memcpy_d2h(1, v.data(), p, bytes));
    return v;
  }
  Result Run(const char* op, const std::vector<int32_t>& key, int32_t format, const std::vector<const Desc*>& in,
             const std::vector<const Desc*>& out, std::vector<oar_attr_t> attrs = {}) {
    const auto k = P().Find(op, key, format);
    if (k.fn == nullptr) return {OAR_STATUS_NOT_FOUND, std::string("no kernel for ") + op};
    Call call(op, 1, S(), in, out, std::move(attrs), k.kernel_data);
    Result r = Take(k.fn(&call.c));
    if (!r.ok()) return r;
    return Take(P().dev()->stream_synchronize(1, S()));
  }

 private:
  std::vector<void*> allocations_;
};

TEST_F(Ascend, NoFloat64AndThirtyTwoByteAlignment) {
  for (const auto& e : P().kernels.entries) EXPECT_EQ(std::count(e.dtypes.begin(), e.dtypes.end(), F64), 0) << e.op;
  EXPECT_EQ(FindDeviceAttr(P(), 0, OAR_DEVICE_ATTR_ALIGNMENT)->v.i, 32);
  const oar_attr_t* mode = FindDeviceAttr(P(), 0, "precision_mode");
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(std::string(mode->v.s.data, mode->v.s.size), "exact");
  for (int32_t t : {F32, F16, BF16, I8, I64, BOOL}) {
    for (int32_t f : {PLAIN, NC1HWC0, NZ}) EXPECT_NE(P().Find("format_cast", {t, t}, f).fn, nullptr) << t << " " << f;
  }
  EXPECT_EQ(P().Find("format_cast", {F64, F64}, PLAIN).fn, nullptr);
  EXPECT_NE(P().Find("matmul", {F16, F16, F16}, NZ).fn, nullptr);
  EXPECT_NE(P().Find("add", {F32, F32, F32}, NC1HWC0).fn, nullptr);
}

TEST_F(Ascend, FormatApiSizesAndPreferences) {
  ASSERT_NE(F(), nullptr);
  EXPECT_EQ(StorageBytes(PLAIN, F32, {2, 17, 3, 5}), 2u * 17 * 3 * 5 * 4);
  EXPECT_EQ(StorageBytes(NC1HWC0, F16, {2, 17, 3, 5}), 2u * 2 * 3 * 5 * 16 * 2);
  EXPECT_EQ(StorageBytes(NC1HWC0, F32, {1, 16, 1, 1}), 16u * 4);
  EXPECT_EQ(StorageBytes(NZ, F16, {3, 20, 33}), 3u * 2 * 3 * 256 * 2);
  EXPECT_EQ(StorageBytes(NZ, I8, {1, 1}), 256u);
  size_t bytes = 0;
  const int64_t s3[] = {2, 3, 4};
  EXPECT_EQ(Take(F()->storage_bytes(1, NC1HWC0, F32, 3, s3, &bytes)).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Take(F()->storage_bytes(1, NZ, F32, 1, s3, &bytes)).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Take(F()->storage_bytes(1, 7, F32, 3, s3, &bytes)).code, OAR_STATUS_UNIMPLEMENTED);
  EXPECT_EQ(Take(F()->storage_bytes(5, PLAIN, F32, 3, s3, &bytes)).code, OAR_STATUS_INVALID_ARGUMENT);

  auto preferred = [&](const char* op, int32_t input, int32_t dtype, std::vector<int64_t> shape) {
    int32_t f = -1;
    EXPECT_TRUE(
        Take(F()->preferred_format(0, op, input, dtype, static_cast<int32_t>(shape.size()), shape.data(), &f)).ok());
    return f;
  };
  EXPECT_EQ(preferred("matmul", 0, F16, {64, 32}), NZ);
  EXPECT_EQ(preferred("matmul", 1, BF16, {8, 64, 32}), NZ);
  EXPECT_EQ(preferred("matmul", 0, F32, {64, 32}), PLAIN);
  EXPECT_EQ(preferred("relu", 0, F32, {2, 3, 8, 8}), NC1HWC0);
  EXPECT_EQ(preferred("add", 1, F16, {2, 3, 8, 8}), NC1HWC0);
  EXPECT_EQ(preferred("add", 0, F16, {3, 8, 8}), PLAIN);
  EXPECT_EQ(preferred("sum", 0, F32, {2, 3, 8, 8}), PLAIN);
}

/// PLAIN (optionally strided) -> private -> PLAIN for one dtype, shape and format; checks the
/// physical layout element by element and the zero padding.
void RoundTrip(Ascend* t, int32_t format, int32_t dtype, const std::vector<int64_t>& shape, bool transposed_input,
               std::string* failures) {
  const size_t es = sdk::DTypeSize(dtype);
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  std::vector<char> plain(static_cast<size_t>(n) * es);
  for (int64_t i = 0; i < n; ++i) {  // distinct, nonzero bytes per element (bool: 1)
    for (size_t b = 0; b < es; ++b)
      plain[i * es + b] = static_cast<char>(dtype == BOOL ? 1 : (i * 7 + static_cast<int64_t>(b) * 3) % 251 + 1);
  }
  // The input: either the logical tensor as it is, or a strided view whose last two dims are swapped.
  std::vector<int64_t> strides(shape.size());
  std::vector<char> storage = plain;
  if (transposed_input) {
    std::vector<int64_t> st_shape = shape;
    std::swap(st_shape[shape.size() - 1], st_shape[shape.size() - 2]);
    int64_t e = 1;
    std::vector<int64_t> st_strides(shape.size());
    for (size_t i = shape.size(); i-- > 0;) {
      st_strides[i] = e;
      e *= st_shape[i];
    }
    strides = st_strides;
    std::swap(strides[shape.size() - 1], strides[shape.size() - 2]);
    ForEachIndex(shape, [&](const std::vector<int64_t>& idx, int64_t linear) {
      int64_t off = 0;
      for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
      std::memcpy(storage.data() + off * es, plain.data() + linear * es, es);
    });
  } else {
    int64_t e = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      strides[i] = e;
      e *= shape[i];
    }
  }
  void* src = t->Upload(storage);
  const size_t bytes = t->StorageBytes(format, dtype, shape);
  void* packed = t->Alloc(bytes);
  OAR_EXPECT_OK(t->P().dev()->memset(1, packed, 0xAB, bytes));  // padding must come out zero
  void* back = t->Alloc(plain.size());
  Desc in(src, dtype, shape, strides), priv(packed, dtype, shape, {}, format), out(back, dtype, shape);
  const std::string where = "format " + std::to_string(format) + " dtype " + std::to_string(dtype) + " shape [" +
                            std::to_string(shape[0]) + ",...," + std::to_string(shape.back()) + "]" +
                            (transposed_input ? " transposed" : "");
  Result r = t->Run("format_cast", {dtype, dtype}, PLAIN, {&in}, {&priv}, {IntAttr("dst_format", format)});
  if (!r.ok()) {
    *failures += where + ": to private: " + r.message + "\n";
    return;
  }
  const std::vector<char> physical = t->Download(packed, bytes);
  std::vector<bool> used(bytes / es, false);
  ForEachIndex(shape, [&](const std::vector<int64_t>& idx, int64_t linear) {
    const int64_t p = ExpectedIndex(format, shape, idx);
    used[static_cast<size_t>(p)] = true;
    if (std::memcmp(physical.data() + p * es, plain.data() + linear * es, es) != 0 && failures->size() < 2000) {
      *failures +=
          where + ": element " + std::to_string(linear) + " is not at physical index " + std::to_string(p) + "\n";
    }
  });
  for (size_t p = 0; p < used.size(); ++p) {
    if (used[p]) continue;
    for (size_t b = 0; b < es; ++b) {
      if (physical[p * es + b] != 0 && failures->size() < 2000) *failures += where + ": padding not zero\n";
    }
  }
  r = t->Run("format_cast", {dtype, dtype}, format, {&priv}, {&out});
  if (!r.ok()) {
    *failures += where + ": back to PLAIN: " + r.message + "\n";
    return;
  }
  if (t->Download(back, plain.size()) != plain) *failures += where + ": round trip changed the data\n";
}

TEST_F(Ascend, Nc1hwc0RoundTripsOddChannelCounts) {
  std::string failures;
  for (int32_t dtype : {F32, F16, BF16, I8, I64, BOOL}) {
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
             {2, 17, 3, 5}, {1, 1, 1, 1}, {3, 33, 2, 2}, {2, 16, 4, 4}, {1, 3, 7, 9}, {2, 0, 3, 3}}) {
      for (bool transposed : {false, true}) RoundTrip(this, NC1HWC0, dtype, shape, transposed, &failures);
    }
  }
  EXPECT_EQ(failures, "");
}

TEST_F(Ascend, FractalNzRoundTripsShapesThatAreNotMultiplesOf16) {
  std::string failures;
  for (int32_t dtype : {F32, F16, BF16, I8, I64}) {
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{17, 33}, {16, 16}, {1, 16}, {31, 1}, {2, 5, 40}, {2, 3, 18, 7}, {64, 48}}) {
      for (bool transposed : {false, true}) RoundTrip(this, NZ, dtype, shape, transposed, &failures);
    }
  }
  EXPECT_EQ(failures, "");
}

TEST_F(Ascend, FormatCastRefusesMismatchedDescriptors) {
  void* a = Alloc(4096);
  Desc plain(a, F32, {2, 3, 4}), priv(a, F32, {2, 3, 4}, {}, NC1HWC0);
  const Result r = Run("format_cast", {F32, F32}, PLAIN, {&plain}, {&priv}, {IntAttr("dst_format", NC1HWC0)});
  EXPECT_EQ(r.code, OAR_STATUS_UNIMPLEMENTED);
  EXPECT_NE(r.message.find("NC1HWC0 holds 4-D"), std::string::npos) << r.message;
  Desc p4(a, F32, {1, 2, 3, 4}), nz(a, F32, {1, 2, 3, 4}, {}, NZ);
  EXPECT_EQ(Run("format_cast", {F32, F32}, PLAIN, {&p4}, {&nz}).code, OAR_STATUS_UNIMPLEMENTED);  // no dst_format
  const auto k = P().Find("format_cast", {F32, F32}, PLAIN);
  Call query("format_cast", 1, nullptr, {&p4}, {&nz}, {IntAttr("dst_format", NZ)}, k.kernel_data);
  EXPECT_TRUE(Take(P().api->kernel->supports(&query.c)).ok());
}

TEST_F(Ascend, ElementwiseKernelsWorkOnPrivateFormats) {
  const std::vector<int64_t> shape = {2, 19, 3, 5};
  const int64_t n = 2 * 19 * 3 * 5;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 13) - 6;
    b[i] = static_cast<float>(i % 5) * 0.5f;
  }
  auto bytes_of = [](const std::vector<float>& v) {
    return std::vector<char>(reinterpret_cast<const char*>(v.data()),
                             reinterpret_cast<const char*>(v.data() + v.size()));
  };
  void* da = Upload(bytes_of(a));
  void* db = Upload(bytes_of(b));
  const size_t pbytes = StorageBytes(NC1HWC0, F32, shape);
  void* pa = Alloc(pbytes);
  void* pb = Alloc(pbytes);
  void* pc = Alloc(pbytes);
  void* out = Alloc(n * 4);
  Desc ia(da, F32, shape), ib(db, F32, shape), qa(pa, F32, shape, {}, NC1HWC0), qb(pb, F32, shape, {}, NC1HWC0),
      qc(pc, F32, shape, {}, NC1HWC0), o(out, F32, shape);
  ASSERT_TRUE(Run("format_cast", {F32, F32}, PLAIN, {&ia}, {&qa}, {IntAttr("dst_format", NC1HWC0)}).ok());
  ASSERT_TRUE(Run("format_cast", {F32, F32}, PLAIN, {&ib}, {&qb}, {IntAttr("dst_format", NC1HWC0)}).ok());
  ASSERT_TRUE(Run("mul", {F32, F32, F32}, NC1HWC0, {&qa, &qb}, {&qc}).ok());
  ASSERT_TRUE(Run("relu", {F32, F32}, NC1HWC0, {&qc}, {&qa}).ok());
  ASSERT_TRUE(Run("format_cast", {F32, F32}, NC1HWC0, {&qa}, {&o}).ok());
  const std::vector<char> raw = Download(out, n * 4);
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, raw.data() + i * 4, 4);
    ASSERT_EQ(v, std::max(a[i] * b[i], 0.0f)) << i;
  }
  // Mixed formats are declined (there is no such kernel key, and supports says why).
  const auto k = P().Find("add", {F32, F32, F32}, NC1HWC0);
  Call mixed("add", 1, nullptr, {&qa, &ia}, {&qc}, {}, k.kernel_data);
  EXPECT_EQ(Take(P().api->kernel->supports(&mixed.c)).code, OAR_STATUS_UNIMPLEMENTED);
}

TEST_F(Ascend, CubeMatmulOnFractalNzOperandsMatchesPlainMatmul) {
  const int64_t batch = 2, m = 19, k = 37, n = 21;
  std::vector<Half> a(batch * m * k), b(batch * k * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = Half(std::cos(static_cast<float>(i)) * 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = Half(std::sin(static_cast<float>(i) * 0.7f));
  auto bytes_of = [](const std::vector<Half>& v) {
    return std::vector<char>(reinterpret_cast<const char*>(v.data()),
                             reinterpret_cast<const char*>(v.data() + v.size()));
  };
  void* da = Upload(bytes_of(a));
  void* db = Upload(bytes_of(b));
  void* za = Alloc(StorageBytes(NZ, F16, {batch, m, k}));
  void* zb = Alloc(StorageBytes(NZ, F16, {batch, k, n}));
  void* c_plain = Alloc(batch * m * n * 2);
  void* c_nz = Alloc(batch * m * n * 2);
  Desc pa(da, F16, {batch, m, k}), pb(db, F16, {batch, k, n}), qa(za, F16, {batch, m, k}, {}, NZ),
      qb(zb, F16, {batch, k, n}, {}, NZ), oc(c_plain, F16, {batch, m, n}), onz(c_nz, F16, {batch, m, n});
  ASSERT_TRUE(Run("format_cast", {F16, F16}, PLAIN, {&pa}, {&qa}, {IntAttr("dst_format", NZ)}).ok());
  ASSERT_TRUE(Run("format_cast", {F16, F16}, PLAIN, {&pb}, {&qb}, {IntAttr("dst_format", NZ)}).ok());
  ASSERT_TRUE(Run("matmul", {F16, F16, F16}, PLAIN, {&pa, &pb}, {&oc}).ok());
  const Result r = Run("matmul", {F16, F16, F16}, NZ, {&qa, &qb}, {&onz});
  ASSERT_TRUE(r.ok()) << r.message;
  const std::vector<char> x = Download(c_plain, batch * m * n * 2), y = Download(c_nz, batch * m * n * 2);
  for (int64_t i = 0; i < batch * m * n; ++i) {
    Half hx, hy;
    std::memcpy(&hx, x.data() + i * 2, 2);
    std::memcpy(&hy, y.data() + i * 2, 2);
    double ref = 0;  // float32 accumulation of fp16 products, rounded once: within one fp16 ulp
    const int64_t bi = i / (m * n), row = (i / n) % m, col = i % n;
    for (int64_t kk = 0; kk < k; ++kk) {
      ref += static_cast<double>(static_cast<float>(a[(bi * m + row) * k + kk])) *
             static_cast<double>(static_cast<float>(b[(bi * k + kk) * n + col]));
    }
    const double tol = std::max(std::abs(ref), 1.0) * 2e-3;
    ASSERT_NEAR(static_cast<float>(hy), ref, tol) << i;
    ASSERT_NEAR(static_cast<float>(hx), static_cast<float>(hy), tol) << i;
  }
}

}  // namespace
}  // namespace oar::simtest
