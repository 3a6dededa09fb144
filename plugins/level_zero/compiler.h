// The level_zero compiler table (oar/plugin/compiler.h) for CINN: OpenCL C compiled to SPIR-V at run time
// (spirv_compiler.h), built into a module with zeModuleCreate, launched with the plugin's launch code
// (Device::Launch). Languages: OAR_LANGUAGE_OPENCL_C, or none (count 0) when no clang/llvm-spirv is found;
// compile is then UNAVAILABLE saying why, and the core runs fused groups on its loop-IR interpreter.
//
// OpenCL C calling convention (launch_kernel): `__kernel` functions with one parameter per launch
// argument in order — a BUFFER is a `__global T*` parameter (the USM device pointer itself, validated to
// lie inside one of the device's allocations), INT32/INT64/FLOAT32/FLOAT64 are int/long/float/double
// parameters; grid = work-groups, block = the work-group size (get_local_size), shared_bytes must be 0
// (`__local` memory is declared in the kernel).
#ifndef OAR_PLUGINS_LEVEL_ZERO_COMPILER_H_
#define OAR_PLUGINS_LEVEL_ZERO_COMPILER_H_

#include "oar/plugin/plugin.h"

namespace oar::level_zero {

const oar_compiler_api_t* CompilerApi();

}  // namespace oar::level_zero

#endif  // OAR_PLUGINS_LEVEL_ZERO_COMPILER_H_
