#include "core/runtime/dispatch.h"

#include <array>
#include <vector>

#include "core/base/logging.h"
#include "core/runtime/copy.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"

namespace oar::runtime {
namespace {

constexpr int kMaxTensors = 16;

struct KeyBuffer {
  std::array<int32_t, kMaxTensors * 2> dtypes;
  int n = 0;
  std::span<const int32_t> span() const { return {dtypes.data(), static_cast<size_t>(n)}; }
};

KeyBuffer MakeKey(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  KeyBuffer key;
  for (const Tensor& t : inputs) key.dtypes[key.n++] = static_cast<int32_t>(t.dtype());
  for (const Tensor& t : outputs) key.dtypes[key.n++] = static_cast<int32_t>(t.dtype());
  return key;
}

std::string KeyString(std::span<const int32_t> key) {
  std::string s;
  for (int32_t d : key) s += (s.empty() ? "" : ", ") + std::string(sdk::DTypeName(d));
  return s;
}

std::string VariantsString(const DeviceType& type, int op_id) {
  std::string s;
  for (const KernelEntry& e : type.plugin().kernels().Variants(op_id)) {
    s += (s.empty() ? "" : "; ") + ("(" + e.KeyString() + ")");
  }
  return s.empty() ? "none" : s;
}

void Describe(const Tensor& t, oar_tensor_desc_t* d) {
  d->struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
  d->ext = nullptr;
  d->data = t.data_ptr();
  d->dtype = static_cast<int32_t>(t.dtype());
  d->format = OAR_FORMAT_PLAIN;
  d->rank = t.rank();
  d->reserved_ = 0;
  d->shape = t.shape().data();
  d->strides = t.strides().data();
}

// Fills `call` with descriptors that live in `storage`.
struct CallBuilder {
  std::array<oar_tensor_desc_t, kMaxTensors> in, out;
  oar_kernel_call_t call{};

