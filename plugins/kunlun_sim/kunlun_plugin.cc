// The "kunlun_sim" plugin: a simulated Kunlun-style XPU (clusters of cores with a small local memory
// each), built only on the SDK plus the shared simulator (plugins/common/sim).
//
// Vendor quirk exercised here: it supports only part of the op x dtype matrix — no float64 at all, and
// int64 only in copy, cast and fill and as the indices of indexing ops (gather, index_select,
// scatter_add, topk, argmax, argmin, max_pool2d) — and says so honestly: only those keys are registered
// and `supports` applies the same rule, so the core falls back to cpu for everything else.
// Elementwise ops, copy, cast, fill, sum and mean run tiled through local memory (tiling.h); every other
// op runs as one host kernel on the stream's worker with a roofline time.
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/sim/ccl.h"
#include "plugins/common/sim/device_api.h"
#include "plugins/common/sim/kernels.h"
#include "plugins/common/sim/simulator.h"
#include "plugins/kunlun_sim/tiling.h"

#ifndef OAR_VERSION_STRING
#error "OAR_VERSION_STRING must be defined by the build"
#endif

namespace oar::kunlun {
namespace {

using sdk::Guard;

constexpr const char* kName = "kunlun_sim";

sim::DeviceModel Model() {
  sim::DeviceModel m;
  m.name = "Kunlun XPU (simulated, 8 clusters x 8 cores)";
  m.vendor = "Oar simulator (Kunlun-style)";
  m.compute_units = kGeometry.cores();
  m.local_memory_per_unit = kGeometry.local_bytes;
  m.peak_flops_f32 = 32e12;
  m.peak_flops_f16 = 128e12;
  m.peak_flops_bf16 = 128e12;
  m.memory_bandwidth = 512e9;
  m.host_link_bandwidth = 32e9;
  m.peer_bandwidth = 100e9;
  m.launch_overhead_ns = 4000;
  m.copy_overhead_ns = 2000;
  m.alignment = 64;
  m.dtypes = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT16, OAR_DTYPE_BFLOAT16, OAR_DTYPE_INT8,
              OAR_DTYPE_UINT8,   OAR_DTYPE_INT32,   OAR_DTYPE_BOOL};
  m.extra_ints = {{"clusters", kGeometry.clusters}, {"cores_per_cluster", kGeometry.cores_per_cluster}};
  m.extra_strings = {{"int64_support", "copy, cast, fill; index operands of indexing ops"}};
  return m;
}

/// Key positions (inputs then outputs) where an indexing op takes or produces int64 indices.
std::vector<int> IndexPositions(std::string_view op) {
  if (op == "gather" || op == "index_select" || op == "scatter_add") return {1};  // the index input
  if (op == "argmax" || op == "argmin") return {1};                               // the index output
  if (op == "topk" || op == "max_pool2d") return {2};                             // values, then indices
  return {};
}

/// The support rule, used both to pick the keys to register and by `supports`: no float64 at all;
/// int64 in copy, cast and fill (any operand) and as the index operand of indexing ops only.
std::string Unsupported(std::string_view op, std::span<const int32_t> dtypes) {
  if (op == "batch_norm_train" || op == "batch_norm_train_grad") {
    // Their sums are the host `mean` / `sum` kernels' order; kunlun_sim's reductions are tiled (another
    // order), so batch_norm runs its composed ops here, as before, and keeps their values.
    return "kunlun_sim has no '" + std::string(op) + "' (its reductions are tiled; batch_norm runs the composed ops)";
  }
  const std::vector<int> index_positions = IndexPositions(op);
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (dtypes[i] == OAR_DTYPE_FLOAT64) return "kunlun_sim has no float64 arithmetic";
    if (dtypes[i] != OAR_DTYPE_INT64 || op == "copy" || op == "cast" || op == "fill") continue;
    if (std::find(index_positions.begin(), index_positions.end(), static_cast<int>(i)) != index_positions.end()) {
      continue;
    }
    return "kunlun_sim supports int64 only in copy, cast and fill and as indices of indexing ops, not as data "
           "of '" +
           std::string(op) + "'";
  }
  return {};
}

