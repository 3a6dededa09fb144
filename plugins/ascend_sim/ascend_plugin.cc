// The "ascend_sim" plugin: a simulated Ascend-style NPU, built only on the SDK plus the shared
// simulator (plugins/common/sim).
//
// Vendor quirks exercised here:
//  - private storage formats (NC1HWC0, FRACTAL_NZ) declared through oar_format_api_t, with format_cast
//    kernels and kernels that consume those formats (formats.h);
//  - a "cube" unit for matmul: float16/bfloat16 inputs, float32 accumulation. float32 matmul depends on
//    the precision mode (OAR_ASCEND_SIM_PRECISION, device attribute "precision_mode"): `exact` computes
//    it in float32 on the vector unit (slower simulated time: peak_flops_f32), `allow_fp16` rounds both
//    operands to float16 and runs it on the cube (peak_flops_f16), with float32 accumulation and a
//    float32 result;
//  - no float64 at all; 32-byte allocation alignment.
#include <atomic>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/ascend_sim/formats.h"
#include "plugins/common/host_kernels.h"
#include "plugins/common/sim/ccl.h"
#include "plugins/common/sim/device_api.h"
#include "plugins/common/sim/kernels.h"
#include "plugins/common/sim/simulator.h"

#ifndef OAR_VERSION_STRING
#error "OAR_VERSION_STRING must be defined by the build"
#endif

namespace oar::ascend {
namespace {

using sdk::Guard;

constexpr const char* kName = "ascend_sim";

/// float32 matmul on the cube through float16 (OAR_ASCEND_SIM_PRECISION=allow_fp16).
std::atomic<bool> g_allow_fp16{false};

sim::DeviceModel Model(bool allow_fp16) {
  sim::DeviceModel m;
  m.name = "Ascend NPU (simulated, 32 AI cores)";
  m.vendor = "Oar simulator (Ascend-style)";
  m.compute_units = 32;
  m.local_memory_per_unit = 256 << 10;  // the unified buffer of an AI core
  m.peak_flops_f32 = 16e12;             // vector unit
  m.peak_flops_f16 = 256e12;            // cube unit
  m.peak_flops_bf16 = 256e12;
  m.memory_bandwidth = 1.6e12;
  m.host_link_bandwidth = 32e9;
  m.peer_bandwidth = 56e9;
  m.launch_overhead_ns = 3000;
  m.copy_overhead_ns = 2000;
  m.alignment = 32;
  for (int32_t d = OAR_DTYPE_FLOAT32; d < OAR_DTYPE_COUNT_; ++d) {
    if (d != OAR_DTYPE_FLOAT64) m.dtypes.push_back(d);
  }
  m.extra_ints = {{"cube_units", 32}, {"l1_buffer_per_unit", 1 << 20}, {"c0", kC0}};
  m.extra_strings = {{"precision_mode", allow_fp16 ? "allow_fp16" : "exact"},
                     {"storage_formats", "PLAIN,NC1HWC0,FRACTAL_NZ"}};
  return m;
}

// ---- the cube unit -----------------------------------------------------------------------------------

/// float32 matmul in allow_fp16 mode: round every float32 of each operand's storage span to float16
/// (keeping the strides, so broadcast and transposed operands work unchanged), then multiply those in
/// float32 — the cube's products of fp16 values accumulated in fp32.
void RunCubeMatmulF32(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  if (!g_allow_fp16.load()) return sim::RunHostKernel(kernel.host_fn, call);
  std::vector<float> rounded[2];
  oar_tensor_desc_t inputs[2] = {call.inputs[0], call.inputs[1]};
  for (int i = 0; i < 2; ++i) {
    const size_t span = sim::DescriptorSpanBytes(inputs[i]) / sizeof(float);
    if (span == 0) continue;
    const auto* src = static_cast<const float*>(inputs[i].data);
    rounded[i].resize(span);
    for (size_t k = 0; k < span; ++k) rounded[i][k] = static_cast<float>(sdk::Half(src[k]));
    inputs[i].data = rounded[i].data();
  }
  oar_kernel_call_t cube = call;
  cube.inputs = inputs;
  sim::RunHostKernel(kernel.host_fn, cube);
}

sim::Cost CubeMatmulCost(const sim::SimKernel&, const sim::DeviceModel& model, const oar_kernel_call_t& call) {
  sim::Cost c = sim::KernelCost(model, call);  // at the inputs' dtype peak: cube for 16-bit, vector for f32
  if (call.inputs[0].dtype == OAR_DTYPE_FLOAT32 && g_allow_fp16.load()) {
    c = sim::Roofline(model, c.flops, c.bytes, model.peak_flops_f16);
  }
  return c;
}

// Never destroyed: the stream workers run these kernels until the process ends, so kernels still queued
// (or just run, unsynchronised) at exit must not see the set torn down by static destructors.
sim::KernelSet& Kernels() {
  static sim::KernelSet* const set = [] {
    sim::KernelSet s;
    s.AddHostKernels([](std::string_view op, std::span<const int32_t> dtypes) {
      // batch_norm runs its composed ops here (on whatever formats kernel selection gives them), as before.
      if (op == "batch_norm_train" || op == "batch_norm_train_grad") return false;
      for (int32_t d : dtypes) {
        if (d == OAR_DTYPE_FLOAT64) return false;
      }
      return true;
    });
    for (sim::SimKernel& k : s.kernels()) {
      if (k.op != "matmul") continue;
      k.cost = CubeMatmulCost;
      if (k.dtypes[0] == OAR_DTYPE_FLOAT32) k.run = RunCubeMatmulF32;
    }
    AddFormatKernels(&s);
    return new sim::KernelSet(std::move(s));
  }();
  return *set;
}

oar_status_t* Initialize() {
  return Guard([] {
    bool allow_fp16 = false;
    if (const auto v = sim::GetEnv("OAR_ASCEND_SIM_PRECISION")) {
      if (*v != "exact" && *v != "allow_fp16") {
        sim::Throw(OAR_STATUS_INVALID_ARGUMENT, std::string(kName) + ": OAR_ASCEND_SIM_PRECISION='" + *v +
                                                    "' is not a precision mode (exact or allow_fp16)");
      }
      allow_fp16 = *v == "allow_fp16";
    }
    g_allow_fp16.store(allow_fp16);
    sim::SetStorageBytesFn(StorageBytes);
    sim::PluginSpec spec;
    spec.name = kName;
    spec.env_prefix = "OAR_ASCEND_SIM";
    spec.model = Model(allow_fp16);
    sim::Simulator::Initialize(spec);
  });
}

oar_status_t* RegisterKernels(oar_kernel_registrar_t* registrar) {
  return Guard([&] { Kernels().Register(registrar); });
}

const oar_kernel_api_t kKernelApi = sim::MakeKernelApi(RegisterKernels);

const oar_plugin_api_t kApi = sim::MakePluginApi(kName, OAR_VERSION_STRING, Initialize, &kKernelApi, FormatApi());

}  // namespace
}  // namespace oar::ascend

OAR_DEFINE_PLUGIN(&oar::ascend::kApi)
