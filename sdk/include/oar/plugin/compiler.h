/* Oar plugin ABI — (optional) compiler hook used by the CINN code generator: compile source in a declared
 * language to a module, load a function from it, launch it on a stream.
 *
 * Calling conventions of the functions a module defines (what `launch_kernel` calls):
 *
 *  - C (OAR_LANGUAGE_C). An entry point is
 *        void NAME(void* const* args, int64_t task_begin, int64_t task_end);
 *    with external linkage. args[i] points at the value of the i-th oar_kernel_arg_t of the launch: for a
 *    scalar at a value of its kind's C type (int32_t, int64_t, float, double); for a BUFFER at a pointer
 *    the code can dereference on the host (the plugin translates device pointers: on a simulator the
 *    pointer in *(void**)args[i] is not the device address the host passed). The launch has
 *    grid[0] * grid[1] * grid[2] tasks, numbered [0, that); the plugin splits them into contiguous chunks
 *    [task_begin, task_end) over its kernel threads and calls the entry once per chunk, possibly from
 *    several threads at once, in no particular order. `block` and `shared_bytes` are ignored (block must
 *    still be 1x1x1 or larger). The module is compiled as a shared object by the host's C compiler; it
 *    may use the C library and <math.h>.
 *  - CUDA and HIP (OAR_LANGUAGE_CUDA, OAR_LANGUAGE_HIP). Ordinary `extern "C" __global__` kernels with
 *    typed parameters, one per launch argument in order: a BUFFER is a pointer parameter (`float* x`),
 *    scalars are int32_t / int64_t / float / double parameters. Arguments are passed as cuLaunchKernel
 *    passes them; grid, block and dynamic shared_bytes mean what they mean there.
 */
#ifndef OAR_PLUGIN_COMPILER_H_
#define OAR_PLUGIN_COMPILER_H_

#include "oar/plugin/status.h"
#include "oar/plugin/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum oar_source_language {
  OAR_LANGUAGE_C = 1,
  OAR_LANGUAGE_CUDA = 2,
  OAR_LANGUAGE_HIP = 3,
  OAR_LANGUAGE_OPENCL_C = 4,
  OAR_LANGUAGE_SPIRV = 5 /* binary; source_size is in bytes */
} oar_source_language;

typedef struct oar_module_st* oar_module_t;
typedef struct oar_function_st* oar_function_t; /* owned by its module */

typedef struct oar_compile_options_t {
  size_t struct_size;
  const void* ext;
  int32_t language; /* oar_source_language */
  int32_t num_flags;
  const char* source; /* not necessarily NUL-terminated; only read during the call */
  size_t source_size;
  const char* const* flags; /* extra compiler flags; only read during the call */
  const char* name;         /* module name for diagnostics */
} oar_compile_options_t;
#define OAR_COMPILE_OPTIONS_STRUCT_SIZE OAR_STRUCT_SIZE(oar_compile_options_t, name)

/* ABI 1.1: the kind of one kernel argument (oar_kernel_arg_t.kind). */
typedef enum oar_kernel_arg_kind {
  OAR_KERNEL_ARG_BUFFER = 1,  /* device memory: value = the device pointer itself, size = bytes it spans */
  OAR_KERNEL_ARG_INT32 = 2,   /* value points at an int32_t, size = 4 */
  OAR_KERNEL_ARG_INT64 = 3,   /* value points at an int64_t, size = 8 */
  OAR_KERNEL_ARG_FLOAT32 = 4, /* value points at a float, size = 4 */
  OAR_KERNEL_ARG_FLOAT64 = 5  /* value points at a double, size = 8 */
} oar_kernel_arg_kind;

/* ABI 1.1: one kernel argument. An array element: its size (24 bytes on LP64) is frozen for the major, so
 * it has no struct_size; `reserved` must be 0 (a later minor may give it a meaning).
 *  - BUFFER: `value` is the device pointer (NULL allowed with size 0) and `size` the number of bytes the
 *    kernel may read or write from it. A plugin whose device memory is not host memory validates the
 *    whole range [value, value + size) against its allocations and translates it; a range outside them
 *    is INVALID_ARGUMENT at launch.
 *  - scalars: `value` points at the value (read during the call only), `size` is its byte size, which
 *    must match the kind. */