std::string KunlunSupports(const sim::SimKernel& kernel, const oar_kernel_call_t&) {
  return Unsupported(kernel.op, kernel.dtypes);
}

/// Ops whose kernels follow the elementwise contract (every input already broadcast to the output's
/// shape), plus copy, cast and fill: they run tiled through local memory.
bool Tiled(std::string_view op) {
  static constexpr std::string_view kOps[] = {
      "add", "sub",         "mul",        "div",   "maximum",     "minimum", "pow",  "neg",      "exp",  "relu",
      "abs", "sign",        "log",        "log1p", "sqrt",        "rsqrt",   "sin",  "cos",      "tanh", "sigmoid",
      "erf", "reciprocal",  "isnan",      "isinf", "logical_not", "eq",      "ne",   "lt",       "le",   "gt",
      "ge",  "logical_and", "logical_or", "where", "copy",        "cast",    "fill", "relu_grad"};
  return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
}

/// fused_adam is elementwise over its param, grad, m and v and writes three results: timed as the tiled
/// elementwise kernels are, over those seven operands (its nine 0-d scalars, read once, are left out). It runs
/// as the host kernel (its arithmetic is the same tile by tile).
sim::Cost FusedAdamCost(const sim::SimKernel& kernel, const sim::DeviceModel& model, const oar_kernel_call_t& call) {
  oar_kernel_call_t tensors = call;
  tensors.num_inputs = std::min(call.num_inputs, 4);
  return TiledElementwiseCost(kernel, model, tensors);
}

/// fused_tanh_grad and fused_sigmoid_grad are elementwise over grad and the forward's result: timed as the tiled
/// elementwise kernels are, over those and the result (the 0-d `one`, read once, is left out).
sim::Cost FusedActGradCost(const sim::SimKernel& kernel, const sim::DeviceModel& model, const oar_kernel_call_t& call) {
  oar_kernel_call_t tensors = call;
  tensors.num_inputs = std::min(call.num_inputs, 2);
  return TiledElementwiseCost(kernel, model, tensors);
}

// Never destroyed: the stream workers run these kernels until the process ends, so kernels still queued
// (or just run, unsynchronised) at exit must not see the set torn down by static destructors.
sim::KernelSet& Kernels() {
  static sim::KernelSet* const set = [] {
    sim::KernelSet s;
    s.AddHostKernels(
        [](std::string_view op, std::span<const int32_t> dtypes) { return Unsupported(op, dtypes).empty(); });
    for (sim::SimKernel& k : s.kernels()) {
      k.supports = KunlunSupports;
      if (Tiled(k.op)) {
        k.run = RunTiledElementwise;
        k.cost = TiledElementwiseCost;
      } else if (k.op == "sum" || k.op == "mean") {
        k.run = RunTiledReduction;
        k.cost = TiledReductionCost;
      } else if (k.op == "fused_adam") {
        k.cost = FusedAdamCost;
      } else if (k.op == "fused_tanh_grad" || k.op == "fused_sigmoid_grad") {
        k.cost = FusedActGradCost;
      }
    }
    return new sim::KernelSet(std::move(s));
  }();
  return *set;
}

oar_status_t* Initialize() {
  return Guard([] {
    sim::PluginSpec spec;
    spec.name = kName;
    spec.env_prefix = "OAR_KUNLUN_SIM";
    spec.model = Model();
    sim::Simulator::Initialize(spec);
  });
}

oar_status_t* RegisterKernels(oar_kernel_registrar_t* registrar) {
  return Guard([&] { Kernels().Register(registrar); });
}

const oar_kernel_api_t kKernelApi = sim::MakeKernelApi(RegisterKernels);

const oar_plugin_api_t kApi = sim::MakePluginApi(kName, OAR_VERSION_STRING, Initialize, &kKernelApi, nullptr);

}  // namespace
}  // namespace oar::kunlun

OAR_DEFINE_PLUGIN(&oar::kunlun::kApi)
