// The SPIR-V module embedded in the plugin defines exactly the kernels the host code launches: every
// name ops.cc can ask zeKernelCreate for is an OpEntryPoint of the module, and no entry point is dead.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "plugins/level_zero/ops.h"
#include "plugins/level_zero/spirv_blob.h"

namespace oar::level_zero {
namespace {

constexpr uint32_t kMagic = 0x07230203;
constexpr uint32_t kOpEntryPoint = 15;
constexpr uint32_t kExecutionModelKernel = 6;

std::vector<uint32_t> Words() {
  std::vector<uint32_t> w(kKernelsSpirvSize / 4);
  std::memcpy(w.data(), kKernelsSpirv, w.size() * 4);
  return w;
}

/// The names of the module's Kernel entry points (fails the test on a malformed module).
std::set<std::string> EntryPoints() {
  const std::vector<uint32_t> w = Words();
  std::set<std::string> names;
  EXPECT_GE(w.size(), 5u);
  if (w.size() < 5) return names;
  for (size_t i = 5; i < w.size();) {
    const uint32_t count = w[i] >> 16, opcode = w[i] & 0xffff;
    if (count == 0 || i + count > w.size()) {
      ADD_FAILURE() << "malformed instruction at word " << i;
      break;
    }
    if (opcode == kOpEntryPoint) {
      EXPECT_EQ(w[i + 1], kExecutionModelKernel);
      const char* name = reinterpret_cast<const char*>(&w[i + 3]);
      names.insert(std::string(name, strnlen(name, (count - 3) * 4)));
    }
    i += count;
  }
  return names;
}

TEST(LevelZeroSpirv, EmbeddedModuleIsSpirv) {
  ASSERT_EQ(kKernelsSpirvSize % 4, 0u);
  const std::vector<uint32_t> w = Words();
  ASSERT_GE(w.size(), 5u);
  EXPECT_EQ(w[0], kMagic) << "not SPIR-V (or not in host byte order)";
  EXPECT_GE(w[1], 0x00010000u) << "SPIR-V version";
}

TEST(LevelZeroSpirv, EveryLaunchedKernelIsAnEntryPoint) {
  const std::set<std::string> entry = EntryPoints();
  const std::vector<std::string> launched = KernelNames();
  ASSERT_FALSE(launched.empty());
  for (const std::string& name : launched) EXPECT_TRUE(entry.count(name)) << "module lacks kernel " << name;
}

TEST(LevelZeroSpirv, EveryEntryPointIsLaunched) {
  const std::vector<std::string> launched = KernelNames();
  const std::set<std::string> used(launched.begin(), launched.end());
  for (const std::string& name : EntryPoints())
    EXPECT_TRUE(used.count(name)) << "kernel " << name << " is never launched";
}

}  // namespace
}  // namespace oar::level_zero
