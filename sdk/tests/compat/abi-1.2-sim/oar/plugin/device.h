/* Oar plugin ABI — device API: enumeration, attributes, memory, copies, streams, events.
 *
 * Devices are numbered 0 .. count-1 within the plugin's device type. Every function takes the device
 * ordinal explicitly; there is no "current device" state.
 *
 * Thread-safety: every slot may be called from any host thread concurrently, except that one stream is
 * only ever used by one host thread at a time (the host serialises its use of each stream).
 *
 * Handles: the host only passes stream and event handles that this plugin created for the same device and
 * has not destroyed; it never passes NULL. A plugin should still reject a handle it does not know with
 * INVALID_ARGUMENT rather than crash.
 *
 * Asynchrony: work enqueued on a stream (`*_async` copies, memset_async, kernels launched with that
 * stream, event records, host callbacks) executes in enqueue order. Synchronous slots return only when the
 * operation has completed and are ordered after all work previously enqueued on every stream of the
 * device (as cudaMemcpy is). Host buffers passed to `*_async` slots must stay valid until the stream has
 * passed that point.
 */
#ifndef OAR_PLUGIN_DEVICE_H_
#define OAR_PLUGIN_DEVICE_H_

#include "oar/plugin/status.h"
#include "oar/plugin/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================================================
 * Well-known device attribute keys (oar_attr_t.name). A plugin reports at least the REQUIRED ones.
 * =================================================================================================== */
#define OAR_DEVICE_ATTR_NAME "name"                     /* STRING, REQUIRED: marketing/model name */
#define OAR_DEVICE_ATTR_VENDOR "vendor"                 /* STRING, REQUIRED */
#define OAR_DEVICE_ATTR_TOTAL_MEMORY "total_memory"     /* INT bytes, REQUIRED */
#define OAR_DEVICE_ATTR_COMPUTE_UNITS "compute_units"   /* INT */
#define OAR_DEVICE_ATTR_ALIGNMENT "alignment"           /* INT bytes every allocation is aligned to */
#define OAR_DEVICE_ATTR_HOST_ACCESSIBLE "host_accessible" /* BOOL: device pointers are host pointers */
#define OAR_DEVICE_ATTR_DTYPES "dtypes"                 /* INTS of oar_dtype the device computes in */
#define OAR_DEVICE_ATTR_PEAK_FLOPS_F32 "peak_flops_f32" /* FLOAT FLOP/s */
#define OAR_DEVICE_ATTR_MEMORY_BANDWIDTH "memory_bandwidth" /* FLOAT bytes/s */

/* ===================================================================================================
 * Memory statistics. Each figure has a validity flag: a plugin that cannot report a figure leaves it
 * false.
 * =================================================================================================== */
typedef struct oar_memory_stats_t {
  size_t struct_size;
  const void* ext;
  uint64_t bytes_in_use;      /* bytes currently allocated through malloc */
  uint64_t peak_bytes_in_use; /* high-water mark of bytes_in_use */
  uint64_t bytes_limit;       /* capacity available to allocations */
  uint64_t num_allocs;        /* live allocations */
  bool bytes_in_use_is_set;
  bool peak_bytes_in_use_is_set;
  bool bytes_limit_is_set;
  bool num_allocs_is_set;
} oar_memory_stats_t;
#define OAR_MEMORY_STATS_STRUCT_SIZE OAR_STRUCT_SIZE(oar_memory_stats_t, num_allocs_is_set)

/* ===================================================================================================
 * The device function table.
 * =================================================================================================== */
