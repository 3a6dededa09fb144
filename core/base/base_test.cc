#include <cstdlib>

#include <gtest/gtest.h>

#include "core/base/env.h"
#include "core/base/json.h"
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

// 15 digits and a T suffix used to wrap around 2^64 to a small size.
TEST(Env, ByteSizesThatOverflowAreRefused) {
  EXPECT_EQ(ParseBytes("16777215T", "X"), UINT64_MAX - (uint64_t{1} << 40) + 1);
  try {
    ParseBytes("999999999999999T", "OAR_X_MEMORY");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more bytes than 64 bits can count"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ParseBytes("16777216T", "X"), Error);
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

TEST(Json, ParseRefusesDeepNestingWithoutRecursing) {
  std::string problem;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(ParseJson(deep, &problem).has_value());
  EXPECT_EQ(problem, "arrays/objects nest deeper than 64 levels");
  EXPECT_TRUE(ParseJson(std::string(64, '[') + std::string(64, ']'), &problem).has_value());
  EXPECT_FALSE(ParseJson(std::string(65, '[') + std::string(65, ']'), &problem).has_value());
  // A syntax error quoting a 1 MB token is cut short.
  EXPECT_FALSE(ParseJson("[\"" + std::string(1 << 20, 'x'), &problem).has_value());
  EXPECT_LT(problem.size(), 300u) << problem;
}

TEST(Json, BriefJsonIsBounded) {
  nlohmann::json j = nlohmann::json::array();
  nlohmann::json* inner = &j;
  for (int i = 0; i < 50; ++i) inner = &inner->emplace_back(nlohmann::json::array());
  EXPECT_EQ(BriefJson(j), "[[[[...]]]]");
  EXPECT_EQ(BriefJson(nlohmann::json{{"a", 1}}), R"({"a": 1})");
  EXPECT_LT(BriefJson(nlohmann::json(std::vector<int>(100000, 7))).size(), 100u);
  EXPECT_LT(BriefJson(nlohmann::json(std::string(1 << 20, 'y'))).size(), 120u);
  EXPECT_EQ(BriefText("abc", 80), "abc");
  EXPECT_EQ(BriefText("\xc3\xa9\xc3\xa9", 3), "\xc3\xa9... (4 bytes)");  // never cuts a character
}

TEST(Json, EscapeInvalidUtf8KeepsValidTextAndEscapesTheRest) {
  EXPECT_EQ(EscapeInvalidUtf8("plain /path \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "plain /path \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(EscapeInvalidUtf8("lib\xff.so"), "lib\\xFF.so");
  EXPECT_EQ(EscapeInvalidUtf8("\xc3"), "\\xC3");              // truncated sequence
  EXPECT_EQ(EscapeInvalidUtf8("\xed\xa0\x80"), "\\xED\\xA0\\x80");  // a UTF-16 surrogate
  EXPECT_EQ(EscapeInvalidUtf8("\xc0\xaf"), "\\xC0\\xAF");       // overlong
  nlohmann::json j = {{"path", "a\xfe"}, {"list", {"ok", "\x80"}}, {"k\xff", 1}};
  EscapeInvalidUtf8(&j);
  EXPECT_NO_THROW(j.dump());
  EXPECT_EQ(j["path"], "a\\xFE");
  EXPECT_EQ(j["list"][1], "\\x80");
  EXPECT_EQ(j["k\\xFF"], 1);
}

}  // namespace
}  // namespace oar
