// The main of the core's test programs: GoogleTest's, then the runtime drained before returning.
// A test may end while a simulated device still runs its last kernel on a stream thread; if main
// returned at once, the process would tear down the libraries that kernel uses (oneDNN frees its JIT
// code at exit) and crash after every test had passed. Runtime::DrainAtExit documents the rule.
#include <gtest/gtest.h>

#include "core/runtime/runtime.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  oar::runtime::Runtime::DrainAtExit();
  return rc;
}
