/* Oar plugin ABI — common types.
 *
 * ABI conventions (apply to every header in oar/plugin/):
 *  - Pure C99. Headers include only <stddef.h>, <stdint.h> and <stdbool.h>.
 *  - Every name is prefixed `oar_` (functions, types) or `OAR_` (macros, enumerators).
 *  - Enum-typed fields and arguments are stored as `int32_t`; the enums below name the values.
 *  - Every struct that crosses the boundary starts with `size_t struct_size` (set by whoever fills the
 *    struct, to OAR_STRUCT_SIZE(type, last_field) of the header it was compiled against) followed by a
 *    `const void* ext` extension pointer (NULL unless documented). Readers must never touch a field that
 *    lies beyond `struct_size`.
 *  - Structs are append-only within a major version. Structs used as array elements
 *    (oar_tensor_desc_t, oar_attr_t, oar_kernel_arg_t) are frozen for the whole major; extend them through `ext`.
 *  - Strings are NUL-terminated UTF-8 unless a length is given. Each pointer documents who owns it and
 *    how long it lives.
 *  - A fallible function returns `oar_status_t*`: NULL means success; otherwise the callee created the
 *    status (with oar_host_api_t.status_create) and the caller destroys it.
 *  - Fields marked (optional) may be NULL; the host maps a NULL slot to UNIMPLEMENTED or to the documented
 *    fallback.
 *  - Out-parameters are marked `out`.
 */
#ifndef OAR_PLUGIN_TYPES_H_
#define OAR_PLUGIN_TYPES_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of a struct up to and including `last_field`: what `struct_size` must be set to. */
#define OAR_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* ---------------------------------------------------------------------------------------------------
 * Data types. Values are frozen; new dtypes are appended.
 * ------------------------------------------------------------------------------------------------- */
typedef enum oar_dtype {
  OAR_DTYPE_INVALID = 0,
  OAR_DTYPE_FLOAT32 = 1,
  OAR_DTYPE_FLOAT64 = 2,
  OAR_DTYPE_FLOAT16 = 3,  /* IEEE 754 binary16 */
  OAR_DTYPE_BFLOAT16 = 4, /* upper 16 bits of binary32 */
  OAR_DTYPE_INT8 = 5,
  OAR_DTYPE_UINT8 = 6,
  OAR_DTYPE_INT32 = 7,
  OAR_DTYPE_INT64 = 8,
  OAR_DTYPE_BOOL = 9, /* one byte, 0 or 1 */
  OAR_DTYPE_COUNT_ = 10
} oar_dtype;

/* ---------------------------------------------------------------------------------------------------
 * Storage formats. PLAIN means "logical shape with element strides"; any other value is a
 * device-private physical layout (see oar_format_api_t). Vendor-private values start at
 * OAR_FORMAT_VENDOR_BASE.
 * ------------------------------------------------------------------------------------------------- */
typedef enum oar_format {
  OAR_FORMAT_PLAIN = 0,
  OAR_FORMAT_NC1HWC0 = 1,    /* 4-D NCHW activations as N, C/C0, H, W, C0 (C0 = 16) */
  OAR_FORMAT_FRACTAL_NZ = 2, /* 2-D matrices as 16x16 fractals */
  OAR_FORMAT_VENDOR_BASE = 1000
} oar_format;

/* ---------------------------------------------------------------------------------------------------
 * Typed attributes: used for device properties and for kernel attributes.
 * ------------------------------------------------------------------------------------------------- */
typedef enum oar_attr_type {
  OAR_ATTR_INT = 1,    /* v.i */
  OAR_ATTR_FLOAT = 2,  /* v.f */
  OAR_ATTR_BOOL = 3,   /* v.b */
  OAR_ATTR_STRING = 4, /* v.s: data + size, not necessarily NUL-terminated */
  OAR_ATTR_INTS = 5,   /* v.ints */
  OAR_ATTR_FLOATS = 6  /* v.floats */
} oar_attr_type;

/* A named, typed value. Array element: frozen for the whole major version. All pointers are owned by
 * whoever built the array and live as long as the documentation of the function that passes it says. */
typedef struct oar_attr_t {
  size_t struct_size;
  const void* ext;
  const char* name; /* NUL-terminated key, e.g. "axes", "total_memory" */
  int32_t type;     /* oar_attr_type */
  int32_t reserved_;
  union {
    int64_t i;
    double f;
    bool b;
    struct {
      const char* data;
      size_t size;
    } s;
    struct {
      const int64_t* data;
      size_t size;
    } ints;
    struct {
      const double* data;
      size_t size;
    } floats;
  } v;
} oar_attr_t;
#define OAR_ATTR_STRUCT_SIZE OAR_STRUCT_SIZE(oar_attr_t, v)

/* ---------------------------------------------------------------------------------------------------
 * Opaque handles owned by the plugin.
 * ------------------------------------------------------------------------------------------------- */
typedef struct oar_stream_st* oar_stream_t; /* an in-order work queue on one device */
typedef struct oar_event_st* oar_event_t;   /* a marker recorded on a stream */

/* A host function run by a stream once all earlier work on it has completed. It must not call back into
 * the plugin's stream API for the same stream. */
typedef void (*oar_host_fn_t)(void* user_data);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OAR_PLUGIN_TYPES_H_ */
