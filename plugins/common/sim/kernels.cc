#include "plugins/common/sim/kernels.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/host_kernels.h"
#include "plugins/common/sim/simulator.h"

namespace oar::sim {
namespace {

std::atomic<StorageBytesFn> g_storage_bytes{nullptr};

std::string DescName(bool input, int index) { return (input ? "input " : "output ") + std::to_string(index); }

std::string CheckDescs(const oar_kernel_call_t& call) {
  if (call.num_inputs < 0 || call.num_outputs < 0 || call.num_attrs < 0) return "negative tensor or attribute count";
  if ((call.num_inputs > 0 && call.inputs == nullptr) || (call.num_outputs > 0 && call.outputs == nullptr) ||
      (call.num_attrs > 0 && call.attrs == nullptr)) {
    return "NULL descriptor or attribute array";
  }
  for (int i = 0; i < call.num_inputs + call.num_outputs; ++i) {
    const bool input = i < call.num_inputs;
    const oar_tensor_desc_t& d = input ? call.inputs[i] : call.outputs[i - call.num_inputs];
    if (d.rank < 0 || d.rank > OAR_MAX_RANK) {
      return DescName(input, input ? i : i - call.num_inputs) + " has rank " + std::to_string(d.rank) + " (0.." +
             std::to_string(OAR_MAX_RANK) + " supported)";
    }
    if (d.rank > 0 && d.shape == nullptr) return DescName(input, input ? i : i - call.num_inputs) + " has no shape";
    if (d.format == OAR_FORMAT_PLAIN && d.rank > 0 && d.strides == nullptr) {
      return DescName(input, input ? i : i - call.num_inputs) + " has no strides";
    }
    for (int k = 0; k < d.rank; ++k) {
      if (d.shape[k] < 0 || (d.format == OAR_FORMAT_PLAIN && d.strides[k] < 0)) {
        return DescName(input, input ? i : i - call.num_inputs) + " has a negative extent or stride";
      }
    }
  }
  return {};
}

}  // namespace

// ---- OwnedCall ---------------------------------------------------------------------------------------

OwnedCall::OwnedCall(const oar_kernel_call_t& call)
    : op_(call.op ? call.op : ""),
      inputs_(static_cast<size_t>(call.num_inputs)),
      outputs_(static_cast<size_t>(call.num_outputs)),
      shapes_(static_cast<size_t>(call.num_inputs + call.num_outputs)),
      strides_(static_cast<size_t>(call.num_inputs + call.num_outputs)) {
  for (int i = 0; i < call.num_inputs; ++i) CopyDesc(call.inputs[i], &inputs_[i], static_cast<size_t>(i));
  for (int i = 0; i < call.num_outputs; ++i) {
    CopyDesc(call.outputs[i], &outputs_[i], static_cast<size_t>(call.num_inputs + i));
  }
  attrs_.reserve(static_cast<size_t>(call.num_attrs));
  for (int i = 0; i < call.num_attrs; ++i) {
    oar_attr_t a = call.attrs[i];
    a.ext = nullptr;
    a.name = strings_.emplace_back(a.name ? a.name : "").c_str();
    switch (a.type) {
      case OAR_ATTR_STRING: {
        const std::string& s = strings_.emplace_back(a.v.s.data ? std::string(a.v.s.data, a.v.s.size) : std::string());
        a.v.s.data = s.data();
        a.v.s.size = s.size();
        break;
      }
      case OAR_ATTR_INTS: {
        const auto& v =
            ints_.emplace_back(a.v.ints.data ? std::vector<int64_t>(a.v.ints.data, a.v.ints.data + a.v.ints.size)
                                             : std::vector<int64_t>());
        a.v.ints.data = v.data();
        a.v.ints.size = v.size();
        break;
      }
      case OAR_ATTR_FLOATS: {
        const auto& v = floats_.emplace_back(
            a.v.floats.data ? std::vector<double>(a.v.floats.data, a.v.floats.data + a.v.floats.size)
                            : std::vector<double>());
        a.v.floats.data = v.data();
        a.v.floats.size = v.size();
        break;
      }
      default:
        break;
    }
    attrs_.push_back(a);
  }
  call_ = call;
  call_.ext = nullptr;
  call_.op = op_.c_str();
  call_.inputs = inputs_.data();
  call_.outputs = outputs_.data();
  call_.attrs = attrs_.data();
}

void OwnedCall::CopyDesc(const oar_tensor_desc_t& from, oar_tensor_desc_t* to, size_t slot) {
  *to = from;
  to->ext = nullptr;
  std::array<int64_t, OAR_MAX_RANK>& shape = shapes_[slot];
  std::array<int64_t, OAR_MAX_RANK>& strides = strides_[slot];
  int64_t expected = 1;
  for (int k = from.rank - 1; k >= 0; --k) {
    shape[k] = from.shape[k];
    // A private format ignores strides (and may not pass any): keep the logical contiguous ones.
    strides[k] = from.format == OAR_FORMAT_PLAIN ? from.strides[k] : expected;
    expected *= std::max<int64_t>(shape[k], 1);
  }
  to->shape = shape.data();
  to->strides = strides.data();
}

// ---- support and sizes -------------------------------------------------------------------------------

void SetStorageBytesFn(StorageBytesFn fn) { g_storage_bytes.store(fn); }

size_t DescriptorSpanBytes(const oar_tensor_desc_t& d) {
  if (NumElements(d) == 0) return 0;
  const size_t esize = sdk::DTypeSize(d.dtype);
  if (d.format != OAR_FORMAT_PLAIN) {
    const StorageBytesFn fn = g_storage_bytes.load();
    if (fn == nullptr)
      Throw(OAR_STATUS_UNIMPLEMENTED, "storage format " + std::to_string(d.format) + " is not supported");
    return fn(d.format, d.dtype, d.rank, d.shape);
  }
  int64_t last = 0;
  for (int k = 0; k < d.rank; ++k) last += (d.shape[k] - 1) * d.strides[k];
  return static_cast<size_t>(last + 1) * esize;
}

std::string SupportReason(const SimKernel& kernel, const oar_kernel_call_t& call) {
  if (std::string why = CheckDescs(call); !why.empty()) return why;
  if (static_cast<size_t>(call.num_inputs + call.num_outputs) != kernel.dtypes.size()) {
    return "the kernel takes " + std::to_string(kernel.dtypes.size()) + " tensors, the call has " +
           std::to_string(call.num_inputs + call.num_outputs);
  }
  for (int i = 0; i < call.num_inputs + call.num_outputs; ++i) {
    const bool input = i < call.num_inputs;
    const oar_tensor_desc_t& d = input ? call.inputs[i] : call.outputs[i - call.num_inputs];
    const int index = input ? i : i - call.num_inputs;
    if (d.dtype != kernel.dtypes[static_cast<size_t>(i)]) {
      return DescName(input, index) + " is " + std::string(sdk::DTypeName(d.dtype)) + ", the kernel takes " +
             std::string(sdk::DTypeName(kernel.dtypes[static_cast<size_t>(i)]));
    }
    const int32_t want = (!input && kernel.outputs_plain) ? int32_t{OAR_FORMAT_PLAIN} : kernel.format;
    if (d.format != want && !kernel.checks_formats) {
      return DescName(input, index) + " is in storage format " + std::to_string(d.format) +
             ", the kernel takes format " + std::to_string(want);
    }
  }
  return kernel.supports ? kernel.supports(kernel, call) : std::string();
}

oar_status_t* SupportsKernel(const oar_kernel_call_t* query) {
  return sdk::Guard([&]() -> oar_status_t* {
    if (query == nullptr || query->kernel_data == nullptr) {
      Throw(OAR_STATUS_INVALID_ARGUMENT, "supports: NULL query or a kernel this plugin did not register");
    }
    const auto& kernel = *static_cast<const SimKernel*>(query->kernel_data);
    const std::string why = SupportReason(kernel, *query);
    if (why.empty()) return nullptr;
    return sdk::MakeStatus(OAR_STATUS_UNIMPLEMENTED,
                           Simulator::Get().spec().name + " kernel '" + kernel.op + "': " + why);
  });
}

// ---- launch ------------------------------------------------------------------------------------------

void RunHostKernel(oar_kernel_fn_t fn, const oar_kernel_call_t& call) {
  oar_status_t* status = fn(&call);
  if (status == nullptr) return;
  const oar_host_api_t* host = sdk::Host();
  const auto code = static_cast<oar_status_code>(host->status_code(status));
  std::string message = host->status_message(status);
  host->status_destroy(status);
  throw sdk::StatusError(code, message);
}

oar_status_t* LaunchKernel(const oar_kernel_call_t* call) {
  return sdk::Guard([&] {
    if (call == nullptr || call->kernel_data == nullptr) {
      Throw(OAR_STATUS_INVALID_ARGUMENT, "kernel launch: NULL call or a kernel this plugin did not register");
    }
    const auto& kernel = *static_cast<const SimKernel*>(call->kernel_data);
    Simulator& sim = Simulator::Get();
    SimDevice& device = sim.device(call->device);
    const std::string where = device.where() + " kernel '" + kernel.op + "'";
    sim.BeginOperation(device, "launch of '" + kernel.op + "'");
    if (call->stream == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, where + ": launched without a stream");
    std::shared_ptr<Stream> stream = device.GetStream(call->stream);
    if (const std::string why = SupportReason(kernel, *call); !why.empty()) {
      Throw(OAR_STATUS_UNIMPLEMENTED, where + ": " + why);
    }

    auto owned = std::make_shared<OwnedCall>(*call);
    for (int i = 0; i < call->num_inputs + call->num_outputs; ++i) {
      const bool input = i < call->num_inputs;
      const int index = input ? i : i - call->num_inputs;
      oar_tensor_desc_t& d = input ? owned->input(index) : owned->output(index);
      const size_t span = DescriptorSpanBytes(d);
      d.data = span == 0 ? nullptr : device.memory().Translate(d.data, span, where + " " + DescName(input, index));
    }
    const DeviceModel& model = device.model();
    Work work;
    work.name = kernel.op;
    work.kind = OAR_ACTIVITY_KERNEL;
    work.cost = kernel.cost ? kernel.cost(kernel, model, owned->call()) : KernelCost(model, owned->call());
    if (const FaultScenario* s = sim.faults().Check(FaultKind::kLaunch, device.ordinal(), kernel.op)) {
      const std::string message = where + " failed" + FaultSuffix(*s);
      if (s->sync) Throw(s->code, message);
      work.injected = SimError{s->code, message};
    }
    const SimKernel* k = &kernel;
    work.run = [owned, k]() -> std::optional<SimError> {
      if (k->run != nullptr) {
        k->run(*k, owned->call());
      } else {
        RunHostKernel(k->host_fn, owned->call());
      }
      return std::nullopt;
    };
    stream->Enqueue(std::move(work));
  });
}

// ---- KernelSet ---------------------------------------------------------------------------------------

SimKernel& KernelSet::Add(SimKernel kernel) { return kernels_.emplace_back(std::move(kernel)); }

void KernelSet::AddHostKernels(
    const std::function<bool(std::string_view op, std::span<const int32_t> dtypes)>& filter) {
  for (const host::HostKernel& h : host::HostKernels()) {
    if (filter && !filter(h.op, h.key_dtypes())) continue;
    SimKernel k;
    k.op = h.op;
    k.dtypes.assign(h.key_dtypes().begin(), h.key_dtypes().end());
    k.host_fn = h.fn;
    Add(std::move(k));
  }
}

SimKernel* KernelSet::Find(std::string_view op, std::span<const int32_t> dtypes, int32_t format) {
  for (SimKernel& k : kernels_) {
    if (k.op == op && k.format == format && std::ranges::equal(k.dtypes, dtypes)) return &k;
  }
  return nullptr;
}

void KernelSet::Register(oar_kernel_registrar_t* registrar) const {
  for (const SimKernel& k : kernels_) {
    oar_kernel_def_t def{};
    def.struct_size = OAR_KERNEL_DEF_STRUCT_SIZE;
    def.op = k.op.c_str();
    def.dtypes = k.dtypes.data();
    def.num_dtypes = static_cast<int32_t>(k.dtypes.size());
    def.format = k.format;
    def.fn = LaunchKernel;
    def.kernel_data = const_cast<SimKernel*>(&k);
    if (oar_status_t* s = sdk::Host()->register_kernel(registrar, &def)) {
      const auto code = static_cast<oar_status_code>(sdk::Host()->status_code(s));
      std::string message = sdk::Host()->status_message(s);
      sdk::Host()->status_destroy(s);
      Throw(code, "registering kernel '" + k.op + "': " + message);
    }
  }
}

}  // namespace oar::sim
