/* A small working device plugin in plain C99, compiled against whichever ABI header tree the include path
 * names (and nothing else: no SDK C++ helpers). sdk/tests/compat builds it several times:
 *
 *   compat_v10     against the frozen 1.0 headers (abi-1.0/). Each table is followed in memory by a
 *                  non-NULL "poison" pointer that abort()s, exactly where a later minor appends its slot
 *                  (1.1: the compiler table's launch_kernel; the simulated 1.2: the device and plugin
 *                  tables): a host that read past struct_size would find it (and the test would die).
 *   compat_v12     against the simulated 1.2 headers (abi-1.2-sim/), with the slots 1.2 added filled by
 *                  functions that abort(): a 1.1 host must never call them.
 *   compat_major0  reports ABI major 0 in its table            -> refused, message names 0.x and 1.x
 *   compat_major2  refuses the host in its entry point, as a 2.0 plugin built with the SDK would
 *   compat_small_device  a device table shorter than ABI 1.0's -> refused cleanly
 *
 * The device keeps its memory in host RAM and runs everything synchronously; it registers one kernel
 * ("fill" float32) so that registration through the host table is exercised too. Built against 1.0 it
 * also has a 1.0 compiler table, which a 1.1 host must not use to launch: 1.0's untyped `launch` cannot
 * say what its arguments are (it abort()s here), and the table ends before launch_kernel. Its compile
 * keeps no code (modules and functions are names only): the fixture proves version handling, not a
 * compiler.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oar/plugin/plugin.h"

#ifndef COMPAT_NAME
#error "COMPAT_NAME (the device type name) must be defined by the build"
#endif
#if defined(COMPAT_EXPECT_MINOR) && OAR_PLUGIN_ABI_MINOR != COMPAT_EXPECT_MINOR
#error "compiled against the wrong ABI header tree"
#endif

static const oar_host_api_t* g_host;

static oar_status_t* Fail(int32_t code, const char* message) { return g_host->status_create(code, message); }
static oar_status_t* CheckDevice(int32_t device) {
  return device == 0 ? NULL : Fail(OAR_STATUS_INVALID_ARGUMENT, COMPAT_NAME ": only device 0 exists");
}

/* ---- device ------------------------------------------------------------------------------------------ */
static oar_status_t* DeviceCount(int32_t* count) {
  *count = 1;
  return NULL;
}
static const oar_attr_t kAttrs[] = {
    {OAR_ATTR_STRUCT_SIZE, NULL, OAR_DEVICE_ATTR_NAME, OAR_ATTR_STRING, 0, {.s = {"compat device", 13}}},
    {OAR_ATTR_STRUCT_SIZE, NULL, OAR_DEVICE_ATTR_VENDOR, OAR_ATTR_STRING, 0, {.s = {"Oar tests", 9}}},
    {OAR_ATTR_STRUCT_SIZE, NULL, OAR_DEVICE_ATTR_TOTAL_MEMORY, OAR_ATTR_INT, 0, {.i = 1 << 30}},
    {OAR_ATTR_STRUCT_SIZE, NULL, OAR_DEVICE_ATTR_ALIGNMENT, OAR_ATTR_INT, 0, {.i = 16}},
};
static oar_status_t* Attributes(int32_t device, const oar_attr_t** attrs, int32_t* n) {
  *attrs = kAttrs;
  *n = (int32_t)(sizeof kAttrs / sizeof kAttrs[0]);
  return CheckDevice(device);
}
static oar_status_t* Synchronize(int32_t device) { return CheckDevice(device); }
static oar_status_t* Malloc(int32_t device, size_t size, void** ptr) {
  *ptr = malloc(size ? size : 1); /* glibc: 16-byte aligned, the "alignment" attribute */
  if (*ptr == NULL) return Fail(OAR_STATUS_RESOURCE_EXHAUSTED, COMPAT_NAME ": out of memory");
  return CheckDevice(device);
}
static oar_status_t* Free(int32_t device, void* ptr) {
  free(ptr);
  return CheckDevice(device);
}
/* Reports only the limit: the other figures keep their validity flag false. */
static oar_status_t* MemoryStats(int32_t device, oar_memory_stats_t* stats) {
  if (stats->struct_size < OAR_MEMORY_STATS_STRUCT_SIZE) {
    return Fail(OAR_STATUS_INVALID_ARGUMENT, COMPAT_NAME ": memory_stats struct too small");
  }
  stats->bytes_limit = 1 << 30;
  stats->bytes_limit_is_set = true;
  return CheckDevice(device);
}
static oar_status_t* Copy(int32_t device, void* dst, const void* src, size_t size) {
  if (size) memmove(dst, src, size);
  return CheckDevice(device);
}
static oar_status_t* Set(int32_t device, void* dst, uint8_t value, size_t size) {
  if (size) memset(dst, value, size);
  return CheckDevice(device);
}
/* Streams and events: the device is synchronous, so every stream is idle and every event complete. */
static oar_status_t* StreamCreate(int32_t device, oar_stream_t* stream) {
  *stream = (oar_stream_t)malloc(1);
  return CheckDevice(device);
}
static oar_status_t* StreamDestroy(int32_t device, oar_stream_t stream) {
  free(stream);
  return CheckDevice(device);
}
static oar_status_t* StreamSynchronize(int32_t device, oar_stream_t stream) {
  (void)stream;
  return CheckDevice(device);
}
static oar_status_t* StreamQuery(int32_t device, oar_stream_t stream, bool* idle) {
  (void)stream;
  *idle = true;
  return CheckDevice(device);
}
static oar_status_t* StreamWaitEvent(int32_t device, oar_stream_t stream, oar_event_t event) {
  (void)stream;
  (void)event;
  return CheckDevice(device);
}
static oar_status_t* StreamAddCallback(int32_t device, oar_stream_t stream, oar_host_fn_t fn, void* data) {
  (void)stream;
  fn(data); /* the stream is always idle: run it now, as the ABI allows */
  return CheckDevice(device);
}
static oar_status_t* EventCreate(int32_t device, oar_event_t* event) {
  *event = (oar_event_t)malloc(1);
  return CheckDevice(device);
}
static oar_status_t* EventDestroy(int32_t device, oar_event_t event) {
  free(event);
  return CheckDevice(device);
}
static oar_status_t* EventRecord(int32_t device, oar_event_t event, oar_stream_t stream) {
  (void)event;
  (void)stream;
  return CheckDevice(device);
}
static oar_status_t* EventQuery(int32_t device, oar_event_t event, bool* complete) {
  (void)event;
  *complete = true;
  return CheckDevice(device);
}
static oar_status_t* EventSynchronize(int32_t device, oar_event_t event) {
  (void)event;
  return CheckDevice(device);
}

