// The GPU emulator itself: it is the test vehicle for the shared GPU sources, so it must keep the
// semantics those sources rely on — barriers that separate the phases of a block, shared memory per
// block, in-order asynchronous streams, events across streams, launch-configuration errors, sticky
// faults, allocation limits — and must not pass code a GPU would reject.
//
// Run by ctest with OAR_GPU_EMU_DEVICES=3 (devices 1 and 2 take the sticky faults), once in the default
// thread order and once with OAR_GPU_EMU_SCHEDULE=reverse.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "plugins/gpu_common/vendor.h"

namespace {

constexpr unsigned kBlock = 128;

bool ReverseSchedule() {
  const char* s = std::getenv("OAR_GPU_EMU_SCHEDULE");
  return s != nullptr && std::string(s) == "reverse";
}

// ---- kernels ------------------------------------------------------------------------------------

/// out[b * n + t] = (t + 1)^2 of the thread one to the right, read from shared memory after a barrier.
__global__ void RotateThroughShared(int* out) {
  __shared__ int cell[kBlock];
  const unsigned t = threadIdx.x;
  cell[t] = static_cast<int>((t + 1) * (t + 1));
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = cell[(t + 1) % blockDim.x];
}

/// The same without the barrier: correct only if every thread happens to run before its left neighbour
/// reads, which the reverse schedule guarantees and the forward one breaks.
__global__ void RotateWithoutBarrier(int* out) {
  __shared__ int cell[kBlock];
  const unsigned t = threadIdx.x;
  cell[t] = static_cast<int>((t + 1) * (t + 1));
  out[blockIdx.x * blockDim.x + t] = cell[(t + 1) % blockDim.x];
}

/// Per-block tree sum of x (blockDim.x a power of two), like the plugin's reductions.
__global__ void BlockSums(const int* x, int* sums, int n) {
  __shared__ int partial[kBlock];
  const unsigned t = threadIdx.x;
  const int i = static_cast<int>(blockIdx.x * blockDim.x + t);
  partial[t] = i < n ? x[i] : 0;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = partial[0];
}

/// Threads 0..15 wait at a barrier the others never reach: undefined on a GPU, a fault here.
__global__ void DivergentBarrier(int* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

/// Thread 0 skips the barrier the others wait at.
__global__ void BarrierWithoutThreadZero(int* out) {
  if (threadIdx.x != 0) __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void SmallestNegative(const long long* x, unsigned long long* first, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n && x[i] < 0) atomicMin(first, static_cast<unsigned long long>(i));
}

__global__ void Indices3D(int* out) {
  const unsigned x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  const unsigned z = blockIdx.z;
  out[(z * gridDim.y * blockDim.y + y) * gridDim.x * blockDim.x + x] = static_cast<int>(x + 100 * y + 10000 * z);
}

// ---- helpers ------------------------------------------------------------------------------------

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : size(bytes) { EXPECT_EQ(gpuMalloc(&ptr, bytes), gpuSuccess); }
  ~DeviceBuffer() { (void)gpuFree(ptr); }
  template <typename T>
  std::vector<T> Read(gpuStream_t s) const {
    std::vector<T> host(size / sizeof(T));
    EXPECT_EQ(gpuMemcpyAsync(host.data(), ptr, size, gpuMemcpyDefault, s), gpuSuccess);
    EXPECT_EQ(gpuStreamSynchronize(s), gpuSuccess);
    return host;
  }
  void* ptr = nullptr;
  size_t size;
};

struct Stream {
  Stream() { EXPECT_EQ(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), gpuSuccess); }
  ~Stream() { (void)gpuStreamDestroy(s); }
  gpuStream_t s = nullptr;
};

class Emu : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(gpuSetDevice(0), gpuSuccess); }
};

// ---- tests --------------------------------------------------------------------------------------

TEST_F(Emu, ABarrierSeparatesThePhasesOfEveryBlock) {
  Stream s;
  DeviceBuffer out(3 * kBlock * sizeof(int));
  OAR_GPU_LAUNCH(dim3(3), dim3(kBlock), s.s, RotateThroughShared)(static_cast<int*>(out.ptr));
  ASSERT_EQ(gpuGetLastError(), gpuSuccess);
  const std::vector<int> got = out.Read<int>(s.s);
  for (unsigned b = 0; b < 3; ++b) {
    for (unsigned t = 0; t < kBlock; ++t) {
      const unsigned right = (t + 1) % kBlock;
      ASSERT_EQ(got[b * kBlock + t], static_cast<int>((right + 1) * (right + 1))) << "block " << b << " thread " << t;
    }
  }
}

