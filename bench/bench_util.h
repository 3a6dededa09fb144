// Small helpers shared by the stand-alone benchmark programs (oar_train_step_bench, oar_predictor_bench).
#ifndef OAR_BENCH_BENCH_UTIL_H_
#define OAR_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/runtime/profiler.h"
#include "core/tensor/device.h"

namespace oar::bench {

/// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    if (comma > at) out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

/// The median of `v` (sorts it); 0 when empty.
inline double Median(std::vector<double>& v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Simulated device time (ms) of what `prof` recorded on `device`: the span from its first to its last
/// simulated activity; 0 when there is none (a real device).
inline double SimulatedSpanMs(const runtime::Profiler& prof, Device device) {
  uint64_t first = UINT64_MAX, last = 0;
  for (const runtime::Profiler::Activity& a : prof.activities()) {
    if (a.device != device.str() || !a.simulated) continue;
    first = std::min(first, a.start_ns);
    last = std::max(last, a.end_ns);
  }
  return last > first ? static_cast<double>(last - first) / 1e6 : 0.0;
}

}  // namespace oar::bench

#endif  // OAR_BENCH_BENCH_UTIL_H_
