// Kernel selection's supports() fallback: a plugin that registers a PLAIN key but declines this call (with
// static extents) makes the op run on the cpu, with explicit transfers both ways. The hostmem fixture
// declines copies of more than 2^20 elements (core/runtime/fixtures/hostmem_plugin.cc).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/ir/text.h"
#include "core/passes/pass.h"
#include "core/runtime/runtime.h"

namespace oar::passes {
namespace {

const bool kConfigured = [] {
  runtime::Runtime::Options o;
  o.plugin_files = {std::filesystem::path(OAR_FIXTURE_DIR) / "good" / "liboar_plugin_fixture_hostmem.so"};
  runtime::Runtime::Configure(o);
  return true;
}();

constexpr const char* kProgram =
    "builtin.module() ({\n"
    "  %s = builtin.data() {index = 0, name = \"small\"} : () -> tensor<[4], f32>\n"
    "  %b = builtin.data() {index = 1, name = \"big\"} : () -> tensor<[1048577], f32>\n"
    "  %cs = op.copy(%s) : (tensor<[4], f32>) -> tensor<[4], f32>\n"
    "  %cb = op.copy(%b) : (tensor<[1048577], f32>) -> tensor<[1048577], f32>\n"
    "  builtin.output(%cs, %cb) : (tensor<[4], f32>, tensor<[1048577], f32>) -> ()\n"
    "}) : () -> ()\n";

std::string Select(std::string_view device) {
  ir::IrContext ctx;
  auto p = ir::ParseProgram(ctx, kProgram, "select.oir");
  PassManager pm;
  pm.AddPipeline("kernel-select{device=" + std::string(device) + "}");
  pm.Run(*p);
  return ir::Print(*p);
}

TEST(KernelSelectSupports, ADeclinedPlainKernelFallsBackToCpuWithExplicitCopies) {
  ASSERT_TRUE(kConfigured);
  const std::string out = Select("hostmem:0");
  // The small copy is accepted and stays on the device.
  EXPECT_NE(out.find("%2 = kernel.copy(%0) {device = device<\"hostmem:0\">}"), std::string::npos) << out;
  // The large one is declined by supports(): transfer to the cpu, copy there, transfer back.
  EXPECT_NE(out.find("%3 = kernel.transfer(%1) {from = device<\"hostmem:0\">, to = device<\"cpu:0\">}"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("%4 = kernel.copy(%3) {device = device<\"cpu:0\">}"), std::string::npos) << out;
  EXPECT_NE(out.find("%5 = kernel.transfer(%4) {from = device<\"cpu:0\">, to = device<\"hostmem:0\">}"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("builtin.output(%2, %5)"), std::string::npos) << out;
  EXPECT_EQ(out.find("kernel.copy(%1)"), std::string::npos) << "the declined copy was bound to hostmem:\n" << out;
}

TEST(KernelSelectSupports, StrictModeRefusesTheDeclinedCallWithThePluginsReason) {
  runtime::Runtime::Get().SetStrict(true);
  try {
    Select("hostmem:0");
    ADD_FAILURE() << "kernel selection fell back under OAR_STRICT_DEVICE";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("hostmem declined: hostmem copies at most 1048576 elements at once"), std::string::npos) << m;
    EXPECT_NE(m.find("OAR_STRICT_DEVICE"), std::string::npos) << m;
  }
  runtime::Runtime::Get().SetStrict(false);
}

}  // namespace
}  // namespace oar::passes
