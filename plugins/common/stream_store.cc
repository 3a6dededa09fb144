// StreamCopy and friends (stream_store.h): SSE2 non-temporal stores on x86-64, plain copies elsewhere.
#include "plugins/common/stream_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace oar::host {

int64_t StreamingThresholdBytes() {
#if defined(__SSE2__)
  // sysfs first: in a VM sysconf may report the host's cache (256 MiB on the 2-vCPU machine this was
  // measured on, where sysfs and lscpu say 32 MiB), and no output would ever be streamed.
  static const int64_t threshold = [] {
    if (const char* env = std::getenv("OAR_STREAM_MIN_BYTES"); env != nullptr && std::atoll(env) > 0) {
      return static_cast<int64_t>(std::atoll(env));
    }
    int64_t bytes = 0;
    if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
      long kib = 0;
      char unit = 0;
      if (std::fscanf(f, "%ld%c", &kib, &unit) >= 1) {
        bytes = static_cast<int64_t>(kib) * (unit == 'M' ? 1 << 20 : 1 << 10);
      }
      std::fclose(f);
    }
    if (bytes <= 0) bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return bytes > 0 ? bytes : int64_t{32} << 20;
  }();
  return threshold;
#else
  return 0;
#endif
}

void StreamCopy(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, static_cast<size_t>((16 - reinterpret_cast<uintptr_t>(d) % 16) % 16));
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; d += 64, s += 64, bytes -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  for (; bytes >= 16; d += 16, s += 16, bytes -= 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  }
  std::memcpy(d, s, bytes);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace oar::host
