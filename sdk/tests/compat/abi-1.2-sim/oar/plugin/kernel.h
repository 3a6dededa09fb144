/* Oar plugin ABI — kernel API: tensor descriptors, kernel calls, registration, support queries.
 *
 * A kernel is a C function registered under a key (op name, dtypes, storage format). The host picks the
 * kernel, allocates the outputs on the device and calls the function with an oar_kernel_call_t. The
 * function enqueues its work on `call->stream` (or runs it before returning) and reports failure through a
 * status. The per-op contract (inputs, outputs, attributes, how broadcasting reaches the kernel) is
 * written in docs/ops.md; the rules common to all ops are:
 *  - inputs may have any non-negative element strides, including 0 (broadcast); outputs are freshly
 *    allocated and contiguous unless the op says otherwise ("copy" writes into a strided view);
 *  - elementwise ops receive their inputs already broadcast to the output shape (stride 0 on broadcast
 *    dimensions), so a kernel never re-derives broadcasting;
 *  - tensors may be empty (a zero in the shape): the kernel must not touch memory then;
 *  - rank 0 is a scalar with one element.
 */
#ifndef OAR_PLUGIN_KERNEL_H_
#define OAR_PLUGIN_KERNEL_H_

#include "oar/plugin/status.h"
#include "oar/plugin/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OAR_MAX_RANK 8 /* the largest rank a descriptor can have in ABI 1.x */

/* ===================================================================================================
 * Tensor descriptor. Array element: frozen for the whole major version.
 * =================================================================================================== */
typedef struct oar_tensor_desc_t {
  size_t struct_size;
  const void* ext;
  void* data;     /* device address of the first element (storage offset already applied); NULL in
                     support queries */
  int32_t dtype;  /* oar_dtype */
  int32_t format; /* oar_format; PLAIN unless the plugin asked for a private format */
  int32_t rank;   /* 0 .. OAR_MAX_RANK */
  int32_t reserved_;
  const int64_t* shape;   /* `rank` logical extents */
  const int64_t* strides; /* `rank` strides in elements (PLAIN only); >= 0 */
} oar_tensor_desc_t;
#define OAR_TENSOR_DESC_STRUCT_SIZE OAR_STRUCT_SIZE(oar_tensor_desc_t, strides)

/* ===================================================================================================
 * A kernel call. Everything it points to is owned by the host and valid only during the call.
 * =================================================================================================== */
typedef struct oar_kernel_call_t {
  size_t struct_size;
  const void* ext;
  const char* op;      /* op name, e.g. "add" */
  int32_t device;      /* device ordinal within the plugin */
  int32_t num_inputs;  /* entries in `inputs` */
  int32_t num_outputs; /* entries in `outputs` */
  int32_t num_attrs;   /* entries in `attrs` */
  oar_stream_t stream; /* where to enqueue the work; NULL in support queries */
  const oar_tensor_desc_t* inputs;
  const oar_tensor_desc_t* outputs;
  const oar_attr_t* attrs; /* attributes of the op; every attribute of the op's schema is present */
  void* kernel_data;       /* oar_kernel_def_t.kernel_data of the chosen kernel */
} oar_kernel_call_t;
#define OAR_KERNEL_CALL_STRUCT_SIZE OAR_STRUCT_SIZE(oar_kernel_call_t, kernel_data)

typedef oar_status_t* (*oar_kernel_fn_t)(const oar_kernel_call_t* call);

/* ===================================================================================================
 * Registration. The key is (op, dtypes, format): `dtypes` lists the dtype of every input in order, then
 * of every output (e.g. add float32 -> {F32, F32, F32}; cast float32->float16 -> {F32, F16}; fill
 * int64 -> {I64}). `format` is the storage format of the inputs the kernel accepts (PLAIN for almost
 * every kernel; format casts and private-format kernels name theirs).
 * =================================================================================================== */
typedef struct oar_kernel_def_t {
  size_t struct_size;
  const void* ext;
  const char* op;        /* copied by the host */
  const int32_t* dtypes; /* copied by the host */
  int32_t num_dtypes;
  int32_t format; /* oar_format */
  oar_kernel_fn_t fn;
  void* kernel_data; /* passed back in oar_kernel_call_t.kernel_data; owned by the plugin */
} oar_kernel_def_t;
#define OAR_KERNEL_DEF_STRUCT_SIZE OAR_STRUCT_SIZE(oar_kernel_def_t, kernel_data)
/* The smallest definition the host accepts in ABI 1.x (every field above existed in 1.0). */
#define OAR_KERNEL_DEF_MIN_SIZE OAR_STRUCT_SIZE(oar_kernel_def_t, kernel_data)

/* Opaque host object that collects kernels; pass it to oar_host_api_t.register_kernel. */
typedef struct oar_kernel_registrar_t oar_kernel_registrar_t;

/* ===================================================================================================
 * The kernel function table.
 * =================================================================================================== */
typedef struct oar_kernel_api_t {
  size_t struct_size;
  const void* ext;
  /* Register every kernel through host->register_kernel(registrar, def). Called once, after initialize. */
  oar_status_t* (*register_kernels)(oar_kernel_registrar_t* registrar);
  /* (optional) Can the registered kernel run this exact call (shapes, strides, attributes)? The call has
   * NULL data pointers and a NULL stream. Return NULL when yes; UNIMPLEMENTED with the reason when no
   * (the host then falls back or reports the reason); any other code is an error. NULL slot: every
   * registered key is fully supported. */
  oar_status_t* (*supports)(const oar_kernel_call_t* query);
} oar_kernel_api_t;
#define OAR_KERNEL_API_STRUCT_SIZE OAR_STRUCT_SIZE(oar_kernel_api_t, supports)
#define OAR_KERNEL_API_MIN_SIZE OAR_STRUCT_SIZE(oar_kernel_api_t, supports)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OAR_PLUGIN_KERNEL_H_ */
