#include "bench/bench.h"

#include <cmath>

#include <fmt/format.h>

namespace oar::bench {

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