/* ---- kernels ----------------------------------------------------------------------------------------- */
static oar_status_t* FillF32(const oar_kernel_call_t* call) {
  const oar_tensor_desc_t* out = &call->outputs[0];
  double value = 0;
  int64_t n = 1;
  int32_t i;
  for (i = 0; i < call->num_attrs; ++i) {
    if (strcmp(call->attrs[i].name, "value") == 0) {
      value = call->attrs[i].type == OAR_ATTR_FLOAT ? call->attrs[i].v.f : (double)call->attrs[i].v.i;
    }
  }
  for (i = 0; i < out->rank; ++i) n *= out->shape[i];
  for (i = 0; i < n; ++i) ((float*)out->data)[i] = (float)value; /* outputs of fill are contiguous */
  return NULL;
}
static oar_status_t* RegisterKernels(oar_kernel_registrar_t* registrar) {
  static const int32_t kF32[] = {OAR_DTYPE_FLOAT32};
  oar_kernel_def_t def;
  memset(&def, 0, sizeof def);
  def.struct_size = OAR_KERNEL_DEF_STRUCT_SIZE;
  def.op = "fill";
  def.dtypes = kF32;
  def.num_dtypes = 1;
  def.format = OAR_FORMAT_PLAIN;
  def.fn = FillF32;
  return g_host->register_kernel(registrar, &def);
}

/* ---- what each build adds beyond ABI 1.0 ----------------------------------------------------------- */
#if OAR_PLUGIN_ABI_MINOR >= 2
/* Slots that the simulated ABI 1.2 added. A 1.1 host does not know them and must never call them. */
static oar_status_t* SimDeviceSlot(int32_t device) {
  (void)device;
  abort();
}
static oar_status_t* SimPluginSlot(void) { abort(); }
#else
/* What a host would find if it read one slot past our tables' struct_size. */
static void Poison(void) { abort(); }
#endif

#define COMPAT_DEVICE_TABLE                                                                                  \
  {                                                                                                          \
    .struct_size = COMPAT_DEVICE_STRUCT_SIZE, .device_count = DeviceCount, .device_attributes = Attributes, \
    .device_synchronize = Synchronize, .malloc = Malloc, .free = Free, .memory_stats = MemoryStats,          \
    .memcpy_h2d = Copy, .memcpy_d2h = Copy, .memcpy_d2d = Copy, .memset = Set,                              \
    .stream_create = StreamCreate, .stream_destroy = StreamDestroy, .stream_synchronize = StreamSynchronize, \
    .stream_query = StreamQuery, .stream_wait_event = StreamWaitEvent,                                       \
    .stream_add_callback = StreamAddCallback, .event_create = EventCreate, .event_destroy = EventDestroy,   \
    .event_record = EventRecord, .event_query = EventQuery, .event_synchronize = EventSynchronize,          \
    COMPAT_DEVICE_EXTRA                                                                                      \
  }
#if defined(COMPAT_SMALL_DEVICE_TABLE)
#define COMPAT_DEVICE_STRUCT_SIZE OAR_STRUCT_SIZE(oar_device_api_t, memset) /* as if slots were missing */
#else
#define COMPAT_DEVICE_STRUCT_SIZE OAR_DEVICE_API_STRUCT_SIZE
#endif
#ifndef COMPAT_REPORTED_MAJOR
#define COMPAT_REPORTED_MAJOR OAR_PLUGIN_ABI_MAJOR
#endif

