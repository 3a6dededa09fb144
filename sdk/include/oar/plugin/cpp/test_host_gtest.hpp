// Oar plugin SDK — GoogleTest assertions on statuses from the test host (oar/plugin/cpp/test_host.hpp).
//
//   OAR_ASSERT_OK(dev->malloc(0, 64, &p));   // fatal: the status is OK, else its code and message
//   OAR_EXPECT_OK(dev->free(0, p));          // non-fatal
//
// Each takes an expression yielding oar_status_t* (from the test host) and destroys the status.
#ifndef OAR_PLUGIN_CPP_TEST_HOST_GTEST_HPP_
#define OAR_PLUGIN_CPP_TEST_HOST_GTEST_HPP_

#include <gtest/gtest.h>

#include "oar/plugin/cpp/test_host.hpp"

#define OAR_ASSERT_OK(expr)                                                     \
  do {                                                                          \
    const ::oar::sdk::testing::Result oar_r_ = ::oar::sdk::testing::Take(expr); \
    ASSERT_EQ(oar_r_.code, 0) << oar_r_.message;                                \
  } while (0)
#define OAR_EXPECT_OK(expr)                                                     \
  do {                                                                          \
    const ::oar::sdk::testing::Result oar_r_ = ::oar::sdk::testing::Take(expr); \
    EXPECT_EQ(oar_r_.code, 0) << oar_r_.message;                                \
  } while (0)

#endif  // OAR_PLUGIN_CPP_TEST_HOST_GTEST_HPP_
