// The host-side API of the GPU emulator: the subset of a CUDA/HIP-style runtime that the shared GPU
// plugin code (plugins/gpu_common) calls through vendor.h, implemented on the host CPU.
//
// What it is for: running the *same* kernel source and the *same* plugin host code that the cuda and
// hip plugins are built from, on a machine without a GPU, under the whole test and conformance suite.
// It is a test vehicle, never installed and never discovered by default (docs/hardware.md).
//
// Semantics kept from the real runtimes, because the plugin code depends on them:
//  - streams are asynchronous and in order (one worker thread each); events record a point in a stream;
//    a wait makes a stream wait for an event recorded on another; host functions run on the stream's
//    worker thread in stream order;
//  - errors: functions return an emuError_t; a launch with an invalid configuration sets the calling
//    thread's last error (emuGetLastError clears it); a fault inside a kernel (a barrier reached by only
//    part of a block, an out-of-range device address passed to a copy) is *sticky*: every later call
//    on that device returns it, like an illegal-address fault on a GPU;
//  - device memory is host memory the emulator tracks: copies check that device ranges lie inside a live
//    allocation, and allocation fails with emuErrorMemoryAllocation beyond the device's memory size.
#ifndef OAR_PLUGINS_GPU_EMU_EMU_RUNTIME_H_
#define OAR_PLUGINS_GPU_EMU_EMU_RUNTIME_H_

#include <cstddef>
#include <cstdint>

// Global names with the `emu` prefix, like the C APIs of the real runtimes they stand for.

enum emuError_t : int {
  emuSuccess = 0,
  emuErrorInvalidValue = 1,
  emuErrorMemoryAllocation = 2,
  emuErrorInitializationError = 3,
  emuErrorInvalidConfiguration = 9,
  emuErrorInvalidDevice = 101,
  emuErrorInvalidResourceHandle = 400,
  emuErrorNotReady = 600,
  emuErrorIllegalAddress = 700,
  emuErrorLaunchFailure = 719,
  emuErrorNoDevice = 100,
  emuErrorInsufficientDriver = 35,
};

namespace oar::gpu::emu {
struct EmuStream;
struct EmuEvent;
/// True when [ptr, ptr + size) lies inside one live allocation of `device` (kernel arguments: a buffer
/// must be device memory).
bool InsideAllocation(int device, const void* ptr, size_t size);
}  // namespace oar::gpu::emu
using emuStream_t = oar::gpu::emu::EmuStream*;
using emuEvent_t = oar::gpu::emu::EmuEvent*;

struct emuDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int multiProcessorCount;
  int major;
  int minor;
};

enum emuMemcpyKind { emuMemcpyDefault = 4 };
enum emuDeviceAttr { emuDevAttrMemoryClockRate = 36, emuDevAttrGlobalMemoryBusWidth = 37 };
inline constexpr unsigned emuStreamNonBlocking = 1;
inline constexpr unsigned emuEventDisableTiming = 2;
inline constexpr unsigned emuHostAllocDefault = 0;

using emuHostFn_t = void (*)(void* user_data);

const char* emuGetErrorString(emuError_t error);
const char* emuGetErrorName(emuError_t error);
emuError_t emuGetLastError();

/// Devices: OAR_GPU_EMU_DEVICES (default 2, 0 allowed: the no-device path), each with
/// OAR_GPU_EMU_MEMORY_MB of memory (default 4096).
emuError_t emuGetDeviceCount(int* count);
emuError_t emuGetDeviceProperties(emuDeviceProp* prop, int device);
emuError_t emuDeviceGetAttribute(int* value, emuDeviceAttr attr, int device);
emuError_t emuSetDevice(int device);
emuError_t emuDeviceSynchronize();
emuError_t emuDeviceCanAccessPeer(int* can, int device, int peer);
emuError_t emuDeviceEnablePeerAccess(int peer, unsigned flags);
emuError_t emuMemGetInfo(size_t* free_bytes, size_t* total_bytes);

emuError_t emuMalloc(void** ptr, size_t size);
emuError_t emuFree(void* ptr);
emuError_t emuHostAlloc(void** ptr, size_t size, unsigned flags);
emuError_t emuFreeHost(void* ptr);
emuError_t emuMemcpyAsync(void* dst, const void* src, size_t size, emuMemcpyKind kind, emuStream_t stream);
emuError_t emuMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t size,
                              emuStream_t stream);
emuError_t emuMemsetAsync(void* dst, int value, size_t size, emuStream_t stream);

emuError_t emuStreamCreateWithFlags(emuStream_t* stream, unsigned flags);
emuError_t emuStreamDestroy(emuStream_t stream);
emuError_t emuStreamSynchronize(emuStream_t stream);
emuError_t emuStreamQuery(emuStream_t stream);
emuError_t emuStreamWaitEvent(emuStream_t stream, emuEvent_t event, unsigned flags);
emuError_t emuLaunchHostFunc(emuStream_t stream, emuHostFn_t fn, void* user_data);

emuError_t emuEventCreateWithFlags(emuEvent_t* event, unsigned flags);
emuError_t emuEventCreate(emuEvent_t* event);
emuError_t emuEventDestroy(emuEvent_t event);
emuError_t emuEventRecord(emuEvent_t event, emuStream_t stream);
emuError_t emuEventQuery(emuEvent_t event);
emuError_t emuEventSynchronize(emuEvent_t event);
emuError_t emuEventElapsedTime(float* ms, emuEvent_t start, emuEvent_t end);

#endif  // OAR_PLUGINS_GPU_EMU_EMU_RUNTIME_H_
