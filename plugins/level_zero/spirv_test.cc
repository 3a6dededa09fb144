// The SPIR-V module embedded in the plugin defines exactly the kernels the host code launches: every
// name ops.cc can ask zeKernelCreate for is an OpEntryPoint of the module, and no entry point is dead.
// The run-time OpenCL C -> SPIR-V compile of the compiler table (spirv_compiler.h): its errors. (CINN's
// generated kernels through it: core/compiler/opencl_test.cc.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/level_zero/ops.h"
#include "plugins/level_zero/spirv_blob.h"
#include "plugins/level_zero/spirv_compiler.h"

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

/// Sets an environment variable for one scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

/// The status of CompileOpenClToSpirv(source) (code 0 when it compiled).
std::pair<int, std::string> CompileStatus(const std::string& source) {
  try {
    CompileOpenClToSpirv(source, {}, "probe");
    return {0, ""};
  } catch (const sdk::StatusError& e) {
    return {e.code(), e.what()};
  }
}

constexpr char kKernel[] = "__kernel void k(__global float* x) { x[get_global_id(0)] = 1.0f; }";

TEST(LevelZeroRuntimeCompile, MissingClangIsUnavailableSayingWhy) {
  ScopedEnv clang("OAR_CLANG", "/nonexistent/clang-15");
  const SpirvToolchain tc = FindSpirvToolchain();
  EXPECT_FALSE(tc.ok());
  EXPECT_NE(tc.why.find("OAR_CLANG=/nonexistent/clang-15"), std::string::npos) << tc.why;
  const auto [code, message] = CompileStatus(kKernel);
  EXPECT_EQ(code, OAR_STATUS_UNAVAILABLE) << message;
  EXPECT_NE(message.find("level_zero: cannot compile OpenCL C module 'probe'"), std::string::npos) << message;
  EXPECT_NE(message.find("install clang-15 or set OAR_CLANG"), std::string::npos) << message;
}

TEST(LevelZeroRuntimeCompile, MissingLlvmSpirvIsUnavailableSayingWhy) {
  if (!FindSpirvToolchain().ok()) GTEST_SKIP() << FindSpirvToolchain().why;
  ScopedEnv spirv("OAR_LLVM_SPIRV", "no-such-llvm-spirv");
  const SpirvToolchain tc = FindSpirvToolchain();
  EXPECT_FALSE(tc.ok());
  EXPECT_NE(tc.why.find("OAR_LLVM_SPIRV=no-such-llvm-spirv"), std::string::npos) << tc.why;
  EXPECT_EQ(CompileStatus(kKernel).first, OAR_STATUS_UNAVAILABLE);
}

TEST(LevelZeroRuntimeCompile, CompileErrorsCarryTheLogAndTheSource) {
  if (!FindSpirvToolchain().ok()) GTEST_SKIP() << FindSpirvToolchain().why;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("oar_l0_rtc_" + std::to_string(::getpid()));
  ScopedEnv cache("OAR_CACHE_DIR", dir.string());
  const auto [code, message] = CompileStatus("__kernel void k(__global float* x) { x[0] = undeclared; }");
  EXPECT_EQ(code, OAR_STATUS_INVALID_ARGUMENT) << message;
  EXPECT_NE(message.find("compiling OpenCL C module 'probe' failed"), std::string::npos) << message;
  EXPECT_NE(message.find("undeclared"), std::string::npos) << message;
  EXPECT_NE(message.find(".cl"), std::string::npos) << message;
  // A good kernel compiles to a SPIR-V module naming it.
  const std::string spirv = CompileOpenClToSpirv(kKernel, {}, "good");
  ASSERT_GE(spirv.size(), 20u);
  uint32_t magic = 0;
  std::memcpy(&magic, spirv.data(), 4);
  EXPECT_EQ(magic, kMagic);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace oar::level_zero
