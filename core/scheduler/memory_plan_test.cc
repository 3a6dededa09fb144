// The arena planner and its checker.
#include "core/scheduler/memory_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "core/base/error.h"

namespace oar::scheduler {
namespace {

TEST(MemoryPlan, BuffersThatNeverLiveTogetherShareBytes) {
  const std::vector<BufferRequest> b = {{1000, 0, 1, "a"}, {1000, 2, 3, "b"}, {1000, 4, 5, "c"}};
  const ArenaPlan p = PlanArena(b, 256);
  EXPECT_EQ(p.offsets, (std::vector<uint64_t>{0, 0, 0}));
  EXPECT_EQ(p.arena_bytes, 1024u);
  EXPECT_EQ(UnplannedBytes(b, 256), 3072u);
  CheckArenaPlan(b, p, 256);
}

TEST(MemoryPlan, BuffersLiveTogetherGetDisjointBytes) {
  const std::vector<BufferRequest> b = {{512, 0, 2, "a"}, {256, 1, 3, "b"}, {512, 2, 4, "c"}};
  const ArenaPlan p = PlanArena(b, 256);
  CheckArenaPlan(b, p, 256);
  EXPECT_EQ(p.arena_bytes, 1280u);  // all three live at position 2
}

// Largest first, each into the smallest gap that holds it: w goes into the 1024-byte hole x2 left, not
// into the 4096 bytes x1 left below (first fit would take those).
TEST(MemoryPlan, BestFitTakesTheSmallestGap) {
  const std::vector<BufferRequest> b = {{4096, 0, 1, "x1"}, {1024, 0, 10, "y"}, {1024, 0, 1, "x2"},
                                        {1024, 0, 10, "z"}, {1024, 2, 3, "w"}};
  const ArenaPlan p = PlanArena(b, 512);
  CheckArenaPlan(b, p, 512);
  EXPECT_EQ(p.offsets, (std::vector<uint64_t>{0, 4096, 5120, 6144, 5120}));
  EXPECT_EQ(p.arena_bytes, 7168u);
}

TEST(MemoryPlan, RandomProgramsGetSoundPlansNoLargerThanNoReuse) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferRequest> b;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % 100);
      b.push_back({1 + rng() % 100000, first, first + static_cast<int>(rng() % 20), "b" + std::to_string(i)});
    }
    const ArenaPlan p = PlanArena(b, 256);
    ASSERT_NO_THROW(CheckArenaPlan(b, p, 256)) << trial;
    EXPECT_LE(p.arena_bytes, UnplannedBytes(b, 256));
    // Never below the most bytes live at one position.
    uint64_t most = 0;
    for (int pos = 0; pos < 120; ++pos) {
      uint64_t live = 0;
      for (const BufferRequest& r : b) live += r.first <= pos && pos <= r.last ? r.bytes : 0;
      most = std::max(most, live);
    }
    EXPECT_GE(p.arena_bytes, most);
  }
}

TEST(MemoryPlan, TheCheckerCatchesAPlantedOverlap) {
  const std::vector<BufferRequest> b = {{1024, 0, 5, "%x = kernel.exp"}, {1024, 3, 8, "%y = kernel.tanh"},
                                        {1024, 6, 9, "%z = kernel.relu"}};
  ArenaPlan p = PlanArena(b, 256);
  CheckArenaPlan(b, p, 256);
  ArenaPlan bad = p;
  bad.offsets[1] = bad.offsets[0] + 512;  // x and y live together at 3..5 and now share 512 bytes
  try {
    CheckArenaPlan(b, bad, 256);
    FAIL() << "the overlap went unnoticed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    const std::string m = e.what();
    EXPECT_NE(m.find("%x = kernel.exp"), std::string::npos) << m;
    EXPECT_NE(m.find("%y = kernel.tanh"), std::string::npos) << m;
    EXPECT_NE(m.find("overlap"), std::string::npos) << m;
  }
  // x and z never live together: the same bytes are fine.
  ArenaPlan fine = p;
  fine.offsets[2] = fine.offsets[0];
  fine.arena_bytes = std::max(fine.arena_bytes, fine.offsets[2] + 1024);
  EXPECT_NO_THROW(CheckArenaPlan(b, fine, 256));
  ArenaPlan past_end = p;
  past_end.arena_bytes = 1024;
  EXPECT_THROW(CheckArenaPlan(b, past_end, 256), Error);
  ArenaPlan misaligned = p;
  misaligned.offsets[0] += 8;
  misaligned.arena_bytes += 8;
  EXPECT_THROW(CheckArenaPlan(b, misaligned, 256), Error);
}

}  // namespace
}  // namespace oar::scheduler
