#include "core/runtime/dispatch.h"

#include <array>
#include <atomic>
#include <chrono>
#include <vector>

#include "core/base/logging.h"
#include "core/runtime/copy.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"
#include "oar/plugin/kernel.h"

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

void Describe(const Tensor& t, int32_t format, oar_tensor_desc_t* d) {
  // One check that `t` is defined (each accessor would check again) and the fields read directly.
  if (!t.defined()) [[unlikely]] (void)t.dtype();  // throws kFailedPrecondition
  const TensorImpl& impl = *t.impl();
  d->struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
  d->ext = nullptr;
  d->data = static_cast<char*>(impl.storage->data()) + impl.offset * static_cast<int64_t>(DTypeSize(impl.dtype));
  d->dtype = static_cast<int32_t>(impl.dtype);
  d->format = format;
  d->rank = impl.shape.size();
  d->reserved_ = 0;
  d->shape = impl.shape.data();
  d->strides = impl.strides.data();
}

/// Storage formats of a call's operands: `in` for every input, `out` for every output.
struct Formats {
  int32_t in = OAR_FORMAT_PLAIN;
  int32_t out = OAR_FORMAT_PLAIN;
};

// Fills `call` with descriptors that live in `storage`.
struct CallBuilder {
  std::array<oar_tensor_desc_t, kMaxTensors> in, out;
  oar_kernel_call_t call{};

