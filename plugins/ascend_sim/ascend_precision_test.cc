// The cube unit's precision modes (OAR_ASCEND_SIM_PRECISION), read at initialize: each mode runs in a
// forked child that loads ascend_sim fresh; this (parent) process never loads it.
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "plugins/common/sim/sim_test_util.h"

namespace oar::simtest {
namespace {

constexpr int32_t F32 = OAR_DTYPE_FLOAT32;

struct Outcome {
  std::string mode;       // the "precision_mode" attribute
  double max_error = -1;  // max |c - exact| / sum_k |a_ik b_kj|
  double simulated_ns = 0;
  std::string error;
};

void Record(void* context, const oar_activity_t* a) {
  if (std::string(a->name) == "matmul") *static_cast<double*>(context) = static_cast<double>(a->end_ns - a->start_ns);
}

/// Multiply random float32 matrices on ascend_sim with OAR_ASCEND_SIM_PRECISION=mode (unset: empty).
Outcome RunMatmul(const std::string& mode) {
  const std::string out = RunInChild([&]() -> std::string {
    unsetenv("OAR_SIM_FAULTS");
    if (mode.empty()) {
      unsetenv("OAR_ASCEND_SIM_PRECISION");
    } else {
      setenv("OAR_ASCEND_SIM_PRECISION", mode.c_str(), 1);
    }
    const Plugin p = Load(OAR_ASCEND_PLUGIN);
    if (!p.error.empty()) return "error " + p.error;
    const oar_attr_t* attr = FindDeviceAttr(p, 0, "precision_mode");
    const std::string reported = attr ? std::string(attr->v.s.data, attr->v.s.size) : "?";
    const int64_t m = 256, k = 512, n = 256;  // large enough to be compute-bound in the model
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0, 1);
    std::vector<float> a(m * k), b(k * n), c(m * n);
    for (float& x : a) x = normal(rng);
    for (float& x : b) x = normal(rng);
    void *da = nullptr, *db = nullptr, *dc = nullptr;
    oar_stream_t s = nullptr;
    if (!Take(p.dev()->malloc(0, a.size() * 4, &da)).ok() || !Take(p.dev()->malloc(0, b.size() * 4, &db)).ok() ||
        !Take(p.dev()->malloc(0, c.size() * 4, &dc)).ok() || !Take(p.dev()->stream_create(0, &s)).ok()) {
      return "error setting up";
    }
    Take(p.dev()->memcpy_h2d(0, da, a.data(), a.size() * 4));
    Take(p.dev()->memcpy_h2d(0, db, b.data(), b.size() * 4));
    const auto kernel = p.Find("matmul", {F32, F32, F32});
    // b is passed transposed-in-memory to exercise strided operands: b^T stored [n, k] read as [k, n].
    std::vector<float> bt(k * n);
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < n; ++j) bt[j * k + i] = b[i * n + j];
    }
    Take(p.dev()->memcpy_h2d(0, db, bt.data(), bt.size() * 4));
    Desc ma(da, F32, {m, k}), mb(db, F32, {k, n}, {1, k}), mc(dc, F32, {m, n});
    Call call("matmul", 0, s, {&ma, &mb}, {&mc}, {}, kernel.kernel_data);
    Take(p.api->profiler->start(0));
    Result r = Take(kernel.fn(&call.c));
    if (r.ok()) r = Take(p.dev()->stream_synchronize(0, s));
    if (!r.ok()) return "error " + r.message;
    double simulated = 0;
    Take(p.api->profiler->flush(0, Record, &simulated));
    Take(p.dev()->memcpy_d2h(0, c.data(), dc, c.size() * 4));
    double worst = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, scale = 0;
        for (int64_t q = 0; q < k; ++q) {
          exact += static_cast<double>(a[i * k + q]) * b[q * n + j];
          scale += std::abs(static_cast<double>(a[i * k + q]) * b[q * n + j]);
        }
        worst = std::max(worst, std::abs(c[i * n + j] - exact) / scale);
      }
    }
    return "mode " + reported + " error " + std::to_string(worst) + " ns " + std::to_string(simulated);
  });
  Outcome o;
  char mode_buf[64] = {};
  if (std::sscanf(out.c_str(), "mode %63s error %lf ns %lf", mode_buf, &o.max_error, &o.simulated_ns) != 3) {
    o.error = out;
  }
  o.mode = mode_buf;
  return o;
}

TEST(AscendPrecision, AllowFp16IsBoundedButLessAccurateAndFasterThanExact) {
  const Outcome def = RunMatmul("");
  const Outcome exact = RunMatmul("exact");
  const Outcome fp16 = RunMatmul("allow_fp16");
  ASSERT_EQ(def.error, "");
  ASSERT_EQ(exact.error, "");
  ASSERT_EQ(fp16.error, "");
  EXPECT_EQ(def.mode, "exact");  // the default
  EXPECT_EQ(exact.mode, "exact");
  EXPECT_EQ(fp16.mode, "allow_fp16");
  // exact: float32 products and sums; allow_fp16: operands rounded to fp16 (relative error 2^-11 each),
  // accumulated in fp32, so about 2 * 2^-11 of the absolute-value sum at most.
  EXPECT_LT(exact.max_error, 1e-5);
  EXPECT_GT(fp16.max_error, 4 * exact.max_error);
  EXPECT_LT(fp16.max_error, 2.5 * std::ldexp(1.0, -11));
  EXPECT_EQ(def.max_error, exact.max_error);
  // The cube (peak_flops_f16) is modelled faster than the vector unit (peak_flops_f32).
  EXPECT_GT(exact.simulated_ns, 0);
  EXPECT_LT(fp16.simulated_ns, exact.simulated_ns);
}

TEST(AscendPrecision, MalformedModeFailsInitialize) {
  const std::string out = RunInChild([]() -> std::string {
    setenv("OAR_ASCEND_SIM_PRECISION", "fast", 1);
    const Plugin p = Load(OAR_ASCEND_PLUGIN);
    return p.error;
  });
  EXPECT_NE(out.find("OAR_ASCEND_SIM_PRECISION='fast'"), std::string::npos) << out;
  EXPECT_NE(out.find("exact or allow_fp16"), std::string::npos) << out;
}

}  // namespace
}  // namespace oar::simtest
