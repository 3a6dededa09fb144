// The CUDA dialect of gpu_emu's compiler table (emu_compiler.cc): what nvcc gives a kernel source, for the
// host C++ compiler. Prepended to every module's source, which is then compiled into its own shared object.
// The module cannot link against the plugin (its symbols are hidden), so the thread indices, the barrier
// and the dynamic shared memory come through one table the plugin binds after loading
// (oar_emu_jit_host). The execution model is emu_kernel.h's: the threads of a block are fibers that switch
// only at barriers, one block at a time in the whole emulator, so `__shared__` variables are statics and
// atomics need no hardware atomicity.
#ifndef OAR_PLUGINS_GPU_EMU_JIT_PRELUDE_H_
#define OAR_PLUGINS_GPU_EMU_JIT_PRELUDE_H_

namespace oar::gpu::emu {

/// The source text (a raw string) put in front of every CUDA module.
inline constexpr const char* kJitPrelude = R"OAR_PRELUDE(// ---- gpu_emu CUDA prelude ----
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct dim3 {
  unsigned x, y, z;
};
struct OarEmuJitIndices {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
struct OarEmuJitHost {
  const OarEmuJitIndices* (*current)();
  void (*sync_threads)();
  void* (*dynamic_shared)();
};
extern "C" __attribute__((visibility("default"))) const OarEmuJitHost* oar_emu_jit_host = nullptr;

#define threadIdx (oar_emu_jit_host->current()->thread_idx)
#define blockIdx (oar_emu_jit_host->current()->block_idx)
#define blockDim (oar_emu_jit_host->current()->block_dim)
#define gridDim (oar_emu_jit_host->current()->grid_dim)
#define warpSize 32
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static
#define __syncthreads() oar_emu_jit_host->sync_threads()
#define __threadfence() ((void)0)
#define __threadfence_block() ((void)0)

// Float math as the device library names it (the C library's functions; fast intrinsics are exact here).
__device__ inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
__device__ inline double rsqrt(double x) { return 1.0 / sqrt(x); }
__device__ inline float __expf(float x) { return expf(x); }
__device__ inline float __logf(float x) { return logf(x); }
__device__ inline float __sinf(float x) { return sinf(x); }
__device__ inline float __cosf(float x) { return cosf(x); }
__device__ inline float __powf(float x, float y) { return powf(x, y); }
__device__ inline float __fdividef(float x, float y) { return x / y; }
__device__ inline float __frcp_rn(float x) { return 1.0f / x; }
__device__ inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <typename T> __device__ inline T min(T a, T b) { return b < a ? b : a; }
template <typename T> __device__ inline T max(T a, T b) { return a < b ? b : a; }

// Atomics: one block runs at a time and its threads switch only at barriers, so plain updates are atomic.
template <typename T> __device__ inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> __device__ inline T atomicSub(T* p, T v) { T old = *p; *p = old - v; return old; }
template <typename T> __device__ inline T atomicMax(T* p, T v) { T old = *p; if (old < v) *p = v; return old; }
template <typename T> __device__ inline T atomicMin(T* p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <typename T> __device__ inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T> __device__ inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }

// Warp shuffles: a thread's value is written to a block-wide slot, the block meets at a barrier, each
// thread reads its source lane's slot, and the block meets again. So every thread of the block must
// reach the shuffle (the usual reduction pattern); one reached by only part of the block is reported as
// barrier divergence, like a __syncthreads there. Lanes are 32 wide; `mask` is not checked.
namespace oar_emu {
__device__ inline unsigned LinearThread() {
  const OarEmuJitIndices* i = oar_emu_jit_host->current();
  return i->thread_idx.x + i->block_dim.x * (i->thread_idx.y + i->block_dim.y * i->thread_idx.z);
}
template <typename T>
__device__ inline T Exchange(T var, int source_lane_offset_in_block) {
  static T slots[1024];
  const unsigned t = LinearThread();
  slots[t] = var;
  __syncthreads();
  const T got = slots[source_lane_offset_in_block];
  __syncthreads();
  return got;
}
}  // namespace oar_emu
template <typename T>
__device__ inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  (void)mask;
  const unsigned t = oar_emu::LinearThread();
  const unsigned lane = t % static_cast<unsigned>(width);
  const unsigned src = lane + delta < static_cast<unsigned>(width) ? t + delta : t;
  return oar_emu::Exchange(var, static_cast<int>(src));
}
template <typename T>
__device__ inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  (void)mask;
  const unsigned t = oar_emu::LinearThread();
  const unsigned lane = t % static_cast<unsigned>(width);
  const unsigned src = lane >= delta ? t - delta : t;
  return oar_emu::Exchange(var, static_cast<int>(src));
}
template <typename T>
__device__ inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  (void)mask;
  const unsigned t = oar_emu::LinearThread();
  const unsigned base = t - t % static_cast<unsigned>(width);
  const unsigned src = base + ((t - base) ^ static_cast<unsigned>(lane_mask)) % static_cast<unsigned>(width);
  return oar_emu::Exchange(var, static_cast<int>(src));
}
template <typename T>
__device__ inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  (void)mask;
  const unsigned t = oar_emu::LinearThread();
  const unsigned base = t - t % static_cast<unsigned>(width);
  return oar_emu::Exchange(var, static_cast<int>(base + static_cast<unsigned>(src_lane) % static_cast<unsigned>(width)));
}
// ---- end of the prelude ----
)OAR_PRELUDE";

}  // namespace oar::gpu::emu

#endif  // OAR_PLUGINS_GPU_EMU_JIT_PRELUDE_H_
