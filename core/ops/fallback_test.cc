// CPU fallback through a device ("hostmem" fixture) that has almost no kernels: results land on the
// device asked for, every fallback is counted, and strict mode turns it into an error.
#include <gtest/gtest.h>

#include "core/ops/ops.h"
#include "core/runtime/runtime.h"

namespace oar {
namespace {

const bool kConfigured = [] {
  runtime::Runtime::Options o;
  o.plugin_files = {std::filesystem::path(OAR_FIXTURE_DIR) / "good" / "liboar_plugin_fixture_hostmem.so"};
  runtime::Runtime::Configure(o);
  return true;
}();

TEST(Fallback, ResultsLandOnTheRequestedDeviceAndAreCounted) {
  ASSERT_TRUE(kConfigured);
  const Device dev("hostmem:0");
  Tensor a = FromVector<float>({1, 2, 3, 4}, {2, 2}, dev);
  Tensor b = FromVector<float>({10, 20}, {2}, dev);
  Tensor c = matmul(a + b, a.transpose(0, 1));  // add and matmul fall back; transpose stays a view
  EXPECT_EQ(c.device(), dev);
  EXPECT_EQ(c.ToVector<float>(), (std::vector<float>{11 * 1 + 22 * 2, 11 * 3 + 22 * 4, 13 * 1 + 24 * 2, 13 * 3 + 24 * 4}));
  runtime::DeviceType* type = runtime::Runtime::Get().FindType("hostmem");
  ASSERT_NE(type, nullptr);
  const auto counts = type->FallbackCounts();
  EXPECT_EQ(counts.at("add"), 1u);
  EXPECT_EQ(counts.at("matmul"), 1u);
  // A strided copy is declined by the plugin's supports() and falls back too; a contiguous one does not.
  Tensor t = a.transpose(0, 1).contiguous();
  EXPECT_EQ(t.ToVector<float>(), (std::vector<float>{1, 3, 2, 4}));
  EXPECT_EQ(type->FallbackCounts().at("copy"), 1u);
  Tensor same = a.clone();
  EXPECT_EQ(type->FallbackCounts().at("copy"), 1u);
  EXPECT_EQ(same.ToVector<float>(), a.ToVector<float>());
}

TEST(Fallback, StrictModeMakesItAnErrorNamingOpDeviceAndVariants) {
  const Device dev("hostmem:0");
  Tensor a = FromVector<float>({1, 2}, {2}, dev);
  runtime::Runtime::Get().SetStrict(true);
  try {
    exp(a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    const std::string m = e.what();
    EXPECT_NE(m.find("op 'exp' cannot run on hostmem:0 for dtypes (float32, float32)"), std::string::npos) << m;
    EXPECT_NE(m.find("registered variants: none"), std::string::npos) << m;
    EXPECT_NE(m.find("OAR_STRICT_DEVICE=1"), std::string::npos) << m;
  }
  runtime::Runtime::Get().SetStrict(false);
  EXPECT_NEAR(exp(a).ToVector<float>()[1], 7.389056f, 1e-5);
}

TEST(Fallback, CrossDeviceCopiesInBothDirections) {
  Tensor a = arange(0, 6, 1, DType::kFloat32, Device("cpu")).reshape({2, 3});
  Tensor on_dev = a.slice(1, 1, 3).to(Device("hostmem:0"));
  EXPECT_EQ(on_dev.device(), Device("hostmem:0"));
  EXPECT_EQ(on_dev.ToVector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(on_dev.to(Device("cpu")).ToVector<float>(), (std::vector<float>{1, 2, 4, 5}));
}

}  // namespace
}  // namespace oar
