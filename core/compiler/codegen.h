// Code generation: a loop-IR Kernel printed as source for a plugin's compiler table.
//
// C (cpu and the simulators): `void NAME(void* const* args, int64_t task_begin, int64_t task_end)`, the
// calling convention of sdk/include/oar/plugin/compiler.h — args[i] points at argument i (buffers
// first, then the int64 parameters); the plugin spreads the tasks over its threads. kThreads loops are
// `#pragma omp simd` loops with their reductions declared, so the system compiler vectorises them
// (-fopenmp-simd) without reassociating anything else.
// CUDA and HIP: `extern "C" __global__ void NAME(<typed parameters>)`, one block per task and the
// block's threads striding over each kThreads loop; kBlockReduce is a shared-memory tree reduction.
// OpenCL C (1.2 and 2.0; level_zero compiles it to SPIR-V): the CUDA kernels spelled for OpenCL —
// `__kernel void NAME(<typed parameters>)` with `__global` buffers (bool ones as uchar) and `long`
// int64 parameters, in the CUDA dialect's order; one work-group per task (get_group_id(0)), its work-items
// striding over each kThreads loop (get_local_id / get_local_size), kBlockReduce a `__local` tree
// reduction with barrier(CLK_LOCAL_MEM_FENCE) (its buffers declared at kernel scope, as OpenCL C wants).
// Launch: global size tasks * threads_per_task, local size threads_per_task.
#ifndef OAR_CORE_COMPILER_CODEGEN_H_
#define OAR_CORE_COMPILER_CODEGEN_H_

#include <string>

#include "core/compiler/loop_ir.h"

namespace oar::compiler {

enum class SourceDialect { kC, kCuda, kHip, kOpenCL };

/// The source of `k` in `dialect`; its entry point is k.name.
std::string GenerateSource(const Kernel& k, SourceDialect dialect);

}  // namespace oar::compiler

#endif  // OAR_CORE_COMPILER_CODEGEN_H_
