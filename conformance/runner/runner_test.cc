// The runner as CI uses it: exit code and summary agree, every case is reported exactly once, crashes and
// hangs are attributed to their case while the rest of the run completes, a refused plugin fails L0.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "conformance/runner/case.h"
#include "conformance/runner/determinism.h"
#include "conformance/runner/run_runner_testing.h"
#include "conformance/runner/runner.h"

namespace oar::conformance {
namespace {

TEST(KernelLists, ParseOpsAndFullKeysIgnoringSpaces) {
  const std::vector<KernelPattern> l = ParseKernelList(" sum(float32, float32) ;matmul;; cast(int64,float16);", "x");
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].op, "sum");
  EXPECT_TRUE(l[0].Matches("sum", std::vector<DType>{DType::kFloat32, DType::kFloat32}));
  EXPECT_FALSE(l[0].Matches("sum", std::vector<DType>{DType::kFloat64, DType::kFloat64}));
  EXPECT_FALSE(l[0].Matches("sum", std::vector<DType>{DType::kFloat32}));  // the full key, not a prefix
  EXPECT_TRUE(l[1].Matches("matmul", std::vector<DType>{DType::kBFloat16, DType::kBFloat16, DType::kBFloat16}));
  EXPECT_FALSE(l[1].Matches("mul", std::vector<DType>{DType::kFloat32, DType::kFloat32, DType::kFloat32}));
  EXPECT_TRUE(l[2].Matches("cast", std::vector<DType>{DType::kInt64, DType::kFloat16}));
  EXPECT_TRUE(ParseKernelList("", "x").empty());
}

TEST(KernelLists, MalformedEntriesAreErrorsNamingTheAttributeAndEntry) {
  for (const char* bad : {"sum(float32", "sum(floot32)", "sum()", "(float32)", "Sum", "sum(float32)(int32)"}) {
    try {
      ParseKernelList(std::string("add;") + bad, "nondeterministic_kernels");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
      EXPECT_NE(std::string(e.what()).find("device attribute 'nondeterministic_kernels': entry '"), std::string::npos)
          << e.what();
    }
  }
}

