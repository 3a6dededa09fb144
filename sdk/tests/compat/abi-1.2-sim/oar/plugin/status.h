/* Oar plugin ABI — status objects.
 *
 * A fallible call returns `oar_status_t*`: NULL means OK. A non-NULL status is created by the callee
 * through oar_host_api_t.status_create and destroyed by the caller through oar_host_api_t.status_destroy,
 * so every status in the process is allocated by one allocator (the host's) whichever side made it.
 * C++ exceptions never cross the ABI; the SDK's guard (oar/plugin/cpp/status.hpp) converts them.
 */
#ifndef OAR_PLUGIN_STATUS_H_
#define OAR_PLUGIN_STATUS_H_

#include "oar/plugin/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Canonical error codes (the same numbering as absl::StatusCode and gRPC). Frozen values. */
typedef enum oar_status_code {
  OAR_STATUS_OK = 0,
  OAR_STATUS_CANCELLED = 1,
  OAR_STATUS_UNKNOWN = 2,
  OAR_STATUS_INVALID_ARGUMENT = 3,
  OAR_STATUS_DEADLINE_EXCEEDED = 4,
  OAR_STATUS_NOT_FOUND = 5,
  OAR_STATUS_ALREADY_EXISTS = 6,
  OAR_STATUS_PERMISSION_DENIED = 7,
  OAR_STATUS_RESOURCE_EXHAUSTED = 8, /* out of device memory: the host frees cached blocks and retries */
  OAR_STATUS_FAILED_PRECONDITION = 9,
  OAR_STATUS_ABORTED = 10,
  OAR_STATUS_OUT_OF_RANGE = 11,
  OAR_STATUS_UNIMPLEMENTED = 12, /* the op, dtype, format or slot is not supported */
  OAR_STATUS_INTERNAL = 13,
  OAR_STATUS_UNAVAILABLE = 14, /* no driver / device lost */
  OAR_STATUS_DATA_LOSS = 15
} oar_status_code;

/* Opaque; owned by the host. */
typedef struct oar_status_t oar_status_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OAR_PLUGIN_STATUS_H_ */
