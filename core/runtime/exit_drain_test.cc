// The runtime's exit drain (runtime.cc): a program that returns from main with device work still queued
// gets that work completed before exit tears its libraries down, within OAR_EXIT_DRAIN_TIMEOUT_S.
// Each case runs oar_exit_drain_probe (exit_drain_probe.cc) on kunlun_sim: its stream is busy for
// 0.3 s (5 s where the work must not finish) when main returns, and the item queued after that writes a marker file.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

struct ProbeRun {
  int status = -1;       // exit status, -1 when it did not exit normally
  bool drained = false;  // the marker was written
  std::string err;       // its stderr
  double seconds = 0;
};

ProbeRun RunProbe(const std::string& env, int busy_ms = 300) {
  const fs::path dir = fs::temp_directory_path() / ("oar_exit_drain_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path marker = dir / "marker", err = dir / "stderr";
  fs::remove(marker);
  // ThreadSanitizer sleeps 1 s at exit by default (atexit_sleep_ms), which would let the work finish anyway.
  const std::string cmd = "env TSAN_OPTIONS=\"${TSAN_OPTIONS:-}:atexit_sleep_ms=0\" " + env + " '" OAR_EXIT_DRAIN_PROBE "' '" OAR_KUNLUN_PLUGIN
                          "' '" + marker.string() + "' " + std::to_string(busy_ms) + " 2> '" + err.string() + "'";
  const auto start = std::chrono::steady_clock::now();
  const int rc = std::system(cmd.c_str());
  ProbeRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rc != -1 && WIFEXITED(rc)) run.status = WEXITSTATUS(rc);
  run.drained = fs::exists(marker);
  std::ostringstream text;
  text << std::ifstream(err).rdbuf();
  run.err = text.str();
  fs::remove_all(dir);
  return run;
}

TEST(ExitDrain, WorkQueuedWhenMainReturnsCompletesBeforeTheProcessEnds) {
  const ProbeRun run = RunProbe("");
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_TRUE(run.drained) << "the queued work was dropped at exit; stderr: " << run.err;
}

TEST(ExitDrain, ZeroTurnsItOffAndTheQueuedWorkIsLost) {
  // The same program without the drain: shows that the case above can fail.
  const ProbeRun run = RunProbe("OAR_EXIT_DRAIN_TIMEOUT_S=0", 5000);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_FALSE(run.drained);
  EXPECT_LT(run.seconds, 3.5);
}

TEST(ExitDrain, ABusyDeviceDelaysExitOnlyUntilTheTimeoutWithAWarning) {
  // The device stays busy 5 s: the process must end long before that (start-up included, sanitizers too).
  const ProbeRun run = RunProbe("OAR_EXIT_DRAIN_TIMEOUT_S=0.01", 5000);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_FALSE(run.drained);
  EXPECT_LT(run.seconds, 3.5);
  EXPECT_NE(run.err.find("devices still busy 0.01 s after main returned (OAR_EXIT_DRAIN_TIMEOUT_S)"),
            std::string::npos)
      << run.err;
}

TEST(ExitDrain, ABadTimeoutIsAClearErrorBeforeAnyPluginLoads) {
  const ProbeRun run = RunProbe("OAR_EXIT_DRAIN_TIMEOUT_S=soon");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("OAR_EXIT_DRAIN_TIMEOUT_S='soon' is not a number of seconds >= 0"), std::string::npos)
      << run.err;
}

}  // namespace
