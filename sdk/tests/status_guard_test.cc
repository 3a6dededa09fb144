// The SDK guard must turn every exception into a status with the right code, so nothing crosses the ABI.
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "oar/plugin/cpp/status.hpp"
#include "oar/plugin/cpp/test_host.hpp"

using oar::sdk::testing::Result;
using oar::sdk::testing::Take;

TEST(Guard, ConvertsEachKindOfException) {
  oar::sdk::Host() = oar::sdk::testing::TestHost();
  EXPECT_EQ(oar::sdk::Guard([] {}), nullptr);

  oar_status_t* s = oar::sdk::Guard([] { throw oar::sdk::StatusError(OAR_STATUS_UNIMPLEMENTED, "no fp64"); });
  ASSERT_NE(s, nullptr);
  const Result a = Take(s);
  EXPECT_EQ(a.code, OAR_STATUS_UNIMPLEMENTED);
  EXPECT_EQ(a.message, "no fp64");

  s = oar::sdk::Guard([] { throw std::runtime_error("boom"); });
  ASSERT_NE(s, nullptr);
  const Result b = Take(s);
  EXPECT_EQ(b.code, OAR_STATUS_INTERNAL);
  EXPECT_NE(b.message.find("boom"), std::string::npos);

  s = oar::sdk::Guard([] { throw 42; });
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(Take(s).code, OAR_STATUS_INTERNAL);

  s = oar::sdk::Guard([]() -> oar_status_t* { return oar::sdk::MakeStatus(OAR_STATUS_UNAVAILABLE, "gone"); });
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(Take(s).code, OAR_STATUS_UNAVAILABLE);
}
