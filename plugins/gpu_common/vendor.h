// The vendor shim: one name for each runtime entity the shared GPU code uses, mapped to the CUDA runtime
// (OAR_GPU_CUDA), to HIP (OAR_GPU_HIP) or to the host-CPU GPU emulator that tests the same sources
// without a GPU (OAR_GPU_EMU, plugins/gpu_emu). Everything in plugins/gpu_common is written against these
// `gpu*` names and compiled once per vendor; nothing else in the tree may include a vendor header.
//
// The host sources (.cc) see only the runtime API header and are compiled by the host C++ compiler;
// the kernel source (kernels.cu) sees the full runtime and is compiled by nvcc or hipcc (for the
// emulator: by the host compiler with OAR_GPU_EMU_KERNELS, which adds the emulator's kernel language).
//
// Kernels are launched with OAR_GPU_LAUNCH(grid, block, stream, kernel)(args...), which is
// kernel<<<grid, block, 0, stream>>>(args...) on the real vendors.
#ifndef OAR_PLUGINS_GPU_COMMON_VENDOR_H_
#define OAR_PLUGINS_GPU_COMMON_VENDOR_H_

#if defined(OAR_GPU_CUDA) + defined(OAR_GPU_HIP) + defined(OAR_GPU_EMU) != 1
#error "define exactly one of OAR_GPU_CUDA, OAR_GPU_HIP and OAR_GPU_EMU"
#endif

#if defined(OAR_GPU_CUDA) || defined(OAR_GPU_HIP)
#define OAR_GPU_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<(grid), (block), 0, (stream)>>>
#endif

#if defined(OAR_GPU_CUDA)
#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include <cuda_runtime_api.h>
#endif

#define OAR_GPU_NAME "cuda"
#define OAR_GPU_VENDOR_NAME "NVIDIA"
#define OAR_GPU_API_PREFIX "cuda"
#define OAR_GPU_FN(name) cuda##name

using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
using gpuDeviceProp_t = cudaDeviceProp;
inline constexpr gpuError_t gpuSuccess = cudaSuccess;
inline constexpr gpuError_t gpuErrorNotReady = cudaErrorNotReady;
inline constexpr gpuError_t gpuErrorMemoryAllocation = cudaErrorMemoryAllocation;
inline constexpr gpuError_t gpuErrorInvalidValue = cudaErrorInvalidValue;
inline constexpr gpuError_t gpuErrorNoDevice = cudaErrorNoDevice;
inline constexpr gpuError_t gpuErrorInsufficientDriver = cudaErrorInsufficientDriver;
inline constexpr gpuError_t gpuErrorInitializationError = cudaErrorInitializationError;
inline constexpr unsigned gpuStreamNonBlocking = cudaStreamNonBlocking;
inline constexpr unsigned gpuEventDisableTiming = cudaEventDisableTiming;
inline constexpr unsigned gpuHostAllocDefault = cudaHostAllocDefault;
inline constexpr auto gpuMemcpyDefault = cudaMemcpyDefault;
inline constexpr auto gpuDevAttrMemoryClockRate = cudaDevAttrMemoryClockRate;
inline constexpr auto gpuDevAttrMemoryBusWidth = cudaDevAttrGlobalMemoryBusWidth;

#define gpuHostAlloc cudaHostAlloc
#define gpuFreeHost cudaFreeHost
#define gpuLaunchHostFunc cudaLaunchHostFunc

#elif defined(OAR_GPU_HIP)
#if !defined(__HIP_PLATFORM_AMD__)
#define __HIP_PLATFORM_AMD__ 1  // NOLINT: the macro HIP's headers select the AMD backend with
#endif
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <hip/hip_runtime_api.h>
#endif

#define OAR_GPU_NAME "hip"
#define OAR_GPU_VENDOR_NAME "AMD"
#define OAR_GPU_API_PREFIX "hip"
#define OAR_GPU_FN(name) hip##name

using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
using gpuDeviceProp_t = hipDeviceProp_t;
inline constexpr gpuError_t gpuSuccess = hipSuccess;
inline constexpr gpuError_t gpuErrorNotReady = hipErrorNotReady;
inline constexpr gpuError_t gpuErrorMemoryAllocation = hipErrorOutOfMemory;
inline constexpr gpuError_t gpuErrorInvalidValue = hipErrorInvalidValue;
inline constexpr gpuError_t gpuErrorNoDevice = hipErrorNoDevice;
inline constexpr gpuError_t gpuErrorInsufficientDriver = hipErrorInsufficientDriver;
inline constexpr gpuError_t gpuErrorInitializationError = hipErrorNotInitialized;
inline constexpr unsigned gpuStreamNonBlocking = hipStreamNonBlocking;
inline constexpr unsigned gpuEventDisableTiming = hipEventDisableTiming;
inline constexpr unsigned gpuHostAllocDefault = hipHostMallocDefault;
inline constexpr auto gpuMemcpyDefault = hipMemcpyDefault;
inline constexpr auto gpuDevAttrMemoryClockRate = hipDeviceAttributeMemoryClockRate;
inline constexpr auto gpuDevAttrMemoryBusWidth = hipDeviceAttributeMemoryBusWidth;

