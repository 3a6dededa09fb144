// kunlun_sim through the ABI only (dlopen): its honest, partial op x dtype matrix, and kernels that
// run tiled through a core's local memory (results equal to the host arithmetic; reductions larger than
// local memory combine partial results over several passes), timed in waves over the cluster cores.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "plugins/common/sim/sim_test_util.h"

namespace oar::simtest {
namespace {

using sdk::BFloat16;
using sdk::Half;

const bool kEnvironment = [] {
  setenv("OAR_SIM_JITTER", "99", 0);
  unsetenv("OAR_SIM_FAULTS");
  unsetenv("OAR_KUNLUN_SIM_MEMORY");
  unsetenv("OAR_KUNLUN_SIM_DEVICES");
  return true;
}();

constexpr int32_t F32 = OAR_DTYPE_FLOAT32, F64 = OAR_DTYPE_FLOAT64, F16 = OAR_DTYPE_FLOAT16, BF16 = OAR_DTYPE_BFLOAT16,
                  I32 = OAR_DTYPE_INT32, I64 = OAR_DTYPE_INT64, BOOL = OAR_DTYPE_BOOL;

class Kunlun : public ::testing::Test {
 protected:
  static const Plugin& P() {
    static const Plugin p = Load(OAR_KUNLUN_PLUGIN);
    return p;
  }
  static oar_stream_t S() {
    static oar_stream_t s = [] {
      oar_stream_t st = nullptr;
      EXPECT_TRUE(Take(P().dev()->stream_create(0, &st)).ok());
      return st;
    }();
    return s;
  }
  void SetUp() override {
    ASSERT_TRUE(kEnvironment);
    ASSERT_EQ(P().error, "");
  }
  void TearDown() override {
    for (void* p : allocations_) OAR_EXPECT_OK(P().dev()->free(0, p));
  }
  template <typename T>
  void* Upload(const std::vector<T>& v, size_t extra = 0) {
    void* p = nullptr;
    EXPECT_TRUE(Take(P().dev()->malloc(0, v.size() * sizeof(T) + extra, &p)).ok());
    allocations_.push_back(p);
    if (!v.empty()) OAR_EXPECT_OK(P().dev()->memcpy_h2d(0, p, v.data(), v.size() * sizeof(T)));
    return p;
  }
  void* Alloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_TRUE(Take(P().dev()->malloc(0, std::max<size_t>(bytes, 1), &p)).ok());
    allocations_.push_back(p);
    return p;
  }
  template <typename T>
  std::vector<T> Download(const void* p, size_t n) {
    std::vector<T> v(n);
    if (n > 0) OAR_EXPECT_OK(P().dev()->memcpy_d2h(0, v.data(), p, n * sizeof(T)));
    return v;
  }
  /// Launch `op` with key `key`; waits for it and returns the first error.
  Result Run(const char* op, const std::vector<int32_t>& key, const std::vector<const Desc*>& in,
             const std::vector<const Desc*>& out, std::vector<oar_attr_t> attrs = {}) {
    const auto k = P().Find(op, key);
    if (k.fn == nullptr) return {OAR_STATUS_NOT_FOUND, std::string("no kernel for ") + op};
    Call call(op, 0, S(), in, out, std::move(attrs), k.kernel_data);
    Result r = Take(k.fn(&call.c));
    if (!r.ok()) return r;
    return Take(P().dev()->stream_synchronize(0, S()));
  }

