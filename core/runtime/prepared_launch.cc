#include "core/runtime/prepared_launch.h"

#include <algorithm>

#include "core/base/error.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"

namespace oar::runtime {
namespace {

constexpr size_t kMaxTensors = 16;

void Describe(const Tensor& t, void* data, oar_tensor_desc_t* d) {
  d->struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
  d->ext = nullptr;
  d->data = data;
  d->dtype = static_cast<int32_t>(t.dtype());
  d->format = OAR_FORMAT_PLAIN;
  d->rank = t.rank();
  d->reserved_ = 0;
  d->shape = t.shape().data();
  d->strides = t.strides().data();
}

// One tensor's part of a layout: dtype, rank, shape, strides.
void AppendLayout(const Tensor& t, std::vector<int64_t>* out) {
  out->push_back(static_cast<int64_t>(t.dtype()));
  out->push_back(t.rank());
  out->insert(out->end(), t.shape().begin(), t.shape().end());
  out->insert(out->end(), t.strides().begin(), t.strides().end());
}

bool SameLayout(const Tensor& t, const int64_t*& p) {
  if (p[0] != static_cast<int64_t>(t.dtype()) || p[1] != t.rank()) return false;
  const int r = t.rank();
  const int64_t* shape = p + 2;
  const int64_t* strides = shape + r;
  for (int d = 0; d < r; ++d) {
    if (shape[d] != t.shape()[d] || strides[d] != t.strides()[d]) return false;
  }
  p = strides + r;
  return true;
}

}  // namespace

struct PreparedKernel::Direct {
  const KernelEntry* entry = nullptr;
  size_t num_inputs = 0, num_outputs = 0;
  std::vector<int64_t> layout;  // AppendLayout of every input, then every output
};

PreparedKernel::PreparedKernel(Device device, int op_id, std::span<const KernelAttr> attrs)
    : device_(device), op_id_(op_id) {
  OAR_CHECK(attrs.size() <= static_cast<size_t>(kMaxKernelAttrs), kInvalidArgument,
            "op '{}': at most {} attributes, got {}", OpName(op_id), kMaxKernelAttrs, attrs.size());
  // Own every payload: the caller's may not outlive this.
  size_t lists = 0;
  for (const KernelAttr& a : attrs) lists += std::holds_alternative<std::span<const int64_t>>(a.value) ? 1 : 0;
  lists_.reserve(lists);
  attrs_.reserve(attrs.size());
  for (const KernelAttr& a : attrs) {
    KernelAttr copy = a;
    if (const auto* list = std::get_if<std::span<const int64_t>>(&a.value)) {
      lists_.emplace_back(list->begin(), list->end());
      copy.value = std::span<const int64_t>(lists_.back());
    }
    attrs_.push_back(copy);
  }
  for (const KernelAttr& k : attrs_) abi_attrs_.push_back(ToAbiAttr(k));
  ctx_ = &Runtime::Get().Context(device);
}

PreparedKernel::~PreparedKernel() = default;

// The device's own kernel in PLAIN format when it takes this exact call (what runtime::Launch would run),
// else null: a private format, no kernel (the cpu fallback), a supports() refusal or failure.
const PreparedKernel::Direct* PreparedKernel::Resolve(std::span<const Tensor> inputs,
                                                      std::span<const Tensor> outputs) const {
  if (inputs.size() > kMaxTensors || outputs.size() > kMaxTensors) return nullptr;
  for (const Tensor& t : inputs) {
    if (t.device() != device_) return nullptr;
  }
  DeviceContext& ctx = *ctx_;
  if (const oar_format_api_t* fapi = ctx.plugin().format(); fapi != nullptr && !inputs.empty()) {
    // As runtime::Launch decides it: a private format when every input prefers the same non-PLAIN one.
    int32_t common = OAR_FORMAT_PLAIN;
    for (size_t i = 0; i < inputs.size(); ++i) {
      int32_t f = OAR_FORMAT_PLAIN;
      oar_status_t* s = fapi->preferred_format(ctx.ordinal(), OpName(op_id_).c_str(), static_cast<int32_t>(i),
                                               static_cast<int32_t>(inputs[i].dtype()), inputs[i].rank(),
                                               inputs[i].shape().data(), &f);
      if (s != nullptr) {
        TakeStatus(s);
        return nullptr;  // runtime::Launch reports it
      }
      if (f == OAR_FORMAT_PLAIN || (i > 0 && f != common)) {
        common = OAR_FORMAT_PLAIN;
        break;
      }
      common = f;
    }
    if (common != OAR_FORMAT_PLAIN) return nullptr;
  }
  std::array<int32_t, 2 * kMaxTensors> key{};
  size_t n = 0;
  for (const Tensor& t : inputs) key[n++] = static_cast<int32_t>(t.dtype());
  for (const Tensor& t : outputs) key[n++] = static_cast<int32_t>(t.dtype());
  const KernelEntry* entry = ctx.plugin().kernels().Find(op_id_, {key.data(), n}, OAR_FORMAT_PLAIN);
  if (entry == nullptr) return nullptr;
  const oar_kernel_api_t* kapi = ctx.plugin().kernel();
  if (OAR_HAS_SLOT(kapi, supports)) {
    std::array<oar_tensor_desc_t, kMaxTensors> in{}, out{};
    for (size_t i = 0; i < inputs.size(); ++i) Describe(inputs[i], nullptr, &in[i]);
    for (size_t i = 0; i < outputs.size(); ++i) Describe(outputs[i], nullptr, &out[i]);
    oar_kernel_call_t call{};
    call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
    call.op = entry->op_name;
    call.device = ctx.ordinal();
    call.num_inputs = static_cast<int32_t>(inputs.size());
    call.num_outputs = static_cast<int32_t>(outputs.size());
    call.num_attrs = static_cast<int32_t>(abi_attrs_.size());
    call.stream = nullptr;
    call.inputs = in.data();
    call.outputs = out.data();
    call.attrs = abi_attrs_.data();
    call.kernel_data = entry->kernel_data;
    oar_status_t* s = nullptr;
    try {
      s = kapi->supports(&call);
    } catch (...) {
      return nullptr;  // runtime::Launch reports it
    }
    if (s != nullptr) {
      TakeStatus(s);
      return nullptr;  // declined (the cpu fallback) or failed: runtime::Launch does and says what it does
    }
  }
  auto d = std::make_unique<Direct>();
  d->entry = entry;
  d->num_inputs = inputs.size();
  d->num_outputs = outputs.size();
  for (const Tensor& t : inputs) AppendLayout(t, &d->layout);
  for (const Tensor& t : outputs) AppendLayout(t, &d->layout);
  resolved_ = std::move(d);
  return resolved_.get();
}

void PreparedKernel::Launch(std::span<const Tensor> inputs, std::span<const Tensor> outputs) const {
  const Direct* d = nullptr;
  if (!Profiler::Get().enabled()) {  // profiled launches are timed and counted by runtime::Launch
    std::call_once(once_, [&] { Resolve(inputs, outputs); });
    d = resolved_.get();
  }
  bool direct = d != nullptr && inputs.size() == d->num_inputs && outputs.size() == d->num_outputs;
  if (direct) {
    const int64_t* p = d->layout.data();
    for (const Tensor& t : inputs) direct = direct && t.device() == device_ && SameLayout(t, p);
    for (const Tensor& t : outputs) direct = direct && SameLayout(t, p);
  }
  if (!direct) {
    general_.fetch_add(1, std::memory_order_relaxed);
    runtime::Launch(device_, op_id_, inputs, outputs, attrs_);
    return;
  }
  direct_.fetch_add(1, std::memory_order_relaxed);
  // Whatever runs next writes the outputs: private-format copies of their old contents are stale.
  for (const Tensor& t : outputs) t.storage()->DropShadows();
  std::array<oar_tensor_desc_t, kMaxTensors> in, out;
  for (size_t i = 0; i < inputs.size(); ++i) Describe(inputs[i], inputs[i].data_ptr(), &in[i]);
  for (size_t i = 0; i < outputs.size(); ++i) Describe(outputs[i], outputs[i].data_ptr(), &out[i]);
  const KernelEntry& entry = *d->entry;
  oar_kernel_call_t call{};
  call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
  call.op = entry.op_name;
  call.device = ctx_->ordinal();
  call.num_inputs = static_cast<int32_t>(inputs.size());
  call.num_outputs = static_cast<int32_t>(outputs.size());
  call.num_attrs = static_cast<int32_t>(abi_attrs_.size());
  call.stream = ctx_->stream();
  call.inputs = in.data();
  call.outputs = out.data();
  call.attrs = abi_attrs_.data();
  call.kernel_data = entry.kernel_data;
  oar_status_t* s = nullptr;
  try {
    s = entry.fn(&call);
  } catch (...) {
    Throw(ErrorCode::kInternal, "{}: kernel '{}' ({}) threw a C++ exception across the ABI", device_.str(),
          OpName(op_id_), entry.KeyString());
  }
  if (s != nullptr) {
    StatusInfo info = TakeStatus(s);
    std::string shapes;
    for (const Tensor& t : inputs) shapes += (shapes.empty() ? "" : ", ") + t.shape().ToString();
    throw Error(info.code, fmt::format("{} on {} ({}; input shapes {}): {}", OpName(op_id_), device_.str(),
                                       entry.KeyString(), shapes, info.message));
  }
}

}  // namespace oar::runtime
