// Injected faults as a user of the core sees them (OAR_SIM_FAULTS): each scenario runs in a forked
// child that configures a fresh runtime (this parent process never creates one).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "plugins/common/sim/child_process.h"

namespace oar {
namespace {

using simtest::RunInChild;

/// Run `body` with OAR_SIM_FAULTS=faults against a runtime with the cpu and both simulators.
std::string WithFaults(const std::string& faults, const std::function<std::string()>& body) {
  return RunInChild([&]() -> std::string {
    setenv("OAR_SIM_FAULTS", faults.c_str(), 1);
    setenv("OAR_SIM_JITTER", "5", 1);
    runtime::Runtime::Options o;
    o.plugin_files = {OAR_CPU_PLUGIN, OAR_KUNLUN_PLUGIN, OAR_ASCEND_PLUGIN};
    o.use_env_path = false;
    o.use_default_dir = false;
    runtime::Runtime::Configure(o);
    if (runtime::Runtime::Get().devices().size() != 5) return "expected cpu:0 and two devices per simulator";
    return body();
  });
}

/// "" when `fn` throws oar::Error with `code` and a message containing every part.
template <typename Fn>
std::string ExpectError(Fn&& fn, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string m = e.what();
    if (e.code() != code) return "wrong code " + std::string(ErrorCodeName(e.code())) + ": " + m;
    for (const std::string& p : parts) {
      if (m.find(p) == std::string::npos) return "message lacks '" + p + "': " + m;
    }
    return "";
  }
  return "no error";
}

TEST(SimCoreFaults, AFailedKernelIsReportedAtTheNextReadAndTheDeviceKeepsWorking) {
  EXPECT_EQ(WithFaults("launch:op=exp,plugin=kunlun_sim",
                       []() -> std::string {
                         const Device d("kunlun_sim:0");
                         const Tensor x = arange(0, 8, 1, DType::kFloat32, d);
                         Tensor y = exp(x);  // enqueued: the failure happens on the stream
                         std::string r = ExpectError([&] { (void)y.ToVector<float>(); }, ErrorCode::kInternal,
                                                     {"kunlun_sim:0", "'exp'", "launch:op=exp,plugin=kunlun_sim"});
                         if (!r.empty()) return r;
                         const std::vector<float> z = (x + 1.0).ToVector<float>();
                         return z == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8} ? "" : "the device did not recover";
                       }),
            "");
}

TEST(SimCoreFaults, TheCachingAllocatorRetriesAFailedDeviceAllocationOnce) {
  EXPECT_EQ(WithFaults("alloc:plugin=ascend_sim",
                       []() -> std::string {
                         const Tensor t = ones({1000}, DType::kFloat32, Device("ascend_sim:0"));  // fails once, retried
                         return sum(t).item<float>() == 1000.0f ? "" : "wrong sum";
                       }),
            "");
  EXPECT_EQ(WithFaults("alloc:plugin=ascend_sim,count=2",
                       []() -> std::string {
                         return ExpectError([] { (void)ones({1000}, DType::kFloat32, Device("ascend_sim:0")); },
                                            ErrorCode::kResourceExhausted,
                                            {"ascend_sim:0", "out of device memory", "alloc:"});
                       }),
            "");
}

TEST(SimCoreFaults, CopyFaultsAndLostDevicesSurfaceWithTheirCodes) {
  EXPECT_EQ(WithFaults(
                "copy:plugin=kunlun_sim,dir=d2h",
                []() -> std::string {
                  const Tensor t = ones({16}, DType::kFloat32, Device("kunlun_sim:1"));
                  return ExpectError([&] { (void)t.ToVector<float>(); }, ErrorCode::kDataLoss, {"kunlun_sim:1", "d2h"});
                }),
            "");
  EXPECT_EQ(WithFaults("device_lost:plugin=kunlun_sim,device=1,after=3",
                       []() -> std::string {
                         std::string r = ExpectError(
                             [] {
                               for (int i = 0; i < 10; ++i)
                                 (void)ones({16}, DType::kFloat32, Device("kunlun_sim:1")).ToVector<float>();
                             },
                             ErrorCode::kUnavailable, {"kunlun_sim:1", "device lost"});
                         if (!r.empty()) return r;
                         const Tensor ok =
                             ones({16}, DType::kFloat32, Device("kunlun_sim:0"));  // the other device is fine
                         return sum(ok).item<float>() == 16.0f ? "" : "kunlun_sim:0 broken";
                       }),
            "");
}

}  // namespace
}  // namespace oar
