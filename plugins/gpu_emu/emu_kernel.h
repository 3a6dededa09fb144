// The kernel language of the GPU emulator: what nvcc and hipcc provide to kernels.cu (thread and block
// indices, __shared__, __syncthreads, atomics, the launch), provided for the host compiler.
//
// Execution model (emu_runtime.cc): a launch is enqueued on its stream; the stream's worker thread runs
// the blocks one after another — one block at a time in the whole emulator —, and the threads of a block
// as fibers (Boost.Context) that switch only at __syncthreads. So `__shared__` variables are plain
// statics of their kernel that all fibers of the running block see, a barrier really separates the
// phases of a block, and a barrier reached by only part of a block is detected and reported as a launch
// failure. Shared memory is not cleared between blocks (like a GPU's, it holds whatever was there). Threads between two
// barriers run one after another, in thread order (OAR_GPU_EMU_SCHEDULE=reverse runs them in reverse, which exposes a
// read of another thread's shared-memory write that is missing its barrier).
#ifndef OAR_PLUGINS_GPU_EMU_EMU_KERNEL_H_
#define OAR_PLUGINS_GPU_EMU_EMU_KERNEL_H_

#include <atomic>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "plugins/gpu_emu/emu_runtime.h"

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}  // NOLINT: as CUDA's
};

namespace oar::gpu::emu {

/// The indices of the GPU thread the calling fiber is running.
struct ThreadIndices {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
const ThreadIndices& Current();

/// __syncthreads().
void SyncThreads();

/// Enqueues `body` (one GPU thread's work; it reads its indices through Current()) as a launch of
/// grid x block threads on `stream`. An invalid configuration sets the calling thread's last error.
void LaunchKernel(const char* name, dim3 grid, dim3 block, emuStream_t stream, std::function<void()> body);

/// `kernel<<<grid, block, 0, stream>>>(args...)` spelled `Launcher{...}(args...)`: the arguments are
/// converted to the kernel's parameter types and copied, as the real launch copies them.
template <typename... Params>
struct Launcher {
  dim3 grid, block;
  emuStream_t stream;
  void (*kernel)(Params...);
  const char* name;

  template <typename... Args>
  void operator()(Args&&... args) const {
    LaunchKernel(name, grid, block, stream,
                 [k = kernel, copied = std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)]() mutable {
                   std::apply(k, copied);
                 });
  }
};
template <typename... Params>
Launcher<Params...> MakeLauncher(dim3 grid, dim3 block, emuStream_t stream, void (*kernel)(Params...),
                                 const char* name) {
  return Launcher<Params...>{grid, block, stream, kernel, name};
}

}  // namespace oar::gpu::emu

#define threadIdx (::oar::gpu::emu::Current().thread_idx)
#define blockIdx (::oar::gpu::emu::Current().block_idx)
#define blockDim (::oar::gpu::emu::Current().block_dim)
#define gridDim (::oar::gpu::emu::Current().grid_dim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() ::oar::gpu::emu::SyncThreads()

template <typename T>
T atomicMin(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (value < old && !ref.compare_exchange_weak(old, value)) {
  }
  return old;
}

#endif  // OAR_PLUGINS_GPU_EMU_EMU_KERNEL_H_