TEST(KernelLists, KernelListsTakePrecedenceOverTheDeviceAttribute) {
  DeterminismDeclarations d;
  d.device_wide = true;
  d.nondeterministic = ParseKernelList("scatter_add", "nondeterministic_kernels");
  d.deterministic = ParseKernelList("sum(float32,float32)", "deterministic_kernels");
  const std::vector<DType> f32x2{DType::kFloat32, DType::kFloat32}, f32x3{DType::kFloat32, DType::kFloat32,
                                                                          DType::kFloat32};
  std::string why;
  EXPECT_TRUE(d.Reproducible("add", f32x3, &why));
  EXPECT_EQ(why, "the device declares 'deterministic' (kernel add(float32,float32,float32))");
  EXPECT_FALSE(d.Reproducible("scatter_add", f32x3, &why));
  EXPECT_EQ(why, "'nondeterministic_kernels' lists scatter_add (kernel scatter_add(float32,float32,float32))");
  d.device_wide = false;
  EXPECT_TRUE(d.Reproducible("sum", f32x2, &why));
  EXPECT_FALSE(d.Reproducible("add", f32x3, &why));
  EXPECT_EQ(why, "the device does not declare 'deterministic' and no kernel list names add(float32,float32,float32)");
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
  EXPECT_NE(r.summary["plugin"]["load_error"].get<std::string>().find("plugin ABI 2.1 is incompatible"),
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

// ---- verdicts: minimums, PARTIAL, never PASS above a failed level ---------------------------------

Record Rec(const std::string& id, Status status, const std::string& family = "op") {
  Record r;
  r.id = id;
  r.level = id[1] - '0';
  r.family = family;
  r.result.status = status;
  return r;
}

// A record set meeting every minimum up to L2: the L1 core kernels in float32, one model forward pass,
// one training curve.
std::vector<Record> MinimalCertifiable() {
  std::vector<Record> rs = {Rec("L0.memory.alignment", Status::kPassed, "memory")};
  for (const char* op : {"fill", "copy", "cast", "add", "mul", "matmul", "sum", "softmax"}) {
    rs.push_back(Rec(std::string("L1.op.") + op + ".float32.x", Status::kPassed));
  }
  rs.push_back(Rec("L1.op.add.float16.x", Status::kSkipped));
  rs.push_back(Rec("L1.model.mlp.forward", Status::kPassed, "model"));
  rs.push_back(Rec("L1.model.cnn.forward", Status::kSkipped, "model"));
  rs.push_back(Rec("L2.op.conv2d_grad_input.float32.x", Status::kPassed));
  rs.push_back(Rec("L2.model.mlp.training_curve", Status::kPassed, "model"));
  return rs;
}

TEST(Verdicts, ALevelMeetingItsMinimumPassesAndSaysHowMuchItTested) {
  const Verdicts v = DecideVerdicts(MinimalCertifiable(), 2, false);
  EXPECT_EQ(v.overall, "PASS") << v.levels << v.coverage;
  EXPECT_EQ(v.levels["L1"], "PASS");
  EXPECT_EQ(v.levels["L2"], "PASS");
  EXPECT_EQ(v.coverage["L1"]["kernel_keys"], 9);  // add.float16 was run (skipped): a key not covered
  EXPECT_EQ(v.coverage["L1"]["kernel_keys_passed"], 8);
  EXPECT_EQ(v.coverage["L1"]["models_passed"], 1);
  EXPECT_EQ(v.coverage["L1"]["text"].get<std::string>().rfind("8 of 9 kernel keys, 1 of ", 0), 0u) << v.coverage;
}

TEST(Verdicts, WithoutACoreKernelOrAModelALevelIsPartialNotPass) {
  std::vector<Record> rs = MinimalCertifiable();
  rs.erase(rs.begin() + 3);  // cast float32
  rs.erase(std::remove_if(rs.begin(), rs.end(), [](const Record& r) { return r.id == "L1.model.mlp.forward"; }),
           rs.end());
  const Verdicts v = DecideVerdicts(rs, 2, false);
  EXPECT_EQ(v.levels["L0"], "PASS");
  EXPECT_EQ(v.levels["L1"], "PARTIAL");
  EXPECT_EQ(v.levels["L2"], "PARTIAL");  // certified only on top of certified levels
  EXPECT_EQ(v.overall, "PARTIAL");
  const std::string text = v.coverage["L1"]["text"];
  EXPECT_NE(text.find("missing for PASS: cast float32, a model forward pass"), std::string::npos) << text;
}

TEST(Verdicts, L2WithoutATrainingCurveIsPartial) {
  std::vector<Record> rs = MinimalCertifiable();
  rs.back().result.status = Status::kSkipped;
  const Verdicts v = DecideVerdicts(rs, 2, false);
  EXPECT_EQ(v.levels["L1"], "PASS");
  EXPECT_EQ(v.levels["L2"], "PARTIAL");
  EXPECT_NE(v.coverage["L2"]["text"].get<std::string>().find("a training curve"), std::string::npos);
}

TEST(Verdicts, ALevelAboveAFailedLevelIsBlockedNeverPass) {
  std::vector<Record> rs = MinimalCertifiable();
  rs.push_back(Rec("L1.op.exp.float32.x", Status::kFailed));
  const Verdicts v = DecideVerdicts(rs, 2, false);
  EXPECT_EQ(v.levels["L0"], "PASS");
  EXPECT_EQ(v.levels["L1"], "FAIL");
  EXPECT_EQ(v.levels["L2"], "BLOCKED");
  EXPECT_EQ(v.blocked_by, "L1");
  EXPECT_EQ(v.overall, "FAIL");
}

TEST(Runner, HelpShowsEveryDefault) {
  const std::string cmd = std::string(OAR_BIN_DIR) + "/oar conformance --help";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  ::pclose(p);
  for (const char* d : {"POSITIVE=120", "TEXT=L2", "TEXT=conformance-report", "NONNEGATIVE=0", "64]=1", "UINT=0"}) {
    EXPECT_NE(text.find(d), std::string::npos) << d << " missing in\n" << text;
  }
}

}  // namespace
}  // namespace oar::conformance
