// Tiled execution on the simulated Kunlun clusters. Elementwise ops (and copy, cast, fill) and
// reductions (sum, mean) really run tile by tile through a core's local memory: each tile is gathered
// from device memory into a local buffer of `local_memory_per_unit` bytes, computed there by the host
// kernel on dense 1-D (elementwise) or 2-D (reduction) descriptors, and written back. A reduction whose
// reduced extent does not fit in local memory is split into chunks; the chunks' partial sums (float32,
// or int64 for integers) go to a scratch buffer in device memory and are combined by further passes
// until one value per output is left.
//
// Tiles of one kernel run one after another on the stream's worker thread; the cluster/core a tile is
// assigned to (round robin over compute_units) only feeds the time model: a kernel takes
// ceil(tiles / cores) waves of its slowest tile, each tile limited by a core's share of the device's
// bandwidth and peak FLOP/s.
#ifndef OAR_PLUGINS_KUNLUN_SIM_TILING_H_
#define OAR_PLUGINS_KUNLUN_SIM_TILING_H_

#include <cstdint>

#include "plugins/common/sim/kernels.h"

namespace oar::kunlun {

/// The cluster geometry the tiling and its time model use.
struct Geometry {
  int64_t clusters;
  int64_t cores_per_cluster;
  int64_t local_bytes;  ///< local memory per core
  int64_t cores() const { return clusters * cores_per_cluster; }
};
inline constexpr Geometry kGeometry{8, 8, 256 << 10};

/// How a kernel splits into tiles (per pass), for the time model and the tests.
struct TilePass {
  int64_t tiles = 0;
  int64_t tile_bytes = 0;  ///< bytes one full tile moves between device and local memory
  double tile_flops = 0;   ///< arithmetic of one full tile
};

/// Elementwise ops, copy, cast and fill: one pass of tiles over the output's elements.
TilePass PlanElementwise(const oar_kernel_call_t& call, const Geometry& g);
void RunTiledElementwise(const sim::SimKernel& kernel, const oar_kernel_call_t& call);
sim::Cost TiledElementwiseCost(const sim::SimKernel& kernel, const sim::DeviceModel& model,
                               const oar_kernel_call_t& call);

/// sum and mean: one pass of (output block x reduced chunk) tiles, then combining passes while more
/// than one chunk is left.
std::vector<TilePass> PlanReduction(const oar_kernel_call_t& call, const Geometry& g);
void RunTiledReduction(const sim::SimKernel& kernel, const oar_kernel_call_t& call);
sim::Cost TiledReductionCost(const sim::SimKernel& kernel, const sim::DeviceModel& model,
                             const oar_kernel_call_t& call);

}  // namespace oar::kunlun

#endif  // OAR_PLUGINS_KUNLUN_SIM_TILING_H_
