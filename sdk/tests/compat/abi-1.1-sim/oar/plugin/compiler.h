/* Oar plugin ABI — (optional) compiler hook used by the CINN code generator: compile source in a declared
 * language to a module, load a function from it, launch it on a stream.
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

typedef struct oar_compiler_api_t {
  size_t struct_size;
  const void* ext;
  /* Languages accepted by `compile` (out): plugin-owned array valid until shutdown. */
  oar_status_t* (*languages)(int32_t device, const int32_t** languages /* out */,
                             int32_t* count /* out */);
  /* Compile and load. A compile error is INVALID_ARGUMENT whose message holds the compiler log. */
  oar_status_t* (*compile)(int32_t device, const oar_compile_options_t* options,
                           oar_module_t* module /* out */);
  oar_status_t* (*module_destroy)(int32_t device, oar_module_t module);
  oar_status_t* (*get_function)(int32_t device, oar_module_t module, const char* name,
                                oar_function_t* function /* out */);
  /* Enqueue function(args...) on `stream` with the given grid and block (C modules: grid is the number
   * of parallel invocations, block is ignored). args[i] points at the i-th argument's value. */
  oar_status_t* (*launch)(int32_t device, oar_stream_t stream, oar_function_t function,
                          const uint32_t grid[3], const uint32_t block[3], size_t shared_bytes,
                          void* const* args, int32_t num_args);
} oar_compiler_api_t;
#define OAR_COMPILER_API_STRUCT_SIZE OAR_STRUCT_SIZE(oar_compiler_api_t, launch)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OAR_PLUGIN_COMPILER_H_ */
