// Non-temporal ("streaming") stores for kernels whose output is larger than the last-level cache.
//
// An ordinary store first reads the destination's cache line (read for ownership), so a kernel that
// writes a large output moves its bytes twice, and evicts its inputs from the cache to hold lines that
// will not be read again soon. A non-temporal store writes whole lines to memory directly. For an output
// that does not fit in the last-level cache this is the faster way on x86-64 (an add over 2^24 floats
// went from ~70 % to ~90 % of a non-temporal copy); for a smaller one it is slower, as the next op would
// have found the output in the cache.
#ifndef OAR_PLUGINS_COMMON_STREAM_STORE_H_
#define OAR_PLUGINS_COMMON_STREAM_STORE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace oar::host {

/// Outputs of more bytes than this are worth streaming: the last-level cache's size (sysfs, else sysconf),
/// or 32 MiB where the system does not say; $OAR_STREAM_MIN_BYTES (a positive integer, read once) instead
/// when set, so that tests run the streaming paths on small outputs. 0 (never stream) on machines without
/// non-temporal stores.
int64_t StreamingThresholdBytes();

/// memcpy(dst, src, bytes) with non-temporal stores for the 16-byte aligned part of dst (ordinary ones
/// for the unaligned head and tail). The stores are weakly ordered: call StreamFence() before the
/// output is handed to another thread.
void StreamCopy(void* dst, const void* src, size_t bytes);

/// Writes the 64 bytes at `src` to the 64-byte aligned `dst` with non-temporal stores (inline: called
/// once per cache line).
inline void StreamLine(void* dst, const void* src) {
#if defined(__SSE2__)
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (int k = 0; k < 64; k += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + k), _mm_load_si128(reinterpret_cast<const __m128i*>(s + k)));
  }
#else
  std::memcpy(dst, src, 64);
#endif
}

/// Orders the calling thread's non-temporal stores before its later stores (sfence).
void StreamFence();

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_STREAM_STORE_H_
