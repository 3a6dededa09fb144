// Oar plugin SDK — GoogleTest helpers over the test host (oar/plugin/cpp/test_host.hpp).
//
//   const oar_plugin_api_t* api = oar::sdk::testing::LoadOnce(PLUGIN_PATH).api;  // shared by every test
//   OAR_ASSERT_OK(api->device->malloc(0, 64, &p));   // fatal: the status is OK, else its code and message
//   OAR_EXPECT_OK(api->device->free(0, p));          // non-fatal
//
// The macros take an expression yielding oar_status_t* (from the test host) and destroy the status.
#ifndef OAR_PLUGIN_CPP_TEST_HOST_GTEST_HPP_
#define OAR_PLUGIN_CPP_TEST_HOST_GTEST_HPP_

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>

#include "oar/plugin/cpp/test_host.hpp"

namespace oar::sdk::testing {

/// The plugin at `path` loaded with TestHost() by the first caller, and the same LoadedPlugin for every
/// later one (a plugin is initialised once per process, as the runtime does). A failed load is a test
/// failure, reported once, in the test that loaded it, with the failing step; `api` is then NULL.
inline const LoadedPlugin& LoadOnce(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, LoadedPlugin> loaded;  // a map: references stay valid as it grows
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(path);
  if (it == loaded.end()) {
    it = loaded.emplace(path, LoadPlugin(path.c_str())).first;
    EXPECT_TRUE(it->second.ok()) << "loading " << path << ": " << it->second.error;
  }
  return it->second;
}

}  // namespace oar::sdk::testing

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
