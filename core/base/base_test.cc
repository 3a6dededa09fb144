#include <cstdlib>

#include <gtest/gtest.h>

#include "core/base/env.h"
#include "core/base/error.h"

namespace oar {
namespace {

TEST(Error, CarriesCodeAndMessage) {
  try {
    Throw(ErrorCode::kInvalidArgument, "add: expected {} got {}", "float32", "int64");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.ToString(), "INVALID_ARGUMENT: add: expected float32 got int64");
  }
}

TEST(Env, ParsesByteSizes) {
  EXPECT_EQ(ParseBytes("512M", "X"), 512ull << 20);
  EXPECT_EQ(ParseBytes("4096", "X"), 4096u);
  EXPECT_EQ(ParseBytes("2GB", "X"), 2ull << 30);
  EXPECT_THROW(ParseBytes("12Q", "X"), Error);
  EXPECT_THROW(ParseBytes("", "X"), Error);
  EXPECT_THROW(ParseBytes("M", "X"), Error);
}

TEST(Env, FlagRejectsGarbage) {
  setenv("OAR_TEST_FLAG", "maybe", 1);
  try {
    GetEnvFlag("OAR_TEST_FLAG");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OAR_TEST_FLAG='maybe'"), std::string::npos);
  }
  setenv("OAR_TEST_FLAG", "On", 1);
  EXPECT_TRUE(GetEnvFlag("OAR_TEST_FLAG"));
  unsetenv("OAR_TEST_FLAG");
  EXPECT_FALSE(GetEnvFlag("OAR_TEST_FLAG"));
}

}  // namespace
}  // namespace oar
