// Freezes the layout of ABI 1.0 (and what 1.1 appended) on LP64 targets: a change here breaks every built plugin, so it needs a
// new major version (see oar/plugin/version.h).
#include <cstddef>

#include <gtest/gtest.h>

#include "oar/plugin/plugin.h"

#if defined(__LP64__)
// Common prefix of every crossing struct.
static_assert(offsetof(oar_plugin_api_t, struct_size) == 0);
static_assert(offsetof(oar_plugin_api_t, ext) == 8);
// Host table: the version-negotiation prefix is frozen across majors.
static_assert(offsetof(oar_host_api_t, abi_major) == 16);
static_assert(offsetof(oar_host_api_t, abi_minor) == 20);
static_assert(offsetof(oar_host_api_t, status_create) == 24);
static_assert(offsetof(oar_host_api_t, status_code) == 32);
static_assert(offsetof(oar_host_api_t, status_message) == 40);
static_assert(offsetof(oar_host_api_t, status_destroy) == 48);
static_assert(offsetof(oar_host_api_t, log) == 56);
static_assert(offsetof(oar_host_api_t, register_kernel) == 72);
static_assert(OAR_HOST_API_STRUCT_SIZE == 80);
// Plugin table.
static_assert(offsetof(oar_plugin_api_t, abi_major) == 16);
static_assert(offsetof(oar_plugin_api_t, name) == 24);
static_assert(offsetof(oar_plugin_api_t, initialize) == 48);
static_assert(offsetof(oar_plugin_api_t, device) == 64);
static_assert(offsetof(oar_plugin_api_t, kernel) == 72);
static_assert(offsetof(oar_plugin_api_t, profiler) == 104);
static_assert(OAR_PLUGIN_API_STRUCT_SIZE == 112);
// Device table: 30 slots after the prefix.
static_assert(offsetof(oar_device_api_t, device_count) == 16);
static_assert(offsetof(oar_device_api_t, malloc) == 40);
static_assert(offsetof(oar_device_api_t, memcpy_h2d) == 80);
static_assert(offsetof(oar_device_api_t, memcpy_h2d_async) == 120);
static_assert(offsetof(oar_device_api_t, stream_create) == 160);
static_assert(offsetof(oar_device_api_t, event_create) == 208);
static_assert(OAR_DEVICE_API_STRUCT_SIZE == 248);
// Array elements: frozen for the whole major.
static_assert(sizeof(oar_tensor_desc_t) == 56 && OAR_TENSOR_DESC_STRUCT_SIZE == 56);
static_assert(offsetof(oar_tensor_desc_t, data) == 16);
static_assert(offsetof(oar_tensor_desc_t, dtype) == 24);
static_assert(offsetof(oar_tensor_desc_t, rank) == 32);
static_assert(offsetof(oar_tensor_desc_t, shape) == 40);
static_assert(sizeof(oar_attr_t) == 48 && OAR_ATTR_STRUCT_SIZE == 48);
static_assert(offsetof(oar_attr_t, name) == 16);
static_assert(offsetof(oar_attr_t, type) == 24);
static_assert(offsetof(oar_attr_t, v) == 32);
// Kernel call and definition.
static_assert(offsetof(oar_kernel_call_t, op) == 16);
static_assert(offsetof(oar_kernel_call_t, stream) == 40);
static_assert(offsetof(oar_kernel_call_t, inputs) == 48);
static_assert(OAR_KERNEL_CALL_STRUCT_SIZE == 80);
static_assert(OAR_KERNEL_DEF_STRUCT_SIZE == 56);
static_assert(OAR_KERNEL_API_STRUCT_SIZE == 32);
static_assert(OAR_MEMORY_STATS_STRUCT_SIZE == 52);
static_assert(OAR_CCL_API_STRUCT_SIZE == 120);
static_assert(offsetof(oar_compiler_api_t, launch) == 48);
// ABI 1.1: typed kernel launches.
static_assert(offsetof(oar_compiler_api_t, launch_kernel) == 56);
static_assert(OAR_COMPILER_API_STRUCT_SIZE == 64);
static_assert(sizeof(oar_kernel_arg_t) == 24);
static_assert(offsetof(oar_kernel_arg_t, value) == 8);
static_assert(offsetof(oar_kernel_arg_t, size) == 16);
static_assert(offsetof(oar_launch_info_t, function) == 16);
static_assert(offsetof(oar_launch_info_t, grid) == 24);
static_assert(offsetof(oar_launch_info_t, block) == 36);
static_assert(offsetof(oar_launch_info_t, shared_bytes) == 48);
static_assert(offsetof(oar_launch_info_t, args) == 56);
static_assert(offsetof(oar_launch_info_t, num_args) == 64);
static_assert(offsetof(oar_launch_info_t, flops) == 72);
static_assert(OAR_LAUNCH_INFO_STRUCT_SIZE == 88 && OAR_LAUNCH_INFO_MIN_SIZE == 88);
static_assert(OAR_PROFILER_API_STRUCT_SIZE == 40);
static_assert(OAR_ACTIVITY_STRUCT_SIZE == 65);
#endif

// Frozen enumerator values.
static_assert(OAR_DTYPE_FLOAT32 == 1 && OAR_DTYPE_BOOL == 9);
static_assert(OAR_STATUS_RESOURCE_EXHAUSTED == 8 && OAR_STATUS_UNIMPLEMENTED == 12 &&
              OAR_STATUS_UNAVAILABLE == 14);
static_assert(OAR_FORMAT_PLAIN == 0 && OAR_FORMAT_NC1HWC0 == 1 && OAR_FORMAT_FRACTAL_NZ == 2);

TEST(AbiLayout, StructSizeMacroCountsUpToTheLastField) {
  struct S {
    size_t struct_size;
    const void* ext;
    char last;
  };
  EXPECT_EQ(OAR_STRUCT_SIZE(S, last), 17u);
  EXPECT_EQ(OAR_STRUCT_SIZE(oar_plugin_api_t, profiler), sizeof(oar_plugin_api_t));
}

TEST(AbiLayout, VersionIsOnePointOne) {
  EXPECT_EQ(OAR_PLUGIN_ABI_MAJOR, 1);
  EXPECT_EQ(OAR_PLUGIN_ABI_MINOR, 1);  // 1.1: the compiler table's launch_kernel (sdk/CHANGELOG.md)
}
