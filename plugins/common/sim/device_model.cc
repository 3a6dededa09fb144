#include "plugins/common/sim/device_model.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/ops.h"

namespace oar::sim {

double DeviceModel::PeakFlops(int32_t dtype) const {
  switch (dtype) {
    case OAR_DTYPE_FLOAT16:
      return peak_flops_f16;
    case OAR_DTYPE_BFLOAT16:
      return peak_flops_bf16;
    default:
      return peak_flops_f32;
  }
}

int64_t NumElements(const oar_tensor_desc_t& d) {
  int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) n *= d.shape[i];
  return n;
}

Cost Roofline(const DeviceModel& model, double flops, uint64_t bytes, double peak_flops) {
  Cost c;
  c.flops = flops;
  c.bytes = bytes;
  const double compute_ns = peak_flops > 0 ? flops / peak_flops * 1e9 : 0;
  const double memory_ns = model.memory_bandwidth > 0 ? static_cast<double>(bytes) / model.memory_bandwidth * 1e9 : 0;
  c.duration_ns = model.launch_overhead_ns + std::max(compute_ns, memory_ns);
  return c;
}

double FlopsPerElement(std::string_view op) {
  static constexpr std::string_view kMoves[] = {"copy",   "cast", "fill",   "format_cast", "where",
                                                "concat", "pad",  "gather", "index_select"};
  static constexpr std::string_view kTranscendental[] = {"exp",
                                                         "log",
                                                         "log1p",
                                                         "sqrt",
                                                         "rsqrt",
                                                         "sin",
                                                         "cos",
                                                         "tanh",
                                                         "sigmoid",
                                                         "erf",
                                                         "pow",
                                                         "softmax",
                                                         "log_softmax",
                                                         "fused_log_softmax",
                                                         "fused_masked_softmax"};
  for (std::string_view m : kMoves) {
    if (op == m) return 0;
  }
  for (std::string_view t : kTranscendental) {
    if (op == t) return 8;  // a polynomial or two per element
  }
  if (op == "layer_norm") return 8;
  if (op == "fused_adam") return 16;  // 10 arithmetic operations and a square root per element
  if (op == "fused_tanh_grad" || op == "fused_sigmoid_grad") return 4;  // the four ops each replaces
  if (op == "fused_masked_softmax_grad") return 5;                      // mul, sum, sub, mul, mul (the where moves)
  return 1;
}

Cost KernelCost(const DeviceModel& model, const oar_kernel_call_t& call) {
  uint64_t bytes = 0;
  int64_t work = 0;  // elements of the largest operand: what one pass over the data touches
  for (int i = 0; i < call.num_inputs + call.num_outputs; ++i) {
    const oar_tensor_desc_t& d = i < call.num_inputs ? call.inputs[i] : call.outputs[i - call.num_inputs];
    const int64_t n = NumElements(d);
    work = std::max(work, n);
    bytes += static_cast<uint64_t>(n) * sdk::DTypeSize(d.dtype);
  }
  const std::string_view op = call.op;
  const int64_t out_elements = call.num_outputs > 0 ? NumElements(call.outputs[0]) : 0;
  int32_t dtype = call.num_outputs > 0 ? call.outputs[0].dtype : OAR_DTYPE_FLOAT32;
  double flops = 0;
  if ((op == "matmul" && call.num_inputs == 2 && call.inputs[0].rank >= 2) ||
      (op == OAR_OP_FUSED_LINEAR && call.num_inputs == 3 && call.inputs[0].rank >= 2)) {
    const oar_tensor_desc_t& a = call.inputs[0];
    flops = 2.0 * static_cast<double>(out_elements) * static_cast<double>(a.shape[a.rank - 1]);
    dtype = a.dtype;
  } else if (op == "conv2d" && call.num_inputs >= 2 && call.inputs[1].rank == 4 && call.inputs[1].shape[0] > 0) {
    const oar_tensor_desc_t& w = call.inputs[1];  // [C_out, C_in / groups, kh, kw]
    flops = 2.0 * static_cast<double>(out_elements) * static_cast<double>(NumElements(w) / w.shape[0]);
  } else {
    flops = FlopsPerElement(op) * static_cast<double>(work);
  }
  return Roofline(model, flops, bytes, model.PeakFlops(dtype));
}

Cost CopyCost(const DeviceModel& model, const char* direction, uint64_t bytes) {
  Cost c;
  c.bytes = bytes;
  double bandwidth = model.memory_bandwidth;
  double moved = static_cast<double>(bytes);
  if (std::strcmp(direction, "h2d") == 0 || std::strcmp(direction, "d2h") == 0) {
    bandwidth = model.host_link_bandwidth;
  } else if (std::strcmp(direction, "p2p") == 0) {
    bandwidth = model.peer_bandwidth;
  } else if (std::strcmp(direction, "d2d") == 0) {
    moved *= 2;  // read and write the same memory
  }
  c.duration_ns = model.copy_overhead_ns + (bandwidth > 0 ? moved / bandwidth * 1e9 : 0);
  return c;
}

void Profiler::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = true;
}

void Profiler::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = false;
}

bool Profiler::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}

void Profiler::Record(const std::string& name, int32_t kind, int32_t device, uint64_t start_ns, uint64_t end_ns,
                      uint64_t bytes, double flops) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  entries_.push_back(Entry{name, kind, device, start_ns, end_ns, bytes, flops});
}

void Profiler::Flush(oar_activity_sink_t sink, void* context) {
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries.swap(entries_);
  }
  if (sink == nullptr) return;
  for (const Entry& e : entries) {
    oar_activity_t a{};
    a.struct_size = OAR_ACTIVITY_STRUCT_SIZE;
    a.name = e.name.c_str();
    a.kind = e.kind;
    a.device = e.device;
    a.start_ns = e.start_ns;
    a.end_ns = e.end_ns;
    a.bytes = e.bytes;
    a.flops = e.flops;
    a.simulated = true;
    sink(context, &a);
  }
}

}  // namespace oar::sim
