// Test harness for the simulator plugins: the SDK's test host (oar/plugin/cpp/test_host.hpp) loads a plugin
// with dlopen and drives it through its ABI tables only; here are descriptors, calls and attributes for
// driving it, and running a scenario in a forked child process (for environment-dependent set-ups such as
// fault injection).
// Header-only, for tests.
#ifndef OAR_PLUGINS_COMMON_SIM_SIM_TEST_UTIL_H_
#define OAR_PLUGINS_COMMON_SIM_SIM_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/cpp/test_host_gtest.hpp"
#include "oar/plugin/plugin.h"
#include "plugins/common/sim/child_process.h"

namespace oar::simtest {

using sdk::testing::Result;
using sdk::testing::Take;
using Plugin = sdk::testing::LoadedPlugin;

/// Load `path` (dlopen, entry point, initialize, register_kernels) with the SDK's test host.
inline Plugin Load(const char* path) { return sdk::testing::LoadPlugin(path); }

/// A dense tensor descriptor with its own shape and strides storage.
struct Desc {
  std::vector<int64_t> shape, strides;
  oar_tensor_desc_t d{};
  Desc(void* data, int32_t dtype, std::vector<int64_t> s, std::vector<int64_t> st = {},
       int32_t format = OAR_FORMAT_PLAIN)
      : shape(std::move(s)), strides(std::move(st)) {
    if (strides.empty()) {
      strides.resize(shape.size());
      int64_t e = 1;
      for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = e;
        e *= shape[i];
      }
    }
    d.struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
    d.data = data;
    d.dtype = dtype;
    d.format = format;
    d.rank = static_cast<int32_t>(shape.size());
    d.shape = shape.data();
    d.strides = strides.data();
  }
  Desc(const Desc& o) : Desc(o.d.data, o.d.dtype, o.shape, o.strides, o.d.format) {}
};

/// A kernel call over descriptors that it owns.
struct Call {
  std::vector<oar_tensor_desc_t> in, out;
  std::vector<oar_attr_t> attrs;
  oar_kernel_call_t c{};
  Call(const char* op, int32_t device, oar_stream_t stream, const std::vector<const Desc*>& inputs,
       const std::vector<const Desc*>& outputs, std::vector<oar_attr_t> a = {}, void* kernel_data = nullptr)
      : attrs(std::move(a)) {
    for (const Desc* d : inputs) in.push_back(d->d);
    for (const Desc* d : outputs) out.push_back(d->d);
    c.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
    c.op = op;
    c.device = device;
    c.num_inputs = static_cast<int32_t>(in.size());
    c.num_outputs = static_cast<int32_t>(out.size());
    c.num_attrs = static_cast<int32_t>(attrs.size());
    c.stream = stream;
    c.inputs = in.data();
    c.outputs = out.data();
    c.attrs = attrs.data();
    c.kernel_data = kernel_data;
  }
};

inline oar_attr_t IntsAttr(const char* name, const std::vector<int64_t>& v) {
  oar_attr_t a{};
  a.struct_size = OAR_ATTR_STRUCT_SIZE;
  a.name = name;
  a.type = OAR_ATTR_INTS;
  a.v.ints.data = v.data();
  a.v.ints.size = v.size();
  return a;
}
inline oar_attr_t IntAttr(const char* name, int64_t v) {
  oar_attr_t a{};
  a.struct_size = OAR_ATTR_STRUCT_SIZE;
  a.name = name;
  a.type = OAR_ATTR_INT;
  a.v.i = v;
  return a;
}
inline oar_attr_t FloatAttr(const char* name, double v) {
  oar_attr_t a{};
  a.struct_size = OAR_ATTR_STRUCT_SIZE;
  a.name = name;
  a.type = OAR_ATTR_FLOAT;
  a.v.f = v;
  return a;
}

/// The attribute called `name` of device `device`, or nullptr.
inline const oar_attr_t* FindDeviceAttr(const Plugin& p, int32_t device, std::string_view name) {
  const oar_attr_t* attrs = nullptr;
  int32_t n = 0;
  if (!Take(p.dev()->device_attributes(device, &attrs, &n)).ok()) return nullptr;
  for (int32_t i = 0; i < n; ++i) {
    if (name == attrs[i].name) return &attrs[i];
  }
  return nullptr;
}

}  // namespace oar::simtest

#endif  // OAR_PLUGINS_COMMON_SIM_SIM_TEST_UTIL_H_
