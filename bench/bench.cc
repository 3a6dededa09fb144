#include "bench/bench.h"

#include <omp.h>

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "core/base/error.h"

namespace oar::bench {

AlignedFloats::AlignedFloats(int64_t n)
    : data_(static_cast<float*>(std::aligned_alloc(64, (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64))),
      n_(n) {
  OAR_CHECK(data_ != nullptr, kResourceExhausted, "bench: cannot allocate {} floats", n);
}

AlignedFloats::~AlignedFloats() { std::free(data_); }

void AlignedFloats::ParallelFill(float value) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n_; ++i) data_[i] = value;
}

void CopyLimit(benchmark::State& state, CopyKind kind) {
  AlignedFloats src(kStreamElements), dst(kStreamElements);
  src.ParallelFill(1);
  dst.ParallelFill(0);
#ifndef __SSE2__
  if (kind == CopyKind::kNonTemporal) {
    state.SkipWithError("non-temporal copy: x86-64 only");
    return;
  }
#endif
  for (auto _ : state) {
#pragma omp parallel
    {
      // Split points on 64-byte boundaries: aligned non-temporal stores, no shared cache lines.
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t begin = kStreamElements * t / nt / 16 * 16;
      const int64_t end = t + 1 == nt ? kStreamElements : kStreamElements * (t + 1) / nt / 16 * 16;
      const float* in = src.get();
      float* out = dst.get();
      if (kind == CopyKind::kNonTemporal) {
#ifdef __SSE2__
        for (int64_t i = begin; i < end; i += 4) _mm_stream_ps(out + i, _mm_load_ps(in + i));
        _mm_sfence();
#endif
      } else {
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) out[i] = in[i];
      }
    }
    benchmark::ClobberMemory();
  }
  if (dst.get()[kStreamElements - 1] != 1.0f) state.SkipWithError("copy did not copy");
  SetByteRate(state, 2 * kStreamBytes);
}

void SetFlopRate(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOP/s"] = benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}

void SetByteRate(benchmark::State& state, double bytes_per_iteration) {
  state.counters["B/s"] = benchmark::Counter(bytes_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::kIs1000);
}

bool SpotCheckMatmul(benchmark::State& state, const float* a, const float* b, const float* c, int64_t n) {
  // A fixed spread of (row, column) pairs, corners included.
  for (int64_t s = 0; s < 16; ++s) {
    const int64_t i = (s * 389) % n, j = (s * 617 + n - 1) % n;
    double want = 0, scale = 0;
    for (int64_t k = 0; k < n; ++k) {
      want += static_cast<double>(a[i * n + k]) * b[k * n + j];
      scale += std::abs(static_cast<double>(a[i * n + k]) * b[k * n + j]);
    }
    if (std::abs(c[i * n + j] - want) > 1e-4 * scale + 1e-6) {
      state.SkipWithError(
          fmt::format("matmul result wrong at ({}, {}): got {}, want {}", i, j, c[i * n + j], want).c_str());
      return false;
    }
  }
  return true;
}

}  // namespace oar::bench