typedef struct oar_device_api_t {
  size_t struct_size;
  const void* ext;

  /* ---- enumeration ---------------------------------------------------------------------------- */
  /* Number of devices (out). When the vendor runtime or driver is missing, set *count = 0 and return
   * UNAVAILABLE with the vendor's own words as the message: the host shows it to the user. */
  oar_status_t* (*device_count)(int32_t* count /* out */);
  /* The device's attributes (out): an array owned by the plugin, valid until shutdown. */
  oar_status_t* (*device_attributes)(int32_t device, const oar_attr_t** attrs /* out */,
                                     int32_t* num_attrs /* out */);
  /* Block until all work on every stream of the device has completed. */
  oar_status_t* (*device_synchronize)(int32_t device);

  /* ---- memory --------------------------------------------------------------------------------- */
  /* Allocate `size` bytes of device memory aligned to the "alignment" attribute. size 0 returns a
   * unique non-NULL pointer or NULL; both must be accepted by `free`. Out of memory: RESOURCE_EXHAUSTED. */
  oar_status_t* (*malloc)(int32_t device, size_t size, void** ptr /* out */);
  oar_status_t* (*free)(int32_t device, void* ptr);
  /* (optional) Page-locked host memory usable by async copies. NULL: the host uses plain host memory. */
  oar_status_t* (*host_malloc)(int32_t device, size_t size, void** ptr /* out */);
  oar_status_t* (*host_free)(int32_t device, void* ptr);
  /* (optional) Memory statistics; stats->struct_size is set by the host. */
  oar_status_t* (*memory_stats)(int32_t device, oar_memory_stats_t* stats /* in/out */);

  /* ---- synchronous copies and memset ---------------------------------------------------------- */
  oar_status_t* (*memcpy_h2d)(int32_t device, void* dst, const void* src, size_t size);
  oar_status_t* (*memcpy_d2h)(int32_t device, void* dst, const void* src, size_t size);
  oar_status_t* (*memcpy_d2d)(int32_t device, void* dst, const void* src, size_t size);
  /* (optional) Copy between two devices of this plugin. NULL: the host stages through host memory. */
  oar_status_t* (*memcpy_p2p)(int32_t dst_device, void* dst, int32_t src_device, const void* src,
                              size_t size);
  oar_status_t* (*memset)(int32_t device, void* dst, uint8_t value, size_t size);

  /* ---- asynchronous copies and memset (all optional: NULL falls back to the synchronous slot
   *      after synchronising the stream) ------------------------------------------------------------ */
  oar_status_t* (*memcpy_h2d_async)(int32_t device, oar_stream_t stream, void* dst, const void* src,
                                    size_t size);
  oar_status_t* (*memcpy_d2h_async)(int32_t device, oar_stream_t stream, void* dst, const void* src,
                                    size_t size);
  oar_status_t* (*memcpy_d2d_async)(int32_t device, oar_stream_t stream, void* dst, const void* src,
                                    size_t size);
  /* Enqueued on `stream`, which belongs to src_device. */
  oar_status_t* (*memcpy_p2p_async)(int32_t dst_device, void* dst, int32_t src_device, const void* src,
                                    size_t size, oar_stream_t stream);
  oar_status_t* (*memset_async)(int32_t device, oar_stream_t stream, void* dst, uint8_t value,
                                size_t size);

  /* ---- streams -------------------------------------------------------------------------------- */
  oar_status_t* (*stream_create)(int32_t device, oar_stream_t* stream /* out */);
  /* Waits for the stream's pending work, then releases it. */
  oar_status_t* (*stream_destroy)(int32_t device, oar_stream_t stream);
  oar_status_t* (*stream_synchronize)(int32_t device, oar_stream_t stream);
  /* *idle = true when all work enqueued so far has completed. */
  oar_status_t* (*stream_query)(int32_t device, oar_stream_t stream, bool* idle /* out */);
  /* Later work on `stream` waits until `event`'s most recent record has completed. An event never
   * recorded is already complete. */
  oar_status_t* (*stream_wait_event)(int32_t device, oar_stream_t stream, oar_event_t event);
  /* Run fn(user_data) once the work enqueued so far has completed: on a plugin thread, or before this
   * call returns when the stream is already idle (devices that execute work synchronously do that). */
  oar_status_t* (*stream_add_callback)(int32_t device, oar_stream_t stream, oar_host_fn_t fn,
                                       void* user_data);

  /* ---- events --------------------------------------------------------------------------------- */
  oar_status_t* (*event_create)(int32_t device, oar_event_t* event /* out */);
  oar_status_t* (*event_destroy)(int32_t device, oar_event_t event);
  /* Capture the work enqueued on `stream` so far; re-recording replaces the previous capture. */
  oar_status_t* (*event_record)(int32_t device, oar_event_t event, oar_stream_t stream);
  oar_status_t* (*event_query)(int32_t device, oar_event_t event, bool* complete /* out */);
  oar_status_t* (*event_synchronize)(int32_t device, oar_event_t event);

  /* ---- added in 1.2 (SIMULATED by sdk/tests/compat) ------------------------------------------- */
  /* (optional) A slot that only 1.2 plugins have. A host calls it only when OAR_HAS_SLOT says the
   * plugin's table covers it. */
  oar_status_t* (*compat_sim_device_slot)(int32_t device);
} oar_device_api_t;
#define OAR_DEVICE_API_STRUCT_SIZE OAR_STRUCT_SIZE(oar_device_api_t, compat_sim_device_slot)
/* The smallest table the host accepts in ABI 1.x: every slot above existed in 1.0. */
#define OAR_DEVICE_API_MIN_SIZE OAR_STRUCT_SIZE(oar_device_api_t, event_synchronize)

/* ===================================================================================================
 * (optional) Device-private storage formats. A plugin that keeps some tensors in a physical layout other
 * than PLAIN describes it here; the host converts with the plugin's "format_cast" kernels and keeps the
 * logical shape everywhere in its API.
 * =================================================================================================== */
typedef struct oar_format_api_t {
  size_t struct_size;
  const void* ext;
  /* Bytes of device memory a tensor of `dtype` and logical `shape` needs in `format` (out). */
  oar_status_t* (*storage_bytes)(int32_t device, int32_t format, int32_t dtype, int32_t rank,
                                 const int64_t* shape, size_t* bytes /* out */);
  /* The format the device prefers for input `input_index` of `op` given its logical shape (out);
   * OAR_FORMAT_PLAIN when it has no preference. */
  oar_status_t* (*preferred_format)(int32_t device, const char* op, int32_t input_index, int32_t dtype,
                                    int32_t rank, const int64_t* shape, int32_t* format /* out */);
} oar_format_api_t;
#define OAR_FORMAT_API_STRUCT_SIZE OAR_STRUCT_SIZE(oar_format_api_t, preferred_format)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OAR_PLUGIN_DEVICE_H_ */