  CallBuilder(DeviceContext& ctx, int op_id, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
              std::span<const oar_attr_t> attrs, const KernelEntry* entry, bool query) {
    for (size_t i = 0; i < inputs.size(); ++i) Describe(inputs[i], &in[i]);
    for (size_t i = 0; i < outputs.size(); ++i) Describe(outputs[i], &out[i]);
    if (query) {
      for (size_t i = 0; i < inputs.size(); ++i) in[i].data = nullptr;
      for (size_t i = 0; i < outputs.size(); ++i) out[i].data = nullptr;
    }
    call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
    call.op = entry != nullptr ? entry->op_name : OpName(op_id).c_str();
    call.device = ctx.ordinal();
    call.num_inputs = static_cast<int32_t>(inputs.size());
    call.num_outputs = static_cast<int32_t>(outputs.size());
    call.num_attrs = static_cast<int32_t>(attrs.size());
    call.stream = query ? nullptr : ctx.stream();
    call.inputs = in.data();
    call.outputs = out.data();
    call.attrs = attrs.data();
    call.kernel_data = entry ? entry->kernel_data : nullptr;
  }
};

std::string ShapesString(std::span<const Tensor> inputs) {
  std::string s;
  for (const Tensor& t : inputs) s += (s.empty() ? "" : ", ") + t.shape().ToString();
  return s;
}

// Does the plugin accept this exact call? Empty string = yes, otherwise its reason.
std::string SupportsReason(DeviceContext& ctx, int op_id, const KernelEntry* entry, std::span<const Tensor> inputs,
                           std::span<const Tensor> outputs, std::span<const oar_attr_t> attrs) {
  const oar_kernel_api_t* kapi = ctx.plugin().kernel();
  if (!OAR_HAS_SLOT(kapi, supports)) return {};
  CallBuilder b(ctx, op_id, inputs, outputs, attrs, entry, /*query=*/true);
  oar_status_t* s = nullptr;
  try {
    s = kapi->supports(&b.call);
  } catch (...) {
    Throw(ErrorCode::kInternal, "{}: supports() for op '{}' threw a C++ exception across the ABI",
          ctx.device().str(), OpName(op_id));
  }
  if (s == nullptr) return {};
  StatusInfo info = TakeStatus(s);
  if (info.code != ErrorCode::kUnimplemented) {
    throw Error(info.code, fmt::format("{}: supports() for op '{}' failed: {}", ctx.device().str(), OpName(op_id),
                                       info.message));
  }
  return info.message.empty() ? "unsupported (no reason given)" : info.message;
}

void Call(DeviceContext& ctx, int op_id, const KernelEntry& entry, std::span<const Tensor> inputs,
          std::span<const Tensor> outputs, std::span<const oar_attr_t> attrs) {
  CallBuilder b(ctx, op_id, inputs, outputs, attrs, &entry, /*query=*/false);
  oar_status_t* s = nullptr;
  try {
    s = entry.fn(&b.call);
  } catch (...) {
    Throw(ErrorCode::kInternal, "{}: kernel '{}' ({}) threw a C++ exception across the ABI", ctx.device().str(),
          OpName(op_id), entry.KeyString());
  }
  if (s != nullptr) {
    StatusInfo info = TakeStatus(s);
    throw Error(info.code, fmt::format("{} on {} ({}; input shapes {}): {}", OpName(op_id), ctx.device().str(),
                                       entry.KeyString(), ShapesString(inputs), info.message));
  }
}

void Fallback(DeviceContext& ctx, int op_id, std::span<const int32_t> key, const std::string& why,
              std::span<const Tensor> inputs, std::span<const Tensor> outputs, std::span<const oar_attr_t> attrs) {
  Runtime& rt = Runtime::Get();
  const Device cpu("cpu", 0);
  const std::string& op = OpName(op_id);
  if (ctx.device().type() == "cpu") {
    Throw(ErrorCode::kUnimplemented, "op '{}' has no cpu kernel for dtypes ({}){}; registered variants: {}", op,
          KeyString(key), why.empty() ? "" : " (" + why + ")", VariantsString(ctx.type(), op_id));
  }
  if (rt.strict()) {
    Throw(ErrorCode::kUnimplemented,
          "op '{}' cannot run on {} for dtypes ({}): {}; registered variants: {}; CPU fallback is disabled "
          "(OAR_STRICT_DEVICE=1 or certification)",
          op, ctx.device().str(), KeyString(key), why, VariantsString(ctx.type(), op_id));
  }
  DeviceContext* cpu_ctx = nullptr;
  try {
    cpu_ctx = &rt.Context(cpu);
  } catch (const Error&) {
    Throw(ErrorCode::kUnimplemented, "op '{}' cannot run on {} for dtypes ({}): {}, and no cpu plugin is loaded "
          "to fall back to",
          op, ctx.device().str(), KeyString(key), why);
  }
  const KernelEntry* entry = cpu_ctx->plugin().kernels().Find(op_id, key, OAR_FORMAT_PLAIN);
  OAR_CHECK(entry != nullptr, kUnimplemented,
            "op '{}' cannot run on {} for dtypes ({}): {}; the cpu fallback has no such kernel either", op,
            ctx.device().str(), KeyString(key), why);
  if (ctx.type().RecordFallback(op_id) == 1) {
    OAR_LOG_WARNING("op '{}' ({}) falls back to cpu on {}: {} (logged once; counted in `oar devices --json`)", op,
                    KeyString(key), ctx.device().type(), why);
  }
  std::vector<Tensor> cpu_inputs, cpu_outputs;
  for (const Tensor& t : inputs) cpu_inputs.push_back(CopySpanTo(t, cpu));
  for (const Tensor& t : outputs) cpu_outputs.push_back(CopySpanTo(t, cpu));
  Call(*cpu_ctx, op_id, *entry, cpu_inputs, cpu_outputs, attrs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& dst = outputs[i];
    if (dst.numel() == 0) continue;
    // The cpu mirror holds the whole span of the output view: copy that span back.
    int64_t span = 1;
    for (int d = 0; d < dst.rank(); ++d) span += (dst.shape()[d] - 1) * dst.strides()[d];
    const size_t esize = dst.element_size();
    CopyBytes(ctx, static_cast<char*>(dst.storage()->data()) + dst.offset() * static_cast<int64_t>(esize), *cpu_ctx,
              cpu_outputs[i].storage()->data(), static_cast<size_t>(span) * esize);
  }
}

}  // namespace

void Launch(Device device, int op_id, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
            std::span<const oar_attr_t> attrs) {
  OAR_CHECK(inputs.size() <= kMaxTensors && outputs.size() <= kMaxTensors, kInvalidArgument,
            "op '{}': at most {} inputs and outputs", OpName(op_id), kMaxTensors);
  DeviceContext& ctx = Runtime::Get().Context(device);
  for (const Tensor& t : inputs) {
    OAR_CHECK(t.device() == device, kInvalidArgument, "op '{}' runs on {} but an input is on {}; move it with .to()",
              OpName(op_id), device.str(), t.device().str());
  }
  const KeyBuffer key = MakeKey(inputs, outputs);
  const KernelEntry* entry = ctx.plugin().kernels().Find(op_id, key.span(), OAR_FORMAT_PLAIN);
  std::string why;
  if (entry == nullptr) {
    why = fmt::format("{} has no kernel for these dtypes", ctx.device().type());
  } else {
    why = SupportsReason(ctx, op_id, entry, inputs, outputs, attrs);
    if (why.empty()) return Call(ctx, op_id, *entry, inputs, outputs, attrs);
    why = fmt::format("{} declined: {}", ctx.device().type(), why);
  }
  Fallback(ctx, op_id, key.span(), why, inputs, outputs, attrs);
}

}  // namespace oar::runtime
