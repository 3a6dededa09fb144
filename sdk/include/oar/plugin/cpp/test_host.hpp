// Oar plugin SDK — a test host for plugin unit tests: load a plugin through its ABI exactly as the Oar
// runtime does (dlopen, the one entry point, initialize, register_kernels), without linking the runtime.
//
// What it provides (namespace oar::sdk::testing):
//   * MakeTestHost(major, minor) / TestHost(): an oar_host_api_t whose statuses live on the heap, whose log
//     is silent, and whose register_kernel records every kernel (op, dtypes, format, fn, kernel_data) in the
//     oar_kernel_registrar_t below, with the runtime's checks (malformed definition: INVALID_ARGUMENT;
//     the same (op, dtypes, format) twice: ALREADY_EXISTS). Set the ABI version for handshake tests.
//   * Take(status): the code and message of a status (code 0 for OK), destroying it.
//   * LoadPlugin(path, host): a LoadedPlugin with the API table and the registered kernels, or `error`
//     saying which step failed and why. Nothing aborts.
// GoogleTest helpers (OAR_ASSERT_OK, OAR_EXPECT_OK, LoadOnce) live in oar/plugin/cpp/test_host_gtest.hpp.
//
// One definition per program: this header DEFINES the host-owned opaque types `struct oar_status_t` and
// `struct oar_kernel_registrar_t` (a host owns them; here the test is the host). Every function is inline,
// so any number of translation units of one test program may include it. Do not include it in a program
// that also links the Oar runtime (oar::core): there the runtime is the host and defines those types.
//
// Header-only, C++17, POSIX (dlopen; link ${CMAKE_DL_LIBS}). Thread-safety: status calls are thread-safe;
// registration happens on one thread during register_kernels, as the ABI says.
#ifndef OAR_PLUGIN_CPP_TEST_HOST_HPP_
#define OAR_PLUGIN_CPP_TEST_HOST_HPP_

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "oar/plugin/plugin.h"

/// A status as the test host creates it (the definition of the ABI's opaque type).
struct oar_status_t {
  int32_t code;
  std::string message;
};

namespace oar::sdk::testing {

/// One kernel as the plugin registered it. `op` and `dtypes` are copies (the definition is only valid
/// during the register_kernel call); `fn` and `kernel_data` are the plugin's own pointers.
struct Registration {
  std::string op;
  std::vector<int32_t> dtypes;
  int32_t format = OAR_FORMAT_PLAIN;
  oar_kernel_fn_t fn = nullptr;
  void* kernel_data = nullptr;
};

}  // namespace oar::sdk::testing

/// The kernels a plugin registered, in registration order (the definition of the ABI's opaque type).
struct oar_kernel_registrar_t {
  std::vector<oar::sdk::testing::Registration> entries;

  /// The kernel registered under (op, dtypes, format), or a Registration with fn == nullptr.
  oar::sdk::testing::Registration Find(std::string_view op, const std::vector<int32_t>& dtypes,
                                       int32_t format = OAR_FORMAT_PLAIN) const {
    for (const auto& e : entries) {
      if (e.op == op && e.dtypes == dtypes && e.format == format) return e;
    }
    return {std::string(op), dtypes, format, nullptr, nullptr};
  }
};