 private:
  std::vector<void*> allocations_;
};

const std::set<std::string> kIndexing = {"gather", "index_select", "scatter_add", "topk",
                                         "argmax", "argmin",       "max_pool2d"};

TEST_F(Kunlun, DeclaresOnlyTheSupportedOpDtypeMatrix) {
  std::set<std::string> ops;
  for (const auto& e : P().kernels.entries) {
    ops.insert(e.op);
    EXPECT_EQ(std::count(e.dtypes.begin(), e.dtypes.end(), F64), 0) << e.op;
    if (std::count(e.dtypes.begin(), e.dtypes.end(), I64) > 0) {
      EXPECT_TRUE(e.op == "copy" || e.op == "cast" || e.op == "fill" || kIndexing.count(e.op) > 0) << e.op;
    }
    EXPECT_EQ(e.format, OAR_FORMAT_PLAIN) << e.op;
  }
  for (const char* op : {"add", "matmul", "sum", "mean", "cast", "copy", "fill", "exp"})
    EXPECT_EQ(ops.count(op), 1u) << op;
  EXPECT_NE(P().Find("add", {F32, F32, F32}).fn, nullptr);
  EXPECT_NE(P().Find("sum", {I32, I32}).fn, nullptr);
  EXPECT_NE(P().Find("matmul", {F16, F16, F16}).fn, nullptr);
  EXPECT_NE(P().Find("cast", {I64, F32}).fn, nullptr);
  EXPECT_NE(P().Find("fill", {I64}).fn, nullptr);
  EXPECT_NE(P().Find("copy", {I64, I64}).fn, nullptr);
  if (ops.count("gather")) {
    EXPECT_NE(P().Find("gather", {F32, I64, F32}).fn, nullptr);  // int64 indices: yes
    EXPECT_EQ(P().Find("gather", {I64, I64, I64}).fn, nullptr);  // int64 data: no
  }
  EXPECT_EQ(P().Find("sum", {I64, I64}).fn, nullptr);
  EXPECT_EQ(P().Find("add", {I64, I64, I64}).fn, nullptr);
  EXPECT_EQ(P().Find("add", {F64, F64, F64}).fn, nullptr);
  EXPECT_EQ(P().Find("matmul", {F64, F64, F64}).fn, nullptr);
  EXPECT_EQ(P().Find("cast", {F32, F64}).fn, nullptr);

  // supports() agrees with the registration: a matching query is accepted, a float64 one is not.
  const auto add = P().Find("add", {F32, F32, F32});
  Desc a(nullptr, F32, {4}), d(nullptr, F64, {4});
  Call ok("add", 0, nullptr, {&a, &a}, {&a}, {}, add.kernel_data);
  EXPECT_TRUE(Take(P().api->kernel->supports(&ok.c)).ok());
  Call bad("add", 0, nullptr, {&d, &d}, {&d}, {}, add.kernel_data);
  const Result r = Take(P().api->kernel->supports(&bad.c));
  EXPECT_EQ(r.code, OAR_STATUS_UNIMPLEMENTED);
  EXPECT_NE(r.message.find("float64"), std::string::npos) << r.message;
}

TEST_F(Kunlun, TiledElementwiseMatchesTheHostArithmetic) {
  const int64_t n = 100003;  // several tiles, the last one partial
  std::vector<float> a(n);
  for (int64_t i = 0; i < n; ++i) a[i] = std::sin(static_cast<float>(i)) * 100.0f;
  const std::vector<float> b = {0.375f};
  void* da = Upload(a);
  void* db = Upload(b);
  void* dout = Alloc(n * 4);
  Desc x(da, F32, {n}), scalar(db, F32, {n}, {0}), out(dout, F32, {n});
  ASSERT_TRUE(Run("add", {F32, F32, F32}, {&x, &scalar}, {&out}).ok());
  const auto got = Download<float>(dout, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], a[i] + 0.375f) << i;

  // A transposed (strided) input through a unary op.
  const int64_t rows = 300, cols = 333;  // fits inside the n elements uploaded above
  Desc t(da, F32, {cols, rows}, {1, cols}), tout(dout, F32, {cols, rows});
  ASSERT_TRUE(Run("relu", {F32, F32}, {&t}, {&tout}).ok());
  const auto relu = Download<float>(dout, rows * cols);
  for (int64_t i = 0; i < cols; ++i) {
    for (int64_t j = 0; j < rows; ++j) ASSERT_EQ(relu[i * rows + j], std::max(a[j * cols + i], 0.0f)) << i << "," << j;
  }

  // float16 with float32 compute, rounded once.
  std::vector<Half> h(n);
  for (int64_t i = 0; i < n; ++i) h[i] = Half(a[i] / 8);
  void* dh = Upload(h);
  void* dho = Alloc(n * 2);
  Desc hx(dh, F16, {n}), hout(dho, F16, {n});
  ASSERT_TRUE(Run("mul", {F16, F16, F16}, {&hx, &hx}, {&hout}).ok());
  const auto hgot = Download<Half>(dho, n);
  for (int64_t i = 0; i < n; i += 7) {
    ASSERT_EQ(hgot[i].bits, Half(static_cast<float>(h[i]) * static_cast<float>(h[i])).bits) << i;
  }

