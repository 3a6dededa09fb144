// The runner as CI uses it: exit code and summary agree, every case is reported exactly once, crashes and
// hangs are attributed to their case while the rest of the run completes, a refused plugin fails L0.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "conformance/runner/case.h"
#include "conformance/runner/run_runner_testing.h"

namespace oar::conformance {
namespace {

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
  const RunOutput r = RunRunner(
      std::string("--plugin ") + OAR_FIXTURE_DIR + "/good/liboar_plugin_fixture_crashy.so --level L0", "crashy");
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
      std::string("--plugin ") + OAR_FIXTURE_DIR + "/good/liboar_plugin_fixture_hangy.so --level L0 --timeout 2",
      "hangy");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.results.at("L0.event.record_query_synchronize")["status"], "TIMEOUT");
  EXPECT_EQ(r.results.at("L0.stream.host_callback")["status"], "PASSED");
}

TEST(Runner, RefusedPluginFailsL0WithTheReason) {
  const RunOutput r = RunRunner(
      std::string("--plugin ") + OAR_FIXTURE_DIR + "/liboar_plugin_fixture_wrong_major.so --level L0", "refused");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.summary["verdict"], "FAIL");
  EXPECT_NE(r.summary["plugin"]["load_error"].get<std::string>().find("plugin ABI 2.0 is incompatible"),
            std::string::npos)
      << r.summary;
}

TEST(Runner, PluginThatCrashesWhileLoadingFailsL0AndTheRunnerSurvives) {
  const RunOutput r =
      RunRunner(std::string("--plugin ") + OAR_FIXTURE_DIR + "/crash/liboar_plugin_fixture_init_crashes.so --level L0",
                "crashload");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.summary["verdict"], "FAIL");
  EXPECT_NE(r.summary["plugin"]["load_error"].get<std::string>().find("signal 11"), std::string::npos) << r.summary;
  EXPECT_EQ(r.results.at("L0.memory.alignment")["status"], "FAILED");
}

TEST(Runner, LevelsTheFilterLeavesOutAreFilteredOutNotPassed) {
  const RunOutput r = RunRunner("--device cpu:0 --level L3 --filter 'L0.handshake.*'", "l3");
  EXPECT_EQ(r.summary["levels"]["L1"], "FILTERED_OUT");  // has cases, the filter selected none
  EXPECT_EQ(r.summary["levels"]["L3"], "FILTERED_OUT");
}

TEST(Runner, AFilterWithAnEmptyGlobIsAnError) {
  const RunOutput r = RunRunner("--device cpu:0 --level L0 --filter 'L0.handshake.*::L0.memory.*'", "emptyglob");
  EXPECT_NE(r.exit_code, 0);
  std::ifstream log(std::filesystem::temp_directory_path() /
                    ("oar_conformance_test_" + std::to_string(::getpid()) + "_emptyglob.log"));
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("has an empty glob at character 15"), std::string::npos) << text;
}

TEST(Runner, L3OnASingleDeviceTypeWithoutCclSkipsEverythingAndCannotPass) {
  const RunOutput r = RunRunner("--device cpu:0 --level L3 --filter 'L0.handshake.*:L3.*'", "l3cpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.summary["levels"]["L3"], "NO_CASES_RUN");
  EXPECT_EQ(r.results.at("L3.ccl.all_reduce.sum.float32")["status"], "SKIPPED");
  EXPECT_NE(r.results.at("L3.ccl.all_reduce.sum.float32")["message"].get<std::string>().find("no CCL table"),
            std::string::npos);
}

TEST(Runner, L3PassesOnKunlunSimWithTwoDevices) {
  const RunOutput r = RunRunner("--device kunlun_sim:0 --level L3 --filter 'L0.handshake.*:L3.*'", "l3kunlun");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
  EXPECT_EQ(r.summary["levels"]["L3"], "PASS_FILTERED");
  EXPECT_EQ(r.results.at("L3.data_parallel.mlp.two_devices")["status"], "PASSED");
  EXPECT_EQ(r.results.at("L3.ccl.all_reduce.avg.bfloat16")["status"], "PASSED");
}

TEST(Runner, UnclaimedKernelsRefusedCleanlyAreSkippedAndShownInTheSupportMatrix) {
  // kunlun_sim declares no float64: its float64 op cases must be refused cleanly (SKIPPED, not FAILED).
  const RunOutput r = RunRunner("--device kunlun_sim:0 --level L1 --filter 'L1.op.add.*.same'", "support");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.results.at("L1.op.add.float64.same")["status"], "SKIPPED");
  EXPECT_NE(r.results.at("L1.op.add.float64.same")["message"].get<std::string>().find("refused cleanly"),
            std::string::npos);
  EXPECT_EQ(r.results.at("L1.op.add.float32.same")["status"], "PASSED");
  std::istringstream csv(r.support_csv);
  std::string header, line, add_row;
  std::getline(csv, header);
  while (std::getline(csv, line)) {
    if (line.rfind("add,", 0) == 0) add_row = line;
  }
  EXPECT_EQ(header.rfind("op,float32,float64", 0), 0u) << header;
  // Cells holding commas are quoted (RFC 4180).
  EXPECT_EQ(add_row.rfind("add,\"declared, 1 passed\",refused,", 0), 0u) << add_row;
}

TEST(Runner, FilterMatchingNothingIsNotAPass) {
  const RunOutput r = RunRunner("--device cpu:0 --level L1 --filter 'no.such.case'", "nothing");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.summary["verdict"], "FAIL");
}

TEST(Runner, L1NumericRecordsCarryDtypeShapeToleranceAndErrors) {
  const RunOutput r = RunRunner("--device cpu:0 --level L1 --filter 'L1.op.add.float32.*'", "l1add");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.summary["levels"]["L0"], "FILTERED_OUT");
  EXPECT_EQ(r.summary["levels"]["L1"], "PASS_FILTERED");
  const nlohmann::json& j = r.results.at("L1.op.add.float32.broadcast_row");
  EXPECT_EQ(j["status"], "PASSED") << j;
  EXPECT_EQ(j["dtype"], "float32");
  EXPECT_EQ(j["shape"], "[3, 5] x [5]");
  EXPECT_GT(j["tolerance"]["rtol"].get<double>(), 0);
  EXPECT_TRUE(j.contains("max_abs_error") && j.contains("max_rel_error")) << j;
  EXPECT_NE(j["seed"].get<uint64_t>(), 0u);
}

}  // namespace
}  // namespace oar::conformance