#if OAR_PLUGIN_ABI_MINOR == 0
/* The 1.0 compiler table (see the top of the file). */
static const int32_t kLanguages[] = {OAR_LANGUAGE_C};
static oar_status_t* Languages(int32_t device, const int32_t** languages, int32_t* count) {
  *languages = kLanguages;
  *count = 1;
  return CheckDevice(device);
}
static oar_status_t* Compile(int32_t device, const oar_compile_options_t* options, oar_module_t* module) {
  (void)options;
  *module = (oar_module_t)malloc(1);
  return CheckDevice(device);
}
static oar_status_t* ModuleDestroy(int32_t device, oar_module_t module) {
  free(module);
  return CheckDevice(device);
}
static oar_status_t* GetFunction(int32_t device, oar_module_t module, const char* name, oar_function_t* function) {
  (void)name;
  *function = (oar_function_t)module;
  return CheckDevice(device);
}
static oar_status_t* UntypedLaunch(int32_t device, oar_stream_t stream, oar_function_t function,
                                   const uint32_t grid[3], const uint32_t block[3], size_t shared_bytes,
                                   void* const* args, int32_t num_args) {
  (void)device;
  (void)stream;
  (void)function;
  (void)grid;
  (void)block;
  (void)shared_bytes;
  (void)args;
  (void)num_args;
  abort();
}
static const struct {
  oar_compiler_api_t table;
  void (*beyond)(void); /* where 1.1 appends launch_kernel */
} kCompiler = {{OAR_COMPILER_API_STRUCT_SIZE, NULL, Languages, Compile, ModuleDestroy, GetFunction, UntypedLaunch},
               Poison};
#endif

static const oar_kernel_api_t kKernel = {OAR_KERNEL_API_STRUCT_SIZE, NULL, RegisterKernels, NULL};
static oar_status_t* Initialize(void) { return NULL; }

#if OAR_PLUGIN_ABI_MINOR >= 2
#define COMPAT_DEVICE_EXTRA .compat_sim_device_slot = SimDeviceSlot
static const oar_device_api_t kDevice = COMPAT_DEVICE_TABLE;
#define DEVICE_TABLE (&kDevice)
#else
#define COMPAT_DEVICE_EXTRA .memcpy_p2p = NULL
static const struct {
  oar_device_api_t table;
  void (*beyond)(void);
} kDevice = {COMPAT_DEVICE_TABLE, Poison};
#define DEVICE_TABLE (&kDevice.table)
#endif

#define COMPAT_PLUGIN_TABLE                                                                               \
  {                                                                                                       \
    .struct_size = OAR_PLUGIN_API_STRUCT_SIZE, .abi_major = COMPAT_REPORTED_MAJOR,                        \
    .abi_minor = OAR_PLUGIN_ABI_MINOR, .name = COMPAT_NAME, .version = "1.0.0", .vendor = "Oar tests",    \
    .initialize = Initialize, .device = DEVICE_TABLE, .kernel = &kKernel, COMPAT_PLUGIN_EXTRA             \
  }
#if OAR_PLUGIN_ABI_MINOR >= 2
#define COMPAT_PLUGIN_EXTRA .compat_sim_plugin_slot = SimPluginSlot
static const oar_plugin_api_t kApi = COMPAT_PLUGIN_TABLE;
#define PLUGIN_TABLE (&kApi)
#else
#define COMPAT_PLUGIN_EXTRA .compiler = &kCompiler.table
static const struct {
  oar_plugin_api_t table;
  void (*beyond)(void);
} kApi = {COMPAT_PLUGIN_TABLE, Poison};
#define PLUGIN_TABLE (&kApi.table)
#endif

/* ---- the entry point --------------------------------------------------------------------------------- */
OAR_PLUGIN_EXPORT oar_status_t* oar_plugin_get_api(const oar_host_api_t* host, const oar_plugin_api_t** api) {
  /* Only the frozen prefix of the host table (up to status_destroy) may be read before the major is known. */
#if defined(COMPAT_REFUSE_AS_MAJOR)
  /* What a plugin built for another major does (OAR_DEFINE_PLUGIN in the C++ SDK does the same). */
  char message[160];
  snprintf(message, sizeof message, COMPAT_NAME ": plugin built for ABI %d.0 cannot serve host ABI %u.%u",
           COMPAT_REFUSE_AS_MAJOR, (unsigned)host->abi_major, (unsigned)host->abi_minor);
  (void)api;
  (void)PLUGIN_TABLE;
  return host->status_create(OAR_STATUS_FAILED_PRECONDITION, message);
#else
  if (host->abi_major != OAR_PLUGIN_ABI_MAJOR) {
    return host->status_create(OAR_STATUS_FAILED_PRECONDITION, COMPAT_NAME ": host ABI major differs");
  }
  g_host = host;
  *api = PLUGIN_TABLE;
  return NULL;
#endif
}
