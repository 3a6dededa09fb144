// Test harness for the simulator plugins: a minimal host (status objects, a registrar that records
// every kernel), loading a plugin with dlopen and driving it through its ABI tables only, and running a
// scenario in a forked child process (for environment-dependent set-ups such as fault injection).
// Header-only, for tests.
#ifndef OAR_PLUGINS_COMMON_SIM_SIM_TEST_UTIL_H_
#define OAR_PLUGINS_COMMON_SIM_SIM_TEST_UTIL_H_

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/plugin.h"
#include "plugins/common/sim/child_process.h"

struct oar_status_t {
  int32_t code;
  std::string message;
};

struct oar_kernel_registrar_t {
  struct Entry {
    std::string op;
    std::vector<int32_t> dtypes;
    int32_t format;
    oar_kernel_fn_t fn;
    void* data;
  };
  std::vector<Entry> entries;
};

namespace oar::simtest {

inline oar_host_api_t MakeHost() {
  oar_host_api_t h{};
  h.struct_size = OAR_HOST_API_STRUCT_SIZE;
  h.abi_major = OAR_PLUGIN_ABI_MAJOR;
  h.abi_minor = OAR_PLUGIN_ABI_MINOR;
  h.status_create = [](int32_t code, const char* m) { return new oar_status_t{code, m ? m : ""}; };
  h.status_code = [](const oar_status_t* s) { return s->code; };
  h.status_message = [](const oar_status_t* s) { return s->message.c_str(); };
  h.status_destroy = [](oar_status_t* s) { delete s; };
  h.log = [](int32_t, const char*, const char*) {};
  h.log_enabled = [](int32_t) { return false; };
  h.register_kernel = [](oar_kernel_registrar_t* r, const oar_kernel_def_t* def) -> oar_status_t* {
    r->entries.push_back({def->op, std::vector<int32_t>(def->dtypes, def->dtypes + def->num_dtypes), def->format,
                          def->fn, def->kernel_data});
    return nullptr;
  };
  return h;
}

/// Code and message of a status (code 0 for OK), destroying it.
struct Result {
  int32_t code = 0;
  std::string message;
  bool ok() const { return code == 0; }
};
inline Result Take(oar_status_t* s) {
  if (s == nullptr) return {};
  Result r{s->code, s->message};
  delete s;
  return r;
}

#define SIM_ASSERT_OK(expr)                                       \
  do {                                                            \
    const ::oar::simtest::Result r_ = ::oar::simtest::Take(expr); \
    ASSERT_EQ(r_.code, 0) << r_.message;                          \
  } while (0)
#define SIM_EXPECT_OK(expr)                                       \
  do {                                                            \
    const ::oar::simtest::Result r_ = ::oar::simtest::Take(expr); \
    EXPECT_EQ(r_.code, 0) << r_.message;                          \
  } while (0)

/// A plugin loaded through its entry point, initialised, with its kernels registered.
struct Plugin {
  const oar_plugin_api_t* api = nullptr;
  oar_kernel_registrar_t kernels;
  std::string error;  // why loading failed ("" when it worked)

  const oar_device_api_t* dev() const { return api->device; }
  /// The kernel registered under (op, dtypes, format), or an entry with fn == nullptr.
  oar_kernel_registrar_t::Entry Find(std::string_view op, const std::vector<int32_t>& dtypes,
                                     int32_t format = OAR_FORMAT_PLAIN) const {
    for (const auto& e : kernels.entries) {
      if (e.op == op && e.dtypes == dtypes && e.format == format) return e;
    }
    return {std::string(op), dtypes, format, nullptr, nullptr};
  }
};

/// Load `path` (dlopen, entry point, initialize, register_kernels). The host table lives forever.
inline Plugin Load(const char* path) {
  static const oar_host_api_t host = MakeHost();
  Plugin p;
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    p.error = std::string("dlopen: ") + dlerror();
    return p;
  }
  auto entry = reinterpret_cast<oar_plugin_get_api_fn>(dlsym(library, OAR_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    p.error = "no entry point";
    return p;
  }
  Result r = Take(entry(&host, &p.api));
  if (!r.ok()) {
    p.error = "get_api: " + r.message;
    return p;
  }
  r = Take(p.api->initialize());
  if (!r.ok()) {
    p.error = "initialize: " + r.message;
    p.api = nullptr;
    return p;
  }
  r = Take(p.api->kernel->register_kernels(&p.kernels));
  if (!r.ok()) p.error = "register_kernels: " + r.message;
  return p;
}

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
