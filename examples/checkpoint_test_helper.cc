// For checkpoint_test: save a checkpoint of a fresh example and kill this process with SIGKILL as soon as
// SaveCheckpoint passes STEP (one of examples::kCheckpointSteps), as a crash or an OOM kill would.
//   checkpoint_test_helper DIR KIND SEED STEP
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/base/error.h"
#include "examples/models.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s DIR KIND SEED STEP\n", argv[0]);
    return 2;
  }
  const char* kill_at = argv[4];
  try {
    auto e = oar::examples::MakeExample(argv[2], oar::Device("cpu:0"), std::strtoull(argv[3], nullptr, 10));
    oar::examples::SaveCheckpoint(*e, argv[1], [kill_at](const char* step) {
      if (std::strcmp(step, kill_at) == 0) ::raise(SIGKILL);
    });
  } catch (const oar::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;  // STEP was never reached
}
