// The vendor shim: one name for each runtime entity the shared GPU code uses, mapped to the CUDA runtime
// (OAR_GPU_CUDA) or to HIP (OAR_GPU_HIP). Everything in plugins/gpu_common is written against these
// `gpu*` names and compiled once per vendor; nothing else in the tree may include a vendor header.
//
// The host sources (.cc) see only the runtime API header and are compiled by the host C++ compiler;
// the kernel source (kernels.cu) sees the full runtime and is compiled by nvcc or hipcc.
#ifndef OAR_PLUGINS_GPU_COMMON_VENDOR_H_
#define OAR_PLUGINS_GPU_COMMON_VENDOR_H_

#if defined(OAR_GPU_CUDA) == defined(OAR_GPU_HIP)
#error "define exactly one of OAR_GPU_CUDA and OAR_GPU_HIP"
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

#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuSetDevice cudaSetDevice
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuDeviceCanAccessPeer cudaDeviceCanAccessPeer
#define gpuDeviceEnablePeerAccess cudaDeviceEnablePeerAccess
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc cudaHostAlloc
#define gpuFreeHost cudaFreeHost
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyPeerAsync cudaMemcpyPeerAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamQuery cudaStreamQuery
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventQuery cudaEventQuery
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventCreate cudaEventCreate

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

#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuSetDevice hipSetDevice
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuDeviceCanAccessPeer hipDeviceCanAccessPeer
#define gpuDeviceEnablePeerAccess hipDeviceEnablePeerAccess
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc hipHostMalloc
#define gpuFreeHost hipHostFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyPeerAsync hipMemcpyPeerAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamQuery hipStreamQuery
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventQuery hipEventQuery
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventCreate hipEventCreate
#endif

#endif  // OAR_PLUGINS_GPU_COMMON_VENDOR_H_