typedef struct oar_kernel_arg_t {
  int32_t kind; /* oar_kernel_arg_kind */
  int32_t reserved;
  const void* value;
  size_t size;
} oar_kernel_arg_t;

/* ABI 1.1: what launch_kernel launches. Read during the call only: a plugin that runs the launch later
 * copies what it needs (the scalar values included). */
typedef struct oar_launch_info_t {
  size_t struct_size; /* OAR_LAUNCH_INFO_STRUCT_SIZE of the caller's headers */
  const void* ext;    /* NULL */
  oar_function_t function;
  uint32_t grid[3];  /* each >= 1; C: grid[0]*grid[1]*grid[2] tasks */
  uint32_t block[3]; /* each >= 1; C: ignored */
  size_t shared_bytes; /* dynamic shared memory per block (CUDA/HIP); C: ignored */
  const oar_kernel_arg_t* args; /* num_args arguments, in the kernel's parameter order */
  int32_t num_args;
  double flops; /* estimated floating-point operations of the whole launch; 0 = unknown */
  double bytes; /* estimated bytes moved to and from device memory; 0 = unknown. Profilers and the
                 * simulators' roofline time use both; a launch never fails because they are wrong */
} oar_launch_info_t;
#define OAR_LAUNCH_INFO_STRUCT_SIZE OAR_STRUCT_SIZE(oar_launch_info_t, bytes)
/* The smallest oar_launch_info_t a 1.x plugin accepts (the layout of ABI 1.1; fixed for the major). */
#define OAR_LAUNCH_INFO_MIN_SIZE OAR_STRUCT_SIZE(oar_launch_info_t, bytes)

typedef struct oar_compiler_api_t {
  size_t struct_size;
  const void* ext;
  /* Languages accepted by `compile` (out): plugin-owned array valid until shutdown. May be empty (count 0)
   * when the plugin has a compiler table but no usable compiler on this machine. */
  oar_status_t* (*languages)(int32_t device, const int32_t** languages /* out */,
                             int32_t* count /* out */);
  /* Compile and load. A compile error is INVALID_ARGUMENT whose message holds the compiler log; no usable
   * compiler is UNAVAILABLE saying why. */
  oar_status_t* (*compile)(int32_t device, const oar_compile_options_t* options,
                           oar_module_t* module /* out */);
  /* Unload a module; its functions become invalid. Launches already enqueued still complete. */
  oar_status_t* (*module_destroy)(int32_t device, oar_module_t module);
  /* The function `name` of a module; NOT_FOUND naming it when the module has none. */
  oar_status_t* (*get_function)(int32_t device, oar_module_t module, const char* name,
                                oar_function_t* function /* out */);
  /* ABI 1.0's untyped launch: args[i] points at the i-th argument's value; device pointers are passed as
   * they are (no range or translation). (optional; superseded by launch_kernel, which the core uses) */
  oar_status_t* (*launch)(int32_t device, oar_stream_t stream, oar_function_t function,
                          const uint32_t grid[3], const uint32_t block[3], size_t shared_bytes,
                          void* const* args, int32_t num_args);
  /* ABI 1.1: enqueue info->function with typed arguments on `stream` (asynchronous like a kernel of the
   * kernel API: it honours events and stream order). The calling conventions are at the top of this
   * file. Errors detectable at launch (a bad handle, grid or block, an argument whose kind or size is
   * wrong, a buffer range outside device memory) are returned; failures while running become the
   * stream's error as for other kernels. (optional: the host reports UNIMPLEMENTED for a plugin
   * without it) */
  oar_status_t* (*launch_kernel)(int32_t device, oar_stream_t stream, const oar_launch_info_t* info);
} oar_compiler_api_t;
#define OAR_COMPILER_API_STRUCT_SIZE OAR_STRUCT_SIZE(oar_compiler_api_t, launch_kernel)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OAR_PLUGIN_COMPILER_H_ */