  CallBuilder(DeviceContext& ctx, int op_id, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
              std::span<const oar_attr_t> attrs, const KernelEntry* entry, bool query, Formats formats = {}) {
    for (size_t i = 0; i < inputs.size(); ++i) Describe(inputs[i], formats.in, &in[i]);
    for (size_t i = 0; i < outputs.size(); ++i) Describe(outputs[i], formats.out, &out[i]);
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
                           std::span<const Tensor> outputs, std::span<const oar_attr_t> attrs, Formats formats = {}) {
  const oar_kernel_api_t* kapi = ctx.plugin().kernel();
  if (!OAR_HAS_SLOT(kapi, supports)) return {};
  CallBuilder b(ctx, op_id, inputs, outputs, attrs, entry, /*query=*/true, formats);
  oar_status_t* s = nullptr;
  try {
    s = kapi->supports(&b.call);
  } catch (...) {
    Throw(ErrorCode::kInternal, "{}: supports() for op '{}' threw a C++ exception across the ABI", ctx.device().str(),
          OpName(op_id));
  }
  if (s == nullptr) return {};
  StatusInfo info = TakeStatus(s);
  if (info.code != ErrorCode::kUnimplemented) {
    throw Error(info.code,
                fmt::format("{}: supports() for op '{}' failed: {}", ctx.device().str(), OpName(op_id), info.message));
  }
  return info.message.empty() ? "unsupported (no reason given)" : info.message;
}

void Call(DeviceContext& ctx, int op_id, const KernelEntry& entry, std::span<const Tensor> inputs,
          std::span<const Tensor> outputs, std::span<const oar_attr_t> attrs, Formats formats = {}) {
  CallBuilder b(ctx, op_id, inputs, outputs, attrs, &entry, /*query=*/false, formats);
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
    Throw(ErrorCode::kUnimplemented,
          "op '{}' cannot run on {} for dtypes ({}): {}, and no cpu plugin is loaded "
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

// ---- private storage formats ------------------------------------------------------------------------
// A device with an oar_format_api_t (ascend_sim) may prefer a private physical layout for an op's
// inputs. Tensors stay PLAIN as far as the rest of the core and the user are concerned: the private copy
// of an input is a shadow cached on its storage (converted with the plugin's format_cast on first use,
// dropped when the storage is written), and a private-format output is cast back into the real PLAIN
// output at once, keeping the private copy as the output's shadow for the next op that wants it.
// docs/design/formats.md has the reasoning.

int FormatCastOp() {
  static const int id = InternOp("format_cast");
  return id;
}

std::string FormatStatusWhere(DeviceContext& ctx, const char* what, int op_id) {
  return fmt::format("{}: {} for op '{}'", ctx.device().str(), what, OpName(op_id));
}

/// The format every input prefers, or PLAIN when any prefers PLAIN or they disagree.
int32_t CommonPreferredFormat(DeviceContext& ctx, const oar_format_api_t& fapi, int op_id,
                              std::span<const Tensor> inputs) {
  int32_t common = OAR_FORMAT_PLAIN;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    int32_t f = OAR_FORMAT_PLAIN;
    ThrowIfError(fapi.preferred_format(ctx.ordinal(), OpName(op_id).c_str(), static_cast<int32_t>(i),
                                       static_cast<int32_t>(t.dtype()), t.rank(), t.shape().data(), &f),
                 [&] { return FormatStatusWhere(ctx, "preferred_format", op_id); });
    if (f == OAR_FORMAT_PLAIN || (i > 0 && f != common)) return OAR_FORMAT_PLAIN;
    common = f;
  }
  return common;
}

/// A tensor of `like`'s dtype and logical shape in a fresh allocation holding `format`'s physical layout.
Tensor EmptyInFormat(DeviceContext& ctx, const oar_format_api_t& fapi, const Tensor& like, int32_t format) {
  size_t bytes = 0;
  ThrowIfError(fapi.storage_bytes(ctx.ordinal(), format, static_cast<int32_t>(like.dtype()), like.rank(),
                                  like.shape().data(), &bytes),
               [&] { return fmt::format("{}: storage_bytes for format {}", ctx.device().str(), format); });
  return ctx.allocator().AllocateTensor(ctx.device(), bytes, like.dtype(), like.shape(),
                                       ContiguousStrides(like.shape()));
}

/// The format_cast kernel converting `dtype` from `from` (to `to`), if the device has one that accepts
/// this call.
const KernelEntry* FindFormatCast(DeviceContext& ctx, const Tensor& src, const Tensor& dst, int32_t from, int32_t to,
                                  std::span<const oar_attr_t> attrs) {
  const int32_t key[2] = {static_cast<int32_t>(src.dtype()), static_cast<int32_t>(dst.dtype())};
  const KernelEntry* e = ctx.plugin().kernels().Find(FormatCastOp(), key, from);
  if (e == nullptr) return nullptr;
  const Tensor in[1] = {src}, out[1] = {dst};
  return SupportsReason(ctx, FormatCastOp(), e, in, out, attrs, {from, to}).empty() ? e : nullptr;
}

oar_attr_t DstFormatAttr(int32_t format) {
  oar_attr_t a{};
  a.name = "dst_format";
  a.type = OAR_ATTR_INT;
  a.v.i = format;
  return a;
}

void RunFormatCast(DeviceContext& ctx, const KernelEntry& e, const Tensor& src, const Tensor& dst, int32_t from,
                   int32_t to) {
  const oar_attr_t attrs[1] = {DstFormatAttr(to)};
  const Tensor in[1] = {src}, out[1] = {dst};
  Call(ctx, FormatCastOp(), e, in, out, attrs, {from, to});
  ctx.type().RecordFormatCast(to != OAR_FORMAT_PLAIN);
}

/// `t` (PLAIN, any view) in `format`: its cached shadow, or a new one made with format_cast. Undefined
/// when the device cannot convert it.
Tensor ShadowOf(DeviceContext& ctx, const oar_format_api_t& fapi, const Tensor& t, int32_t format) {
  if (auto s = t.storage()->FindShadow(format, t.dtype(), t.shape(), t.strides(), t.offset())) {
    return Tensor(std::move(s), t.dtype(), t.shape(), ContiguousStrides(t.shape()), 0);
  }
  Tensor shadow = EmptyInFormat(ctx, fapi, t, format);
  const oar_attr_t attrs[1] = {DstFormatAttr(format)};
  const KernelEntry* cast = FindFormatCast(ctx, t, shadow, OAR_FORMAT_PLAIN, format, attrs);
  if (cast == nullptr) return Tensor();
  RunFormatCast(ctx, *cast, t, shadow, OAR_FORMAT_PLAIN, format);
  t.storage()->AddShadow({format, t.dtype(), t.shape(), t.strides(), t.offset(), shadow.storage()});
  return shadow;
}

/// Run the op through the device's kernel for its preferred private format. False, having run nothing,
/// when the device prefers PLAIN or has no kernel that accepts the call in that format.
bool TryPrivateFormat(DeviceContext& ctx, int op_id, std::span<const int32_t> key, std::span<const Tensor> inputs,
                      std::span<const Tensor> outputs, std::span<const oar_attr_t> attrs) {
  const oar_format_api_t* fapi = ctx.plugin().format();
  if (fapi == nullptr || inputs.empty()) return false;
  const int32_t format = CommonPreferredFormat(ctx, *fapi, op_id, inputs);
  if (format == OAR_FORMAT_PLAIN) return false;
  const KernelEntry* entry = ctx.plugin().kernels().Find(op_id, key, format);
  if (entry == nullptr) return false;
  // Outputs in the kernel's format if it takes that, else PLAIN.
  Formats formats{format, format};
  if (!SupportsReason(ctx, op_id, entry, inputs, outputs, attrs, formats).empty()) {
    formats.out = OAR_FORMAT_PLAIN;
    if (!SupportsReason(ctx, op_id, entry, inputs, outputs, attrs, formats).empty()) return false;
  }
  std::array<Tensor, kMaxTensors> private_in, private_out;
  std::array<const KernelEntry*, kMaxTensors> back{};
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (formats.out == OAR_FORMAT_PLAIN) {
      private_out[i] = outputs[i];
      continue;
    }
    private_out[i] = EmptyInFormat(ctx, *fapi, outputs[i], format);
    back[i] = FindFormatCast(ctx, private_out[i], outputs[i], format, OAR_FORMAT_PLAIN, {});
    if (back[i] == nullptr) return false;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    private_in[i] = ShadowOf(ctx, *fapi, inputs[i], format);
    if (!private_in[i].defined()) return false;
  }
  const std::span<const Tensor> in(private_in.data(), inputs.size()), out(private_out.data(), outputs.size());
  Call(ctx, op_id, *entry, in, out, attrs, formats);
  ctx.type().RecordPrivateFormatCall();
  for (size_t i = 0; i < outputs.size() && formats.out != OAR_FORMAT_PLAIN; ++i) {
    const Tensor& o = outputs[i];
    RunFormatCast(ctx, *back[i], private_out[i], o, format, OAR_FORMAT_PLAIN);
    o.storage()->AddShadow({format, o.dtype(), o.shape(), o.strides(), o.offset(), private_out[i].storage()});
  }
  return true;
}

}  // namespace