namespace oar::sdk::testing {

// ---- statuses -------------------------------------------------------------------------------------------

/// The code and message of a status; code 0 (OAR_STATUS_OK) for a NULL status.
struct Result {
  int32_t code = OAR_STATUS_OK;
  std::string message;
  bool ok() const { return code == OAR_STATUS_OK; }
};

/// The code and message of `status` (a NULL status is OK), destroying it. Only for statuses created by this
/// header's host.
inline Result Take(oar_status_t* status) {
  if (status == nullptr) return {};
  Result r{status->code, std::move(status->message)};
  delete status;
  return r;
}

// ---- the host table -------------------------------------------------------------------------------------

/// The test host's register_kernel: the runtime's checks, then a copy of the definition.
inline oar_status_t* RecordKernel(oar_kernel_registrar_t* registrar, const oar_kernel_def_t* def) {
  if (registrar == nullptr || def == nullptr) {
    return new oar_status_t{OAR_STATUS_INVALID_ARGUMENT, "register_kernel: NULL registrar or definition"};
  }
  if (def->struct_size < OAR_KERNEL_DEF_MIN_SIZE) {
    return new oar_status_t{
        OAR_STATUS_INVALID_ARGUMENT,
        "kernel definition struct_size " + std::to_string(def->struct_size) + " is smaller than the ABI 1.0 size"};
  }
  if (def->op == nullptr || def->op[0] == '\0') {
    return new oar_status_t{OAR_STATUS_INVALID_ARGUMENT, "kernel definition has no op name"};
  }
  const std::string op = def->op;
  if (def->fn == nullptr) {
    return new oar_status_t{OAR_STATUS_INVALID_ARGUMENT, "kernel for op '" + op + "' has a NULL function"};
  }
  if (def->num_dtypes < 0 || (def->num_dtypes > 0 && def->dtypes == nullptr)) {
    return new oar_status_t{OAR_STATUS_INVALID_ARGUMENT,
                            "kernel for op '" + op + "' has " + std::to_string(def->num_dtypes) + " key dtypes"};
  }
  Registration r{op, std::vector<int32_t>(def->dtypes, def->dtypes + def->num_dtypes), def->format, def->fn,
                 def->kernel_data};
  if (registrar->Find(r.op, r.dtypes, r.format).fn != nullptr) {
    return new oar_status_t{OAR_STATUS_ALREADY_EXISTS, "kernel for op '" + op + "' is registered twice"};
  }
  registrar->entries.push_back(std::move(r));
  return nullptr;
}

/// A host table that announces ABI `abi_major`.`abi_minor` (another major: a handshake test). Statuses are
/// heap objects (read them with Take); log messages are dropped. A plugin keeps the table it accepted until
/// the process ends: give a plugin only a table that lives that long (TestHost(), or a static).
inline oar_host_api_t MakeTestHost(uint32_t abi_major = OAR_PLUGIN_ABI_MAJOR,
                                   uint32_t abi_minor = OAR_PLUGIN_ABI_MINOR) {
  oar_host_api_t h{};
  h.struct_size = OAR_HOST_API_STRUCT_SIZE;
  h.abi_major = abi_major;
  h.abi_minor = abi_minor;
  h.status_create = [](int32_t code, const char* message) {
    return new oar_status_t{code, message != nullptr ? message : ""};
  };
  h.status_code = [](const oar_status_t* s) { return s->code; };
  h.status_message = [](const oar_status_t* s) { return s->message.c_str(); };
  h.status_destroy = [](oar_status_t* s) { delete s; };
  h.log = [](int32_t, const char*, const char*) {};
  h.log_enabled = [](int32_t) { return false; };
  h.register_kernel = RecordKernel;
  return h;
}

/// The test host at the SDK's own ABI version; lives until the process ends.
inline const oar_host_api_t* TestHost() {
  static const oar_host_api_t host = MakeTestHost();
  return &host;
}

// ---- loading a plugin -----------------------------------------------------------------------------------

/// A plugin loaded through its ABI. The library is never unloaded (the plugin keeps the host table and
/// may have static state); loading the same path again returns the same library.
struct LoadedPlugin {
  oar_plugin_get_api_fn entry = nullptr;  ///< the exported OAR_PLUGIN_ENTRY_SYMBOL (handshake tests call it)
  const oar_plugin_api_t* api = nullptr;  ///< NULL unless get_api and initialize succeeded
  oar_kernel_registrar_t kernels;         ///< what register_kernels registered
  std::string error;                      ///< "" when every step worked; else "<step>: <why>"

  bool ok() const { return error.empty(); }
  const oar_device_api_t* dev() const { return api->device; }
  /// The kernel registered under (op, dtypes, format), or a Registration with fn == nullptr.
  Registration Find(std::string_view op, const std::vector<int32_t>& dtypes, int32_t format = OAR_FORMAT_PLAIN) const {
    return kernels.Find(op, dtypes, format);
  }
};

/// Load the plugin at `path`: dlopen(RTLD_NOW | RTLD_LOCAL), dlsym(OAR_PLUGIN_ENTRY_SYMBOL), get_api with
/// `host` (which must live until the process ends), initialize, then register_kernels into
/// LoadedPlugin::kernels. Stops at the first failing step and says which in `error`.
inline LoadedPlugin LoadPlugin(const char* path, const oar_host_api_t* host = TestHost()) {
  LoadedPlugin p;
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    p.error = std::string("dlopen: ") + (why != nullptr ? why : path);
    return p;
  }
  p.entry = reinterpret_cast<oar_plugin_get_api_fn>(dlsym(library, OAR_PLUGIN_ENTRY_SYMBOL));
  if (p.entry == nullptr) {
    p.error = std::string("dlsym: ") + path + " exports no " OAR_PLUGIN_ENTRY_SYMBOL;
    return p;
  }
  const oar_plugin_api_t* api = nullptr;
  Result r = Take(p.entry(host, &api));
  if (!r.ok()) {
    p.error = "get_api: " + r.message;
    return p;
  }
  if (api == nullptr || api->struct_size < OAR_PLUGIN_API_MIN_SIZE || api->device == nullptr ||
      api->kernel == nullptr) {
    p.error = "get_api: no table, a table smaller than the ABI minimum, or no device or kernel table";
    return p;
  }
  r = Take(api->initialize());
  if (!r.ok()) {
    p.error = "initialize: " + r.message;
    return p;
  }
  p.api = api;
  r = Take(api->kernel->register_kernels(&p.kernels));
  if (!r.ok()) p.error = "register_kernels: " + r.message;
  return p;
}

}  // namespace oar::sdk::testing

#endif  // OAR_PLUGIN_CPP_TEST_HOST_HPP_