  // where: four operands per tile (a bool condition).
  std::vector<uint8_t> cond(n);
  for (int64_t i = 0; i < n; ++i) cond[i] = static_cast<uint8_t>(i % 3 == 0);
  void* dc = Upload(cond);
  Desc c(dc, BOOL, {n});
  ASSERT_TRUE(Run("where", {BOOL, F32, F32, F32}, {&c, &x, &scalar}, {&out}).ok());
  const auto w = Download<float>(dout, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(w[i], i % 3 == 0 ? a[i] : 0.375f) << i;
}

TEST_F(Kunlun, TiledCastCopyAndFillKeepTheirContracts) {
  const std::vector<float> special = {1e30f, -1e30f, std::numeric_limits<float>::quiet_NaN(), 3.7f, -3.7f};
  const int64_t n = 50000;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = special[i % 5];
  void* dv = Upload(v);
  void* di = Alloc(n * 8);
  Desc x(dv, F32, {n}), out(di, I64, {n});
  ASSERT_TRUE(Run("cast", {F32, I64}, {&x}, {&out}).ok());
  const auto ints = Download<int64_t>(di, n);
  const int64_t expected[] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), 0, 3, -3};
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(ints[i], expected[i % 5]) << i;

  // copy into a strided view: only the view's elements are written.
  const int64_t rows = 700, cols = 100;
  std::vector<float> src(rows * cols / 2), sentinel(rows * cols, 7.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  void* ds = Upload(src);
  void* dd = Upload(sentinel);
  Desc from(ds, F32, {rows, cols / 2}), view(dd, F32, {rows, cols / 2}, {cols, 1});
  ASSERT_TRUE(Run("copy", {F32, F32}, {&from}, {&view}).ok());
  const auto copied = Download<float>(dd, rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      ASSERT_EQ(copied[r * cols + k], k < cols / 2 ? static_cast<float>(r * cols / 2 + k) : 7.0f) << r << "," << k;
    }
  }

  void* df = Alloc(70000 * 8);
  Desc filled(df, I64, {70000});
  ASSERT_TRUE(Run("fill", {I64}, {}, {&filled}, {IntAttr("value", int64_t{1} << 40)}).ok());
  const auto f = Download<int64_t>(df, 70000);
  EXPECT_EQ(std::count(f.begin(), f.end(), int64_t{1} << 40), 70000);
}

TEST_F(Kunlun, ReductionsLargerThanLocalMemoryCombinePartialSums) {
  // 3M floats (12 MiB) against 256 KiB of local memory: ~46 chunks, then a combining pass.
  const int64_t n = 3000000;
  std::vector<float> v(n);
  double exact = 0;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = 0.1f + static_cast<float>(i % 1000) * 1e-4f;
    exact += v[i];
  }
  void* dv = Upload(v);
  void* dout = Alloc(4);
  const std::vector<int64_t> axis0 = {0};
  Desc x(dv, F32, {n}), out(dout, F32, {1});
  ASSERT_TRUE(Run("sum", {F32, F32}, {&x}, {&out}, {IntsAttr("axes", axis0)}).ok());
  const float total = Download<float>(dout, 1)[0];
  EXPECT_NEAR(total / exact, 1.0, 1e-6) << total << " vs " << exact;

  // Row reduction with rows longer than local memory; exact in float (multiples of 0.25).
  const int64_t rows = 5, cols = 200000;
  std::vector<float> m(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) m[i] = static_cast<float>(i % 7) * 0.25f;
  void* dm = Upload(m);
  void* drow = Alloc(rows * 4);
  const std::vector<int64_t> axis1 = {1};
  Desc mx(dm, F32, {rows, cols}), rout(drow, F32, {rows, 1});
  ASSERT_TRUE(Run("sum", {F32, F32}, {&mx}, {&rout}, {IntsAttr("axes", axis1)}).ok());
  const auto rsum = Download<float>(drow, rows);
  for (int64_t r = 0; r < rows; ++r) {
    double e = 0;
    for (int64_t k = 0; k < cols; ++k) e += m[r * cols + k];
    ASSERT_EQ(rsum[r], static_cast<float>(e)) << r;
  }
  // Column reduction of the transposed view, and a mean over two non-adjacent axes.
  void* dcol = Alloc(rows * 4);
  Desc mt(dm, F32, {cols, rows}, {1, cols}), cout(dcol, F32, {1, rows});
  ASSERT_TRUE(Run("sum", {F32, F32}, {&mt}, {&cout}, {IntsAttr("axes", axis0)}).ok());
  EXPECT_EQ(Download<float>(dcol, rows), rsum);
  const std::vector<int64_t> axes02 = {0, 2};
  void* dmean = Alloc(5 * 4);
  Desc m3(dm, F32, {40, 5, 5000}), mout(dmean, F32, {1, 5, 1});
  ASSERT_TRUE(Run("mean", {F32, F32}, {&m3}, {&mout}, {IntsAttr("axes", axes02)}).ok());
  const auto means = Download<float>(dmean, 5);
  for (int64_t j = 0; j < 5; ++j) {
    double e = 0;
    for (int64_t i = 0; i < 40; ++i) {
      for (int64_t k = 0; k < 5000; ++k) e += m[(i * 5 + j) * 5000 + k];
    }
    EXPECT_NEAR(means[j], e / 200000, 1e-6) << j;
  }
  // int32 accumulates in 64 bits and wraps once at the end; bfloat16 rounds once.
  std::vector<int32_t> big(10, 2000000000);
  void* dbig = Upload(big);
  void* dis = Alloc(4);
  Desc bx(dbig, I32, {10}), bout(dis, I32, {1});
  ASSERT_TRUE(Run("sum", {I32, I32}, {&bx}, {&bout}, {IntsAttr("axes", axis0)}).ok());
  EXPECT_EQ(Download<int32_t>(dis, 1)[0], static_cast<int32_t>(static_cast<uint32_t>(20000000000ll)));
  std::vector<BFloat16> ones(100000, BFloat16(1.0f));
  void* dones = Upload(ones);
  void* dbs = Alloc(2);
  Desc ox(dones, BF16, {100000}), oout(dbs, BF16, {1});
  ASSERT_TRUE(Run("sum", {BF16, BF16}, {&ox}, {&oout}, {IntsAttr("axes", axis0)}).ok());
  EXPECT_EQ(Download<BFloat16>(dbs, 1)[0].bits, BFloat16(100000.0f).bits);
  // Reducing an empty extent: 0 for the sum, NaN for the mean.
  void* de = Alloc(16);
  Desc empty(nullptr, F32, {4, 0}), eout(de, F32, {4, 1});
  ASSERT_TRUE(Run("sum", {F32, F32}, {&empty}, {&eout}, {IntsAttr("axes", axis1)}).ok());
  EXPECT_EQ(Download<float>(de, 4), std::vector<float>(4, 0.0f));
  ASSERT_TRUE(Run("mean", {F32, F32}, {&empty}, {&eout}, {IntsAttr("axes", axis1)}).ok());
  EXPECT_TRUE(std::isnan(Download<float>(de, 4)[3]));
}

