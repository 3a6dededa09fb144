// Failed Level Zero calls become statuses that name the call, the device and the ze_result_t.
#include "plugins/level_zero/ze_status.h"

#include <gtest/gtest.h>

#include "oar/plugin/cpp/status.hpp"

namespace oar::level_zero {
namespace {

TEST(LevelZeroStatus, NamesAndMeaningsComeFromTheApi) {
  EXPECT_EQ(ResultName(ZE_RESULT_ERROR_UNINITIALIZED), "ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)");
  EXPECT_EQ(ResultMeaning(ZE_RESULT_ERROR_UNINITIALIZED), "driver is not initialized");
  EXPECT_EQ(ResultName(ZE_RESULT_NOT_READY), "ZE_RESULT_NOT_READY (0x1)");
  EXPECT_EQ(ResultName(static_cast<ze_result_t>(0x12345)), "unknown ze_result_t 0x12345");
}

TEST(LevelZeroStatus, CodesMapToCanonicalStatuses) {
  EXPECT_EQ(StatusCodeOf(ZE_RESULT_SUCCESS), OAR_STATUS_OK);
  EXPECT_EQ(StatusCodeOf(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY), OAR_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_EQ(StatusCodeOf(ZE_RESULT_ERROR_DEVICE_LOST), OAR_STATUS_UNAVAILABLE);
  EXPECT_EQ(StatusCodeOf(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE), OAR_STATUS_UNIMPLEMENTED);
  EXPECT_EQ(StatusCodeOf(ZE_RESULT_ERROR_INVALID_NULL_POINTER), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(StatusCodeOf(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE), OAR_STATUS_INTERNAL);
}

TEST(LevelZeroStatus, CheckThrowsWithCallDeviceAndResult) {
  EXPECT_NO_THROW(Check(ZE_RESULT_SUCCESS, "zeMemFree", "level_zero:0"));
  try {
    Check(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, "zeMemAllocDevice", "level_zero:1 (Intel Arc)");
    ADD_FAILURE() << "no exception";
  } catch (const sdk::StatusError& e) {
    EXPECT_EQ(e.code(), OAR_STATUS_RESOURCE_EXHAUSTED);
    EXPECT_STREQ(e.what(),
                 "zeMemAllocDevice on level_zero:1 (Intel Arc): ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (0x70000003): "
                 "insufficient device memory to satisfy call");
  }
}

}  // namespace
}  // namespace oar::level_zero
