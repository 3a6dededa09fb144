// The runner as CI uses it: exit code and summary agree, every case is reported exactly once, crashes and
// hangs are attributed to their case while the rest of the run completes, a refused plugin fails L0.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "conformance/runner/case.h"

namespace oar::conformance {
namespace {

namespace fs = std::filesystem;

struct RunOutput {
  int exit_code;
  nlohmann::json summary;
  std::map<std::string, nlohmann::json> results;  // by case id
  std::string junit;
};

RunOutput RunRunner(const std::string& args, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("oar_conformance_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  const std::string cmd = std::string(OAR_BIN_DIR) + "/oar conformance " + args + " --report-dir " + dir.string() +
                          " > " + (dir.string() + ".log") + " 2>&1";
  const int status = std::system(cmd.c_str());
  RunOutput out{WIFEXITED(status) ? WEXITSTATUS(status) : -1, {}, {}, {}};
  std::ifstream summary(dir / "summary.json");
  if (summary) out.summary = nlohmann::json::parse(summary);
  std::ifstream results(dir / "results.jsonl");
  for (std::string line; std::getline(results, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(out.results.count(j["id"].get<std::string>()), 0u) << "reported twice: " << j["id"];
    out.results[j["id"].get<std::string>()] = j;
  }
  std::ifstream junit(dir / "junit.xml");
  out.junit.assign(std::istreambuf_iterator<char>(junit), {});
  fs::remove_all(dir);
  return out;
}

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1)) ++n;
  return n;
}

TEST(Runner, CpuPassesL0AndReportsAgree) {
  const RunOutput r = RunRunner("--device cpu:0 --level L0 --jobs 2", "cpu");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.summary["verdict"], "PASS");
  EXPECT_EQ(r.summary["levels"]["L0"], "PASS");
  EXPECT_EQ(r.results.size(), AllCases().size());  // every case once, selected or not
  EXPECT_EQ(r.summary["plugin"]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(Count(r.junit, "<testcase "), AllCases().size());
  EXPECT_EQ(Count(r.junit, "<failure"), 0u);
  EXPECT_NE(r.junit.find("</testsuites>"), std::string::npos);
  for (const auto& [id, j] : r.results) EXPECT_NE(j["status"], "FAILED") << id << ": " << j["message"];
}

TEST(Runner, FilteredOutCasesAreNotSelectedNeverPassed) {
  const RunOutput r = RunRunner("--device cpu:0 --level L0 --filter 'L0.copy.*'", "filter");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.summary["levels"]["L0"], "PASS_FILTERED");
  EXPECT_EQ(r.results.at("L0.memory.alignment")["status"], "NOT_SELECTED");
  EXPECT_EQ(r.results.at("L0.copy.d2d.bytes=4096")["status"], "PASSED");
  EXPECT_GT(r.summary["counts"]["not_selected"].get<int>(), 5);
}

TEST(Runner, CrashIsAttributedToItsCaseAndTheRunContinues) {
  const RunOutput r =
      RunRunner(std::string("--plugin ") + OAR_FIXTURE_DIR + "/good/liboar_plugin_fixture_crashy.so --level L0", "crashy");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.summary["levels"]["L0"], "FAIL");
  const nlohmann::json& crashed = r.results.at("L0.memset.sync_and_async");
  EXPECT_EQ(crashed["status"], "CRASHED");
  EXPECT_NE(crashed["message"].get<std::string>().find("signal 11"), std::string::npos) << crashed;
  // Cases after the crash still ran in a fresh worker.
  EXPECT_EQ(r.results.at("L0.copy.d2d.bytes=4096")["status"], "PASSED");
  EXPECT_EQ(r.results.at("L0.event.record_query_synchronize")["status"], "PASSED");
}

TEST(Runner, HangIsATimeoutForItsCase) {
  const RunOutput r = RunRunner(
      std::string("--plugin ") + OAR_FIXTURE_DIR + "/good/liboar_plugin_fixture_hangy.so --level L0 --timeout 2", "hangy");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.results.at("L0.event.record_query_synchronize")["status"], "TIMEOUT");
  EXPECT_EQ(r.results.at("L0.stream.host_callback")["status"], "PASSED");
}

TEST(Runner, RefusedPluginFailsL0WithTheReason) {
  const RunOutput r =
      RunRunner(std::string("--plugin ") + OAR_FIXTURE_DIR + "/liboar_plugin_fixture_wrong_major.so --level L0", "refused");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.summary["verdict"], "FAIL");
  EXPECT_NE(r.summary["plugin"]["load_error"].get<std::string>().find("plugin ABI 2.0 is incompatible"), std::string::npos)
      << r.summary;
}

TEST(Runner, PluginThatCrashesWhileLoadingFailsL0AndTheRunnerSurvives) {
  const RunOutput r = RunRunner(
      std::string("--plugin ") + OAR_FIXTURE_DIR + "/crash/liboar_plugin_fixture_init_crashes.so --level L0", "crashload");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.summary["verdict"], "FAIL");
  EXPECT_NE(r.summary["plugin"]["load_error"].get<std::string>().find("signal 11"), std::string::npos) << r.summary;
  EXPECT_EQ(r.results.at("L0.memory.alignment")["status"], "FAILED");
}

TEST(Runner, LevelsWithoutCasesAreNotAvailableNotPassed) {
  const RunOutput r = RunRunner("--device cpu:0 --level L1 --filter 'L0.handshake.*'", "l1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.summary["levels"]["L1"], "NOT_AVAILABLE");
}

}  // namespace
}  // namespace oar::conformance
