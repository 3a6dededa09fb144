// The SDK's test host (oar/plugin/cpp/test_host.hpp) must check registrations as the runtime does and say why
// loading failed instead of crashing: plugin authors rely on it in their own tests.
#include <gtest/gtest.h>

#include <string>

#include "oar/plugin/cpp/test_host_gtest.hpp"

namespace {

using oar::sdk::testing::Result;
using oar::sdk::testing::Take;
using oar::sdk::testing::TestHost;

oar_status_t* Dummy(const oar_kernel_call_t*) { return nullptr; }

oar_kernel_def_t Def(const char* op, const int32_t* dtypes, int32_t n, int32_t format = OAR_FORMAT_PLAIN) {
  oar_kernel_def_t d{};
  d.struct_size = OAR_KERNEL_DEF_STRUCT_SIZE;
  d.op = op;
  d.dtypes = dtypes;
  d.num_dtypes = n;
  d.format = format;
  d.fn = Dummy;
  d.kernel_data = &d;
  return d;
}

TEST(TestHost, RecordsCopiesOfEachRegistrationAndRefusesWhatTheRuntimeRefuses) {
  oar_kernel_registrar_t r;
  int32_t dtypes[] = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32};
  std::string op = "add";
  oar_kernel_def_t add = Def(op.c_str(), dtypes, 3);
  OAR_ASSERT_OK(TestHost()->register_kernel(&r, &add));
  op = "xyz";  // the definition is only valid during the call: the registrar keeps copies
  dtypes[0] = OAR_DTYPE_INT64;
  ASSERT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(r.entries[0].op, "add");
  EXPECT_EQ(r.entries[0].kernel_data, &add);
  const std::vector<int32_t> f32x3(3, OAR_DTYPE_FLOAT32);
  EXPECT_EQ(r.Find("add", f32x3).fn, &Dummy);
  EXPECT_EQ(r.Find("add", f32x3, OAR_FORMAT_NC1HWC0).fn, nullptr);

  const int32_t same[] = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32};
  oar_kernel_def_t twice = Def("add", same, 3);
  const Result dup = Take(TestHost()->register_kernel(&r, &twice));
  EXPECT_EQ(dup.code, OAR_STATUS_ALREADY_EXISTS);
  EXPECT_NE(dup.message.find("'add'"), std::string::npos) << dup.message;
  oar_kernel_def_t other_format = Def("add", same, 3, OAR_FORMAT_NC1HWC0);
  OAR_EXPECT_OK(TestHost()->register_kernel(&r, &other_format));

  oar_kernel_def_t no_fn = Def("mul", same, 3);
  no_fn.fn = nullptr;
  EXPECT_EQ(Take(TestHost()->register_kernel(&r, &no_fn)).code, OAR_STATUS_INVALID_ARGUMENT);
  oar_kernel_def_t no_op = Def("", same, 3);
  EXPECT_EQ(Take(TestHost()->register_kernel(&r, &no_op)).code, OAR_STATUS_INVALID_ARGUMENT);
  oar_kernel_def_t small = Def("mul", same, 3);
  small.struct_size = sizeof(size_t);
  EXPECT_EQ(Take(TestHost()->register_kernel(&r, &small)).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(r.entries.size(), 2u);
}

TEST(TestHost, StatusesCarryCodeAndMessage) {
  EXPECT_TRUE(Take(nullptr).ok());
  const Result r = Take(TestHost()->status_create(OAR_STATUS_UNAVAILABLE, "no driver"));
  EXPECT_EQ(r.code, OAR_STATUS_UNAVAILABLE);
  EXPECT_EQ(r.message, "no driver");
  const oar_host_api_t future = oar::sdk::testing::MakeTestHost(OAR_PLUGIN_ABI_MAJOR + 1, 7);
  EXPECT_EQ(future.abi_major, static_cast<uint32_t>(OAR_PLUGIN_ABI_MAJOR + 1));
  EXPECT_EQ(future.abi_minor, 7u);
}

TEST(TestHost, LoadingAMissingLibraryNamesTheStep) {
  const oar::sdk::testing::LoadedPlugin p = oar::sdk::testing::LoadPlugin("/nonexistent/liboar_plugin_none.so");
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.api, nullptr);
  EXPECT_EQ(p.error.rfind("dlopen: ", 0), 0u) << p.error;
  EXPECT_NE(p.error.find("liboar_plugin_none.so"), std::string::npos) << p.error;
}

}  // namespace
