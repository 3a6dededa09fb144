#include "core/runtime/kernel_plan.h"

#include <charconv>

#include "core/base/error.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"

namespace oar::runtime {
namespace {

std::string KeyText(std::span<const int32_t> dtypes) {
  std::string s;
  for (int32_t t : dtypes) s += (s.empty() ? "" : ", ") + std::string(DTypeName(static_cast<DType>(t)));
  return s;
}

// The format every input prefers, or PLAIN when any prefers PLAIN, they disagree or a shape is unknown.
int32_t CommonPreferredFormat(DeviceContext& ctx, const oar_format_api_t& fapi, std::string_view op,
                              std::span<const int32_t> dtypes, std::span<const std::span<const int64_t>> shapes) {
  if (shapes.empty()) return OAR_FORMAT_PLAIN;
  const std::string name(op);
  int32_t common = OAR_FORMAT_PLAIN;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (shapes[i].data() == nullptr && !shapes[i].empty()) return OAR_FORMAT_PLAIN;
    int32_t f = OAR_FORMAT_PLAIN;
    oar_status_t* s = fapi.preferred_format(ctx.ordinal(), name.c_str(), static_cast<int32_t>(i), dtypes[i],
                                            static_cast<int32_t>(shapes[i].size()), shapes[i].data(), &f);
    if (s != nullptr) ThrowIfError(s, [&] { return fmt::format("{}: preferred_format for op '{}'", ctx.device().str(), op); });
    if (f == OAR_FORMAT_PLAIN || (i > 0 && f != common)) return OAR_FORMAT_PLAIN;
    common = f;
  }
  return common;
}

}  // namespace

KernelPlan PlanKernel(Device device, std::string_view op, std::span<const int32_t> dtypes,
                      std::span<const std::span<const int64_t>> input_shapes) {
  Runtime& rt = Runtime::Get();
  DeviceContext& ctx = rt.Context(device);
  const int op_id = InternOp(op);
  const KernelTable& kernels = ctx.plugin().kernels();
  KernelPlan plan;
  if (const oar_format_api_t* fapi = ctx.plugin().format()) {
    const int32_t format = CommonPreferredFormat(ctx, *fapi, op, dtypes, input_shapes);
    if (format != OAR_FORMAT_PLAIN && kernels.Find(op_id, dtypes, format) != nullptr) {
      const int cast = InternOp("format_cast");
      // Inputs must convert to the format and outputs back to PLAIN.
      bool casts = true;
      for (size_t i = 0; i < dtypes.size() && casts; ++i) {
        const int32_t key[2] = {dtypes[i], dtypes[i]};
        casts = kernels.Find(cast, key, i < input_shapes.size() ? OAR_FORMAT_PLAIN : format) != nullptr;
      }
      if (casts) {
        plan.path = KernelPlan::Path::kPrivateFormat;
        plan.format = format;
        return plan;
      }
    }
  }
  if (kernels.Find(op_id, dtypes, OAR_FORMAT_PLAIN) != nullptr) return plan;
  plan.path = KernelPlan::Path::kFallback;
  plan.reason = fmt::format("{} has no kernel for op '{}' with dtypes ({})", device.type(), op, KeyText(dtypes));
  OAR_CHECK(!rt.strict(), kUnimplemented, "{}; CPU fallback is disabled (OAR_STRICT_DEVICE)", plan.reason);
  if (device.type() != "cpu") {
    DeviceContext& cpu = rt.Context(Device("cpu:0"));
    OAR_CHECK(cpu.plugin().kernels().Find(op_id, dtypes, OAR_FORMAT_PLAIN) != nullptr, kUnimplemented,
              "{}, and the cpu fallback has none either", plan.reason);
  } else {
    Throw(ErrorCode::kUnimplemented, "{}", plan.reason);
  }
  return plan;
}

std::string FormatName(int32_t format) {
  switch (format) {
    case OAR_FORMAT_PLAIN: return "plain";
    case OAR_FORMAT_NC1HWC0: return "NC1HWC0";
    case OAR_FORMAT_FRACTAL_NZ: return "FRACTAL_NZ";
    default: return fmt::format("vendor:{}", format);
  }
}

int32_t ParseFormatName(std::string_view name) {
  if (name == "plain") return OAR_FORMAT_PLAIN;
  if (name == "NC1HWC0") return OAR_FORMAT_NC1HWC0;
  if (name == "FRACTAL_NZ") return OAR_FORMAT_FRACTAL_NZ;
  if (name.starts_with("vendor:")) {
    int32_t v = 0;
    const auto digits = name.substr(7);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec == std::errc() && end == digits.data() + digits.size() && v >= OAR_FORMAT_VENDOR_BASE) return v;
  }
  Throw(ErrorCode::kInvalidArgument, "unknown storage format '{}' (expected plain, NC1HWC0, FRACTAL_NZ or vendor:<n> "
        "with n >= {})", name.substr(0, 64), static_cast<int>(OAR_FORMAT_VENDOR_BASE));
}

}  // namespace oar::runtime