TEST_F(Emu, AMissingBarrierGivesWrongResultsInOneOfTheTwoSchedules) {
  Stream s;
  DeviceBuffer out(kBlock * sizeof(int));
  OAR_GPU_LAUNCH(dim3(1), dim3(kBlock), s.s, RotateWithoutBarrier)(static_cast<int*>(out.ptr));
  const std::vector<int> got = out.Read<int>(s.s);
  int wrong = 0;
  for (unsigned t = 0; t < kBlock; ++t) {
    const unsigned right = (t + 1) % kBlock;
    wrong += got[t] != static_cast<int>((right + 1) * (right + 1));
  }
  // Without the barrier a thread reads its neighbour's cell before or after the write, depending on the
  // order threads run in. In thread order every read but the last one is early (stale).
  if (ReverseSchedule()) {
    EXPECT_LE(wrong, 1);
  } else {
    EXPECT_GE(wrong, static_cast<int>(kBlock) - 1);
  }
}

TEST_F(Emu, SharedMemoryTreeReductionsOverManyBlocks) {
  Stream s;
  const int n = 1000;
  std::vector<int> x(n);
  std::iota(x.begin(), x.end(), -300);
  DeviceBuffer dx(n * sizeof(int)), sums(8 * sizeof(int));
  ASSERT_EQ(gpuMemcpyAsync(dx.ptr, x.data(), dx.size, gpuMemcpyDefault, s.s), gpuSuccess);
  OAR_GPU_LAUNCH(dim3(8), dim3(kBlock), s.s, BlockSums)
  (static_cast<const int*>(dx.ptr), static_cast<int*>(sums.ptr), n);
  const std::vector<int> got = sums.Read<int>(s.s);
  for (int b = 0; b < 8; ++b) {
    int expected = 0;
    for (int i = b * static_cast<int>(kBlock); i < std::min(n, (b + 1) * static_cast<int>(kBlock)); ++i) {
      expected += x[i];
    }
    EXPECT_EQ(got[b], expected) << "block " << b;
  }
}

TEST_F(Emu, ThreeDimensionalIndices) {
  Stream s;
  DeviceBuffer out(8 * 6 * 2 * sizeof(int));
  OAR_GPU_LAUNCH(dim3(2, 3, 2), dim3(4, 2, 1), s.s, Indices3D)(static_cast<int*>(out.ptr));
  const std::vector<int> got = out.Read<int>(s.s);
  for (int z = 0; z < 2; ++z) {
    for (int y = 0; y < 6; ++y) {
      for (int x = 0; x < 8; ++x) EXPECT_EQ(got[(z * 6 + y) * 8 + x], x + 100 * y + 10000 * z);
    }
  }
}

TEST_F(Emu, AtomicMinAcrossBlocks) {
  Stream s;
  const int n = 700;
  std::vector<long long> x(n, 1);
  x[650] = x[413] = x[699] = -1;
  DeviceBuffer dx(n * sizeof(long long)), first(sizeof(unsigned long long));
  ASSERT_EQ(gpuMemcpyAsync(dx.ptr, x.data(), dx.size, gpuMemcpyDefault, s.s), gpuSuccess);
  ASSERT_EQ(gpuMemsetAsync(first.ptr, 0xff, first.size, s.s), gpuSuccess);
  OAR_GPU_LAUNCH(dim3(6), dim3(kBlock), s.s, SmallestNegative)
  (static_cast<const long long*>(dx.ptr), static_cast<unsigned long long*>(first.ptr), n);
  EXPECT_EQ(first.Read<unsigned long long>(s.s)[0], 413u);
}

TEST_F(Emu, AnInvalidLaunchConfigurationIsTheCallersLastError) {
  Stream s;
  DeviceBuffer out(kBlock * sizeof(int));
  OAR_GPU_LAUNCH(dim3(1), dim3(2048), s.s, RotateThroughShared)(static_cast<int*>(out.ptr));
  const gpuError_t e = gpuGetLastError();
  EXPECT_EQ(e, emuErrorInvalidConfiguration);
  EXPECT_STREQ(gpuGetErrorString(e), "invalid configuration argument");
  EXPECT_EQ(gpuGetLastError(), gpuSuccess);  // read and cleared, not sticky
  OAR_GPU_LAUNCH(dim3(0), dim3(32), s.s, RotateThroughShared)(static_cast<int*>(out.ptr));
  EXPECT_EQ(gpuGetLastError(), emuErrorInvalidConfiguration);
  EXPECT_EQ(gpuStreamSynchronize(s.s), gpuSuccess);
}