namespace {

LaunchPath LaunchOn(DeviceContext& ctx, int op_id, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                    std::span<const oar_attr_t> attrs) {
  // Whatever runs next writes the outputs: private-format copies of their old contents are stale.
  for (const Tensor& t : outputs) t.storage()->DropShadows();
  const KeyBuffer key = MakeKey(inputs, outputs);
  if (TryPrivateFormat(ctx, op_id, key.span(), inputs, outputs, attrs)) return LaunchPath::kPrivateFormat;
  const Plugin& plugin = ctx.plugin();
  const KernelEntry* entry = plugin.kernels().Find(op_id, key.span(), OAR_FORMAT_PLAIN);
  if (entry != nullptr && !OAR_HAS_SLOT(plugin.kernel(), supports)) [[likely]] {
    // Nothing to ask (the cpu plugin): no reason string built and dropped per op.
    Call(ctx, op_id, *entry, inputs, outputs, attrs);
    return LaunchPath::kDevice;
  }
  std::string why;
  if (entry == nullptr) {
    why = fmt::format("{} has no kernel for these dtypes", ctx.device().type());
  } else {
    why = SupportsReason(ctx, op_id, entry, inputs, outputs, attrs);
    if (why.empty()) {
      Call(ctx, op_id, *entry, inputs, outputs, attrs);
      return LaunchPath::kDevice;
    }
    why = fmt::format("{} declined: {}", ctx.device().type(), why);
  }
  Fallback(ctx, op_id, key.span(), why, inputs, outputs, attrs);
  return LaunchPath::kFallback;
}

}  // namespace

