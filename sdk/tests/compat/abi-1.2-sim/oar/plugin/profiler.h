/* Oar plugin ABI — (optional) profiler hooks: the plugin records what ran on the device (kernels,
 * copies, collectives) with device-side or simulated times, and hands the records to the host on
 * request.
 */
#ifndef OAR_PLUGIN_PROFILER_H_
#define OAR_PLUGIN_PROFILER_H_

#include "oar/plugin/status.h"
#include "oar/plugin/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum oar_activity_kind {
  OAR_ACTIVITY_KERNEL = 1,
  OAR_ACTIVITY_COPY = 2,
  OAR_ACTIVITY_MEMSET = 3,
  OAR_ACTIVITY_COLLECTIVE = 4,
  OAR_ACTIVITY_OTHER = 5
} oar_activity_kind;

/* One record; valid only during the sink call. */
typedef struct oar_activity_t {
  size_t struct_size;
  const void* ext;
  const char* name; /* op name or copy direction, e.g. "matmul", "h2d" */
  int32_t kind;     /* oar_activity_kind */
  int32_t device;
  uint64_t start_ns; /* device or simulated clock; only differences are meaningful */
  uint64_t end_ns;
  uint64_t bytes;    /* bytes moved, 0 if unknown */
  double flops;      /* floating-point operations, 0 if unknown */
  bool simulated;    /* times come from a device model, not a measurement */
} oar_activity_t;
#define OAR_ACTIVITY_STRUCT_SIZE OAR_STRUCT_SIZE(oar_activity_t, simulated)

typedef void (*oar_activity_sink_t)(void* context, const oar_activity_t* activity);

typedef struct oar_profiler_api_t {
  size_t struct_size;
  const void* ext;
  oar_status_t* (*start)(int32_t device);
  oar_status_t* (*stop)(int32_t device);
  /* Deliver and forget every record gathered so far, in completion order, by calling sink for each. */
  oar_status_t* (*flush)(int32_t device, oar_activity_sink_t sink, void* context);
} oar_profiler_api_t;
#define OAR_PROFILER_API_STRUCT_SIZE OAR_STRUCT_SIZE(oar_profiler_api_t, flush)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OAR_PLUGIN_PROFILER_H_ */