TEST_F(Emu, StreamsRunInOrderAndWaitForEventsOfOtherStreams) {
  Stream a, b;
  DeviceBuffer buf(1 << 20), copy(1 << 20);
  std::atomic<bool> slow_done{false};
  // a: a slow host function, then a memset; b waits for a's event, then copies the memset's result.
  ASSERT_EQ(gpuLaunchHostFunc(
                a.s,
                [](void* flag) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(50));
                  static_cast<std::atomic<bool>*>(flag)->store(true);
                },
                &slow_done),
            gpuSuccess);
  ASSERT_EQ(gpuMemsetAsync(buf.ptr, 0x5a, buf.size, a.s), gpuSuccess);
  gpuEvent_t done = nullptr;
  ASSERT_EQ(gpuEventCreateWithFlags(&done, gpuEventDisableTiming), gpuSuccess);
  ASSERT_EQ(gpuEventRecord(done, a.s), gpuSuccess);
  EXPECT_EQ(gpuEventQuery(done), gpuErrorNotReady);  // the host function is still sleeping
  EXPECT_EQ(gpuStreamQuery(a.s), gpuErrorNotReady);
  ASSERT_EQ(gpuStreamWaitEvent(b.s, done, 0), gpuSuccess);
  ASSERT_EQ(gpuMemcpyAsync(copy.ptr, buf.ptr, buf.size, gpuMemcpyDefault, b.s), gpuSuccess);
  ASSERT_EQ(gpuEventDestroy(done), gpuSuccess);  // allowed while the wait is pending
  const std::vector<uint8_t> got = copy.Read<uint8_t>(b.s);
  EXPECT_TRUE(slow_done.load());
  for (size_t i = 0; i < got.size(); i += 4093) ASSERT_EQ(got[i], 0x5a) << i;
  EXPECT_EQ(gpuStreamQuery(a.s), gpuSuccess);
}

TEST_F(Emu, MemoryIsLimitedAndCopiesStayInsideAllocations) {
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(gpuMemGetInfo(&free_bytes, &total), gpuSuccess);
  void* p = nullptr;
  EXPECT_EQ(gpuMalloc(&p, total + 1), gpuErrorMemoryAllocation);
  EXPECT_EQ(gpuGetLastError(), gpuErrorMemoryAllocation);
  EXPECT_EQ(gpuGetLastError(), gpuSuccess);

  Stream s;
  DeviceBuffer small(100);
  std::vector<uint8_t> host(200);
  EXPECT_EQ(gpuMemcpyAsync(small.ptr, host.data(), 101, gpuMemcpyDefault, s.s), gpuErrorInvalidValue);
  EXPECT_EQ(gpuMemcpyAsync(host.data(), static_cast<char*>(small.ptr) + 50, 51, gpuMemcpyDefault, s.s),
            gpuErrorInvalidValue);
  EXPECT_EQ(gpuMemcpyAsync(host.data(), static_cast<char*>(small.ptr) + 50, 50, gpuMemcpyDefault, s.s), gpuSuccess);
  int local = 0;
  EXPECT_EQ(gpuFree(&local), gpuErrorInvalidValue);  // not a device allocation
  (void)gpuGetLastError();
  EXPECT_EQ(gpuStreamSynchronize(s.s), gpuSuccess);
}

TEST_F(Emu, ABarrierReachedByPartOfABlockIsAStickyLaunchFailure) {
  ASSERT_EQ(gpuSetDevice(1), gpuSuccess);
  Stream s;
  DeviceBuffer out(kBlock * sizeof(int));
  OAR_GPU_LAUNCH(dim3(2), dim3(kBlock), s.s, DivergentBarrier)(static_cast<int*>(out.ptr));
  EXPECT_EQ(gpuGetLastError(), gpuSuccess);  // the launch itself was valid
  const gpuError_t e = gpuStreamSynchronize(s.s);
  ASSERT_EQ(e, emuErrorLaunchFailure);
  const std::string what = gpuGetErrorString(e);
  EXPECT_NE(what.find("DivergentBarrier"), std::string::npos) << what;
  EXPECT_NE(what.find("barrier divergence in block (0,0,0)"), std::string::npos) << what;
  if (!ReverseSchedule()) {  // thread 0 waits first: the others are found missing at the barrier
    EXPECT_NE(what.find("16 of 128 threads reached __syncthreads #1"), std::string::npos) << what;
  }
  void* p = nullptr;
  EXPECT_EQ(gpuMalloc(&p, 16), emuErrorLaunchFailure);  // sticky: the device context is lost
  EXPECT_EQ(gpuDeviceSynchronize(), emuErrorLaunchFailure);

  ASSERT_EQ(gpuSetDevice(0), gpuSuccess);  // other devices are unaffected
  EXPECT_EQ(gpuMalloc(&p, 16), gpuSuccess);
  EXPECT_EQ(gpuFree(p), gpuSuccess);
}

TEST_F(Emu, ABarrierThreadZeroSkipsIsAStickyLaunchFailureToo) {
  ASSERT_EQ(gpuSetDevice(2), gpuSuccess);
  Stream s;
  DeviceBuffer out(kBlock * sizeof(int));
  OAR_GPU_LAUNCH(dim3(1), dim3(kBlock), s.s, BarrierWithoutThreadZero)(static_cast<int*>(out.ptr));
  const gpuError_t e = gpuStreamSynchronize(s.s);
  ASSERT_EQ(e, emuErrorLaunchFailure);
  const std::string what = gpuGetErrorString(e);
  EXPECT_NE(what.find("barrier divergence"), std::string::npos) << what;
}

}  // namespace