namespace {
thread_local const LaunchObserver* t_observer = nullptr;
// ScopedLaunchObservers alive on any thread: while there are none, Launch does not read the thread-local
// (a __tls_get_addr call from a shared library on every op).
std::atomic<int> g_observers{0};
}  // namespace

ScopedLaunchObserver::ScopedLaunchObserver(LaunchObserver observer)
    : observer_(std::move(observer)), previous_(t_observer) {
  t_observer = &observer_;
  g_observers.fetch_add(1, std::memory_order_relaxed);
}
ScopedLaunchObserver::~ScopedLaunchObserver() {
  t_observer = previous_;
  g_observers.fetch_sub(1, std::memory_order_relaxed);
}

oar_attr_t ToAbiAttr(const KernelAttr& k) {
  oar_attr_t a{};
  a.struct_size = OAR_ATTR_STRUCT_SIZE;
  a.name = k.name;
  if (const auto* i = std::get_if<int64_t>(&k.value)) {
    a.type = OAR_ATTR_INT;
    a.v.i = *i;
  } else if (const auto* b = std::get_if<bool>(&k.value)) {
    a.type = OAR_ATTR_BOOL;
    a.v.b = *b;
  } else if (const auto* f = std::get_if<double>(&k.value)) {
    a.type = OAR_ATTR_FLOAT;
    a.v.f = *f;
  } else {
    const auto& list = std::get<std::span<const int64_t>>(k.value);
    a.type = OAR_ATTR_INTS;
    a.v.ints.data = list.data();
    a.v.ints.size = list.size();
  }
  return a;
}

void Launch(Device device, int op_id, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
            std::span<const KernelAttr> kernel_attrs) {
  // A thread's own observer is counted before it can observe, so a zero count means none on this thread.
  if (g_observers.load(std::memory_order_relaxed) != 0 && t_observer != nullptr) {
    const LaunchObserver* observer = t_observer;
    t_observer = nullptr;  // launches the observer makes itself are not observed
    struct Restore {
      const LaunchObserver* o;
      ~Restore() { t_observer = o; }
    } restore{observer};
    (*observer)(device, op_id, inputs, outputs, false);
    Launch(device, op_id, inputs, outputs, kernel_attrs);
    (*observer)(device, op_id, inputs, outputs, true);
    return;
  }
  OAR_CHECK(inputs.size() <= kMaxTensors && outputs.size() <= kMaxTensors, kInvalidArgument,
            "op '{}': at most {} inputs and outputs", OpName(op_id), kMaxTensors);
  OAR_CHECK(kernel_attrs.size() <= static_cast<size_t>(kMaxKernelAttrs), kInvalidArgument,
            "op '{}': at most {} attributes, got {}", OpName(op_id), kMaxKernelAttrs, kernel_attrs.size());
  std::array<oar_attr_t, kMaxKernelAttrs> abi_attrs;
  for (size_t i = 0; i < kernel_attrs.size(); ++i) abi_attrs[i] = ToAbiAttr(kernel_attrs[i]);
  const std::span<const oar_attr_t> attrs(abi_attrs.data(), kernel_attrs.size());
  DeviceContext& ctx = Runtime::Get().Context(device);
  for (const Tensor& t : inputs) {
    OAR_CHECK(t.device() == device, kInvalidArgument, "op '{}' runs on {} but an input is on {}; move it with .to()",
              OpName(op_id), device.str(), t.device().str());
  }
  Profiler& profiler = Profiler::Get();
  if (!profiler.enabled()) {
    LaunchOn(ctx, op_id, inputs, outputs, attrs);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchPath path = LaunchOn(ctx, op_id, inputs, outputs, attrs);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
  profiler.RecordLaunch(ctx.type(), op_id, static_cast<uint64_t>(ns.count()), path);
}

}  // namespace oar::runtime
