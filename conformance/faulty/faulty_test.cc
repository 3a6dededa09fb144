// Each deliberately faulty plugin, certified with `oar conformance`: the suite must catch its one bug
// at the right level, naming the right case, fail the run, and still report the cases around it.
#include <gtest/gtest.h>

#include <string>

#include "conformance/runner/run_runner_testing.h"

namespace oar::conformance {
namespace {

struct Caught {
  std::string fault;       // faulty_<fault>
  std::string args;        // level and filter
  std::string case_id;     // the case that must catch it
  std::string status;      // FAILED / CRASHED
  std::string message;     // a substring of its message
  std::string passing_id;  // a neighbouring case that must still pass
};

void ExpectCaught(const Caught& c) {
  const RunOutput r = RunRunner(
      std::string("--plugin ") + OAR_FAULTY_DIR + "/liboar_plugin_faulty_" + c.fault + ".so " + c.args + " --jobs 2",
      "faulty_" + c.fault);
  EXPECT_EQ(r.exit_code, 1) << "the run must fail";
  EXPECT_EQ(r.summary.value("verdict", ""), "FAIL") << r.summary;
  ASSERT_TRUE(r.results.count(c.case_id)) << c.case_id << " has no result";
  const nlohmann::json& j = r.results.at(c.case_id);
  EXPECT_EQ(j["status"], c.status) << j;
  EXPECT_EQ(j["level"], c.case_id.substr(0, 2)) << j;
  EXPECT_NE(j["message"].get<std::string>().find(c.message), std::string::npos) << j;
  EXPECT_EQ(r.summary["levels"][c.case_id.substr(0, 2)], "FAIL") << r.summary;
  // The rest of the run completed: the neighbour ran and passed, and no selected case lacks a result.
  ASSERT_TRUE(r.results.count(c.passing_id)) << c.passing_id << " has no result";
  EXPECT_EQ(r.results.at(c.passing_id)["status"], "PASSED") << r.results.at(c.passing_id);
  for (const auto& [id, rec] : r.results) {
    EXPECT_NE(rec["status"].get<std::string>(), "") << id;
  }
}

TEST(FaultyPlugins, MatmulIgnoringStridesFailsTheTransposedCase) {
  ExpectCaught({"strided_matmul", "--level L1 --filter 'L1.op.matmul.*'", "L1.op.matmul.float32.transposed", "FAILED",
                "differs from the fp64 reference", "L1.op.matmul.float32.square"});
}

TEST(FaultyPlugins, AllReduceAverageWithoutTheDivisionFailsL3) {
  ExpectCaught({"allreduce_avg_as_sum", "--level L3 --filter 'L0.handshake.*:L3.*'", "L3.ccl.all_reduce.avg.float32",
                "FAILED", "(computed on the host)", "L3.ccl.all_reduce.sum.float32"});
}

TEST(FaultyPlugins, EarlyAsyncD2hFailsTheL0OrderingCase) {
  ExpectCaught({"early_d2h", "--level L0", "L0.copy.async_d2h_complete_at_event", "FAILED", "event_synchronize",
                "L0.copy.d2d.bytes=4096"});
}

TEST(FaultyPlugins, SoftmaxWithoutMaxSubtractionFailsLargeLogits) {
  ExpectCaught({"softmax_overflow", "--level L1 --filter 'L1.op.softmax.*'", "L1.op.softmax.float32.large_logits",
                "FAILED", "NaN/inf mismatches", "L1.op.softmax.float32.row"});
}

TEST(FaultyPlugins, WriteOnePastTheOutputIsCaughtByTheGuardRegion) {
  ExpectCaught({"write_past_end", "--level L1 --filter 'L1.op.add.*'", "L1.op.add.float32.same", "FAILED",
                "out-of-bounds write: byte 0 past the end of output 0 (float32 [3, 5])", "L1.op.add.float64.same"});
}

TEST(FaultyPlugins, ClaimedFloat16ReturningGarbageFails) {
  ExpectCaught({"fp16_garbage", "--level L1 --filter 'L1.op.exp.*'", "L1.op.exp.float16.contiguous", "FAILED",
                "differs from the fp64 reference", "L1.op.exp.float32.contiguous"});
}

TEST(FaultyPlugins, SegfaultInOneOpIsACrashOfThatCaseOnly) {
  ExpectCaught({"crash_on_op", "--level L1 --filter 'L1.op.ne*'", "L1.op.neg.float32.contiguous", "CRASHED",
                "signal 11", "L1.op.ne.float32.same"});
}

TEST(FaultyPlugins, LeakOnEveryLaunchFailsTheMemoryGrowthCase) {
  ExpectCaught({"leak", "--level L1 --filter 'L[01].memory.*'", "L1.memory.no_growth_over_repeated_ops", "FAILED",
                "leaks device memory", "L0.memory.alignment"});
}

}  // namespace
}  // namespace oar::conformance