struct Record {
  std::string name;
  uint64_t duration;
  double flops;
};
void Collect(void* context, const oar_activity_t* a) {
  static_cast<std::vector<Record>*>(context)->push_back({a->name, a->end_ns - a->start_ns, a->flops});
}

// A kernel's simulated time is ceil(tiles / cores) waves: 1 and 64 full tiles take one wave on the 64
// cores, 65 tiles take two.
TEST_F(Kunlun, TimeModelRunsTilesInWavesOverTheClusterCores) {
  const int64_t local = FindDeviceAttr(P(), 0, "local_memory_per_unit")->v.i;
  const int64_t cores = FindDeviceAttr(P(), 0, OAR_DEVICE_ATTR_COMPUTE_UNITS)->v.i;
  EXPECT_EQ(cores, FindDeviceAttr(P(), 0, "clusters")->v.i * FindDeviceAttr(P(), 0, "cores_per_cluster")->v.i);
  const int64_t tile = (local - 64 * 3) / 12 / 64 * 64;  // float32 add: three operands of 4 bytes
  const int64_t n = (cores + 1) * tile;
  void* a = Alloc(n * 4);
  void* out = Alloc(n * 4);
  OAR_ASSERT_OK(P().dev()->memset(0, a, 0, n * 4));
  const oar_profiler_api_t* prof = P().api->profiler;
  OAR_ASSERT_OK(prof->start(0));
  for (int64_t elements : {tile, cores * tile, (cores + 1) * tile}) {
    Desc x(a, F32, {elements}), o(out, F32, {elements});
    ASSERT_TRUE(Run("add", {F32, F32, F32}, {&x, &x}, {&o}).ok());
  }
  OAR_ASSERT_OK(prof->stop(0));
  std::vector<Record> records;
  OAR_ASSERT_OK(prof->flush(0, Collect, &records));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].duration, records[1].duration);
  EXPECT_GT(records[2].duration, records[1].duration * 3 / 2);
  EXPECT_DOUBLE_EQ(records[1].flops, static_cast<double>(cores * tile));
}

TEST_F(Kunlun, UntiledOpsStillRunOnTheDevice) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1};
  void* da = Upload(a);
  void* db = Upload(b);
  void* dc = Alloc(4 * 4);
  Desc ma(da, F32, {2, 3}), mb(db, F32, {3, 2}), mc(dc, F32, {2, 2});
  ASSERT_TRUE(Run("matmul", {F32, F32, F32}, {&ma, &mb}, {&mc}).ok());
  EXPECT_EQ(Download<float>(dc, 4), (std::vector<float>{4, 5, 10, 11}));
}

}  // namespace
}  // namespace oar::simtest
