// The main of the core's test programs (and the helpers of testing.h): GoogleTest's, then the runtime drained before returning.
// A test may end while a simulated device still runs its last kernel on a stream thread; if main
// returned at once, the process would tear down the libraries that kernel uses (oneDNN frees its JIT
// code at exit) and crash after every test had passed. Runtime::DrainAtExit documents the rule.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/runtime/runtime.h"
#include "core/runtime/testing.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  oar::runtime::Runtime::DrainAtExit();
  return rc;
}

namespace oar::runtime::testing {

bool UseOnlyPlugins(const char* plugin_dir, std::initializer_list<const char*> names) {
  Runtime::Options o;
  for (const char* name : names) {
    o.plugin_files.push_back(std::filesystem::path(plugin_dir) / (std::string("liboar_plugin_") + name + ".so"));
  }
  o.use_env_path = false;
  o.use_default_dir = false;
  Runtime::Configure(o);
  return true;
}

}  // namespace oar::runtime::testing
