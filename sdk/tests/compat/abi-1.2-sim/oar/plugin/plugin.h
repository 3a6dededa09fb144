/* Oar plugin ABI — the entry point, the host's callback table and the plugin's function table.
 * Include this one header to get the whole ABI.
 *
 * Loading sequence (all on one host thread):
 *  1. The host loads the library and looks up the single exported symbol OAR_PLUGIN_ENTRY_SYMBOL.
 *  2. It calls oar_plugin_get_api(host, &api). The plugin keeps `host` (valid until the process ends),
 *     checks host->abi_major against its own and refuses a different major with FAILED_PRECONDITION
 *     naming both versions; otherwise it returns its static table. No device work happens here.
 *  3. The host checks api->abi_major and every struct_size against its minimum, and refuses the plugin
 *     (naming the file, both versions and the reason) when they do not fit.
 *  4. The host calls api->initialize(), then kernel->register_kernels(registrar).
 *  5. The host may call api->shutdown() (optional) after its last use of the plugin. It may also never
 *     call it (a process that exits keeps its plugins loaded to the end): a plugin must not depend on
 *     shutdown for correctness, only use it to release resources early.
 */
#ifndef OAR_PLUGIN_PLUGIN_H_
#define OAR_PLUGIN_PLUGIN_H_

#include "oar/plugin/ccl.h"
#include "oar/plugin/compiler.h"
#include "oar/plugin/device.h"
#include "oar/plugin/kernel.h"
#include "oar/plugin/profiler.h"
#include "oar/plugin/status.h"
#include "oar/plugin/types.h"
#include "oar/plugin/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OAR_PLUGIN_ENTRY_SYMBOL "oar_plugin_get_api"

typedef enum oar_log_level {
  OAR_LOG_ERROR = 0,
  OAR_LOG_WARNING = 1,
  OAR_LOG_INFO = 2,
  OAR_LOG_DEBUG = 3,
  OAR_LOG_TRACE = 4
} oar_log_level;

/* ===================================================================================================
 * Host -> plugin: callbacks the host offers. Owned by the host, valid until the process ends. The
 * fields up to and including `status_destroy` keep their offsets in every future major version, so a
 * plugin can always report a version mismatch.
 * =================================================================================================== */
typedef struct oar_host_api_t {
  size_t struct_size;
  const void* ext;
  uint32_t abi_major; /* the ABI the host was built against */
  uint32_t abi_minor;
  /* Create a status; `message` is copied. Thread-safe. */
  oar_status_t* (*status_create)(int32_t code, const char* message);
  int32_t (*status_code)(const oar_status_t* status);
  /* Valid until the status is destroyed. */
  const char* (*status_message)(const oar_status_t* status);
  void (*status_destroy)(oar_status_t* status);
  /* Route a message into the host log (filtered by OAR_LOG_LEVEL). `plugin` is the plugin's name. */
  void (*log)(int32_t level, const char* plugin, const char* message);
  /* True when the host would print a message at `level`: skip formatting otherwise. */
  bool (*log_enabled)(int32_t level);
  /* Add one kernel; only valid during oar_kernel_api_t.register_kernels. ALREADY_EXISTS for a
   * duplicate key, INVALID_ARGUMENT for a malformed definition. */
  oar_status_t* (*register_kernel)(oar_kernel_registrar_t* registrar, const oar_kernel_def_t* def);
} oar_host_api_t;
#define OAR_HOST_API_STRUCT_SIZE OAR_STRUCT_SIZE(oar_host_api_t, register_kernel)

/* ===================================================================================================
 * Plugin -> host: the plugin's function table. Owned by the plugin, static for the process.
 * =================================================================================================== */
typedef struct oar_plugin_api_t {
  size_t struct_size;
  const void* ext;
  uint32_t abi_major; /* the ABI the plugin was built against: OAR_PLUGIN_ABI_MAJOR/MINOR */
  uint32_t abi_minor;
  const char* name;    /* device type, [a-z][a-z0-9_]*, e.g. "cuda"; unique among loaded plugins */
  const char* version; /* the plugin's own version, e.g. "1.4.2" */
  const char* vendor;  /* who ships it */
  /* Bring up the plugin (driver init etc.). An error refuses the plugin; "no device present" is not an
   * error: report it from device_count. */
  oar_status_t* (*initialize)(void);
  /* (optional) Release everything; no other slot is called afterwards. */
  void (*shutdown)(void);
  const oar_device_api_t* device;     /* required */
  const oar_kernel_api_t* kernel;     /* required */
  const oar_format_api_t* format;     /* (optional) private storage formats */
  const oar_ccl_api_t* ccl;           /* (optional) collectives */
  const oar_compiler_api_t* compiler; /* (optional) runtime compilation for CINN */
  const oar_profiler_api_t* profiler; /* (optional) activity records */
  /* ---- added in 1.2 (SIMULATED by sdk/tests/compat) ---- */
  oar_status_t* (*compat_sim_plugin_slot)(void); /* (optional) only 1.2 plugins have it */
} oar_plugin_api_t;
#define OAR_PLUGIN_API_STRUCT_SIZE OAR_STRUCT_SIZE(oar_plugin_api_t, compat_sim_plugin_slot)
#define OAR_PLUGIN_API_MIN_SIZE OAR_STRUCT_SIZE(oar_plugin_api_t, profiler)

/* The one exported function. Returns NULL and sets *api on success. */
typedef oar_status_t* (*oar_plugin_get_api_fn)(const oar_host_api_t* host,
                                               const oar_plugin_api_t** api /* out */);

#if defined(_WIN32)
#define OAR_PLUGIN_EXPORT __declspec(dllexport)
#else
#define OAR_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OAR_PLUGIN_PLUGIN_H_ */