#define gpuHostAlloc hipHostMalloc
#define gpuFreeHost hipHostFree

#elif defined(OAR_GPU_EMU)
#include "plugins/gpu_emu/emu_runtime.h"
#if defined(OAR_GPU_EMU_KERNELS)
#include "plugins/gpu_emu/emu_kernel.h"
#define OAR_GPU_LAUNCH(grid, block, stream, ...) \
  ::oar::gpu::emu::MakeLauncher((grid), (block), (stream), __VA_ARGS__, #__VA_ARGS__)
#endif

#define OAR_GPU_NAME "gpu_emu"
#define OAR_GPU_VENDOR_NAME "Oar (host-CPU emulator)"
#define OAR_GPU_API_PREFIX "emu"
#define OAR_GPU_FN(name) emu##name

using gpuError_t = emuError_t;
using gpuStream_t = emuStream_t;
using gpuEvent_t = emuEvent_t;
using gpuDeviceProp_t = emuDeviceProp;
inline constexpr gpuError_t gpuSuccess = emuSuccess;
inline constexpr gpuError_t gpuErrorNotReady = emuErrorNotReady;
inline constexpr gpuError_t gpuErrorMemoryAllocation = emuErrorMemoryAllocation;
inline constexpr gpuError_t gpuErrorInvalidValue = emuErrorInvalidValue;
inline constexpr gpuError_t gpuErrorNoDevice = emuErrorNoDevice;
inline constexpr gpuError_t gpuErrorInsufficientDriver = emuErrorInsufficientDriver;
inline constexpr gpuError_t gpuErrorInitializationError = emuErrorInitializationError;
inline constexpr unsigned gpuStreamNonBlocking = emuStreamNonBlocking;
inline constexpr unsigned gpuEventDisableTiming = emuEventDisableTiming;
inline constexpr unsigned gpuHostAllocDefault = emuHostAllocDefault;
inline constexpr auto gpuMemcpyDefault = emuMemcpyDefault;
inline constexpr auto gpuDevAttrMemoryClockRate = emuDevAttrMemoryClockRate;
inline constexpr auto gpuDevAttrMemoryBusWidth = emuDevAttrGlobalMemoryBusWidth;

#define gpuHostAlloc emuHostAlloc
#define gpuFreeHost emuFreeHost
#define gpuLaunchHostFunc emuLaunchHostFunc
#endif

// The runtime functions every vendor names alike after its prefix (cudaMalloc, hipMalloc, emuMalloc);
// the ones named differently are mapped in the vendor's block above.
#define gpuGetErrorString OAR_GPU_FN(GetErrorString)
#define gpuGetErrorName OAR_GPU_FN(GetErrorName)
#define gpuGetLastError OAR_GPU_FN(GetLastError)
#define gpuGetDeviceCount OAR_GPU_FN(GetDeviceCount)
#define gpuGetDeviceProperties OAR_GPU_FN(GetDeviceProperties)
#define gpuDeviceGetAttribute OAR_GPU_FN(DeviceGetAttribute)
#define gpuSetDevice OAR_GPU_FN(SetDevice)
#define gpuDeviceSynchronize OAR_GPU_FN(DeviceSynchronize)
#define gpuDeviceCanAccessPeer OAR_GPU_FN(DeviceCanAccessPeer)
#define gpuDeviceEnablePeerAccess OAR_GPU_FN(DeviceEnablePeerAccess)
#define gpuMemGetInfo OAR_GPU_FN(MemGetInfo)
#define gpuMalloc OAR_GPU_FN(Malloc)
#define gpuFree OAR_GPU_FN(Free)
#define gpuMemcpyAsync OAR_GPU_FN(MemcpyAsync)
#define gpuMemcpyPeerAsync OAR_GPU_FN(MemcpyPeerAsync)
#define gpuMemsetAsync OAR_GPU_FN(MemsetAsync)
#define gpuStreamCreateWithFlags OAR_GPU_FN(StreamCreateWithFlags)
#define gpuStreamDestroy OAR_GPU_FN(StreamDestroy)
#define gpuStreamSynchronize OAR_GPU_FN(StreamSynchronize)
#define gpuStreamQuery OAR_GPU_FN(StreamQuery)
#define gpuStreamWaitEvent OAR_GPU_FN(StreamWaitEvent)
#define gpuEventCreateWithFlags OAR_GPU_FN(EventCreateWithFlags)
#define gpuEventDestroy OAR_GPU_FN(EventDestroy)
#define gpuEventRecord OAR_GPU_FN(EventRecord)
#define gpuEventQuery OAR_GPU_FN(EventQuery)
#define gpuEventSynchronize OAR_GPU_FN(EventSynchronize)
#define gpuEventElapsedTime OAR_GPU_FN(EventElapsedTime)
#define gpuEventCreate OAR_GPU_FN(EventCreate)

#endif  // OAR_PLUGINS_GPU_COMMON_VENDOR_H_
