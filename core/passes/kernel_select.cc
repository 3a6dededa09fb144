// kernel-select{device=NAME}: bind every op.* op to a kernel on a named device, as the eager dispatcher
// would (runtime::PlanKernel): on the device (kernel.<op>), on the device in a private storage format with
// explicit kernel.format_cast ops around it, or on the cpu fallback with explicit kernel.transfer ops both ways.
// Views and composites carry the device only (they run no kernel of their own).
//
// Where every operand's extents are static, the device's plugin is also asked, as the eager dispatcher asks
// it per call, whether its kernel accepts this exact call (the optional supports() query, with contiguous
// operands and the op's attributes): a private-format kernel that declines with outputs in its format is
// asked again with PLAIN outputs (no format casts back then), then the PLAIN kernel; one that declines too
// makes the op fall back to the cpu, with the plugin's reason in the error when the fallback is not allowed.
#include <algorithm>
#include <limits>
#include <memory>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ops/kernel_attrs.h"
#include "core/ops/schema.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"
#include "core/runtime/kernel_plan.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"

namespace oar::passes {
namespace {

class KernelSelectPass : public Pass {
 public:
  explicit KernelSelectPass(Device device) : device_(device) {}
  std::string_view name() const override { return "kernel-select"; }

  void Run(ir::Program& program) override {
    ir::IrContext& ctx = program.context();
    runtime::Runtime::Get().Context(device_);  // an unknown device is an error before anything changes
    device_attr_ = ctx.DeviceAttr(device_.str());
    cpu_attr_ = ctx.DeviceAttr("cpu:0");
    std::vector<ir::Operation*> ops;
    program.module()->Walk([&](ir::Operation* op) {
      if (op->info().schema != nullptr && op->info().dialect->name() == "op" && !InsideIsolatedOp(op, program)) {
        ops.push_back(op);
      }
    });
    for (ir::Operation* op : ops) Select(ctx, op);
  }

 private:
  // Ops in the body of an op isolated from above (a cinn.group) are that op's business, not kernels.
  static bool InsideIsolatedOp(const ir::Operation* op, const ir::Program& program) {
    for (const ir::Operation* p = op->parent_op(); p != nullptr && p != program.module(); p = p->parent_op()) {
      if (p->info().Has(ir::kIsolatedFromAbove)) return true;
    }
    return false;
  }

  void Select(ir::IrContext& ctx, ir::Operation* op) {
    const ops::OpSchema& s = *op->info().schema;
    ir::Builder b(ctx);
    b.SetInsertionPoint(op);
    std::vector<ir::Value> operands = op->OperandValues();
    std::vector<ir::NamedAttribute> attrs = op->attributes();
    const std::string kernel_name = "kernel." + std::string(s.name);
    auto with = [&](ir::Attribute device, std::string_view format) {
      std::vector<ir::NamedAttribute> a = attrs;
      a.push_back(b.Attr("device", device));
      a.push_back(b.Attr("format", ctx.StringAttr(format)));
      return a;
    };
    std::vector<ir::Type> result_types;
    for (ir::Value r : op->results()) result_types.push_back(r.type());
    std::vector<ir::Value> results;
    if (s.kind == ops::OpKind::kView || s.kind == ops::OpKind::kComposite) {
      results = b.Create(kernel_name, operands, with(device_attr_, "plain"), result_types)->results();
    } else {
      std::vector<int32_t> key;
      std::vector<std::span<const int64_t>> shapes;
      bool static_shapes = true;
      for (ir::Value v : operands) {
        key.push_back(static_cast<int32_t>(v.type().dtype()));
        static_shapes = static_shapes && v.type().HasStaticShape();
        if (static_shapes) shapes.emplace_back(v.type().dims());
      }
      for (ir::Type t : result_types) key.push_back(static_cast<int32_t>(t.dtype()));
      if (!static_shapes) shapes.clear();
      runtime::KernelPlan plan;
      bool plain_outputs = false;  // a private-format kernel that writes PLAIN outputs
      try {
        plan = runtime::PlanKernel(device_, s.name, key, shapes);
        if (static_shapes) plain_outputs = AskSupports(op, s, key, plan);
      } catch (const Error& e) {
        Throw(e.code(), "{}: {}", op->name(), e.what());
      }
      switch (plan.path) {
        case runtime::KernelPlan::Path::kDevice:
          results = b.Create(kernel_name, operands, with(device_attr_, "plain"), result_types)->results();
          break;
        case runtime::KernelPlan::Path::kPrivateFormat: {
          const std::string format = runtime::FormatName(plan.format);
          for (ir::Value& v : operands) v = FormatCast(b, v, "plain", format);
          results = b.Create(kernel_name, operands, with(device_attr_, format), result_types)->results();
          if (!plain_outputs) {
            for (ir::Value& r : results) r = FormatCast(b, r, format, "plain");
          }
          break;
        }
        case runtime::KernelPlan::Path::kFallback:
          for (ir::Value& v : operands) v = Copy(b, v, device_attr_, cpu_attr_);
          results = b.Create(kernel_name, operands, with(cpu_attr_, "plain"), result_types)->results();
          for (ir::Value& r : results) r = Copy(b, r, cpu_attr_, device_attr_);
          break;
      }
    }
    for (uint32_t i = 0; i < op->num_results(); ++i) op->result(i).ReplaceAllUsesWith(results[i]);
    op->Erase();
  }

  // The plugin's supports() on this call, as the dispatcher asks it (dispatch.cc LaunchOn): the private
  // format with outputs in it, then with PLAIN outputs, then the PLAIN kernel; a PLAIN kernel that declines
  // turns `plan` into the cpu fallback. Returns true when the private kernel takes PLAIN outputs.
  bool AskSupports(const ir::Operation* op, const ops::OpSchema& s, std::span<const int32_t> key,
                   runtime::KernelPlan& plan) {
    if (plan.path == runtime::KernelPlan::Path::kFallback) return false;
    runtime::DeviceContext& ctx = runtime::Runtime::Get().Context(device_);
    if (plan.path == runtime::KernelPlan::Path::kPrivateFormat) {
      if (Declined(ctx, op, s, key, plan.format, plan.format).empty()) return false;
      if (Declined(ctx, op, s, key, plan.format, OAR_FORMAT_PLAIN).empty()) return true;
      plan.path = runtime::KernelPlan::Path::kDevice;
    }
    const std::string why = Declined(ctx, op, s, key, OAR_FORMAT_PLAIN, OAR_FORMAT_PLAIN);
    if (why.empty()) return false;
    plan.path = runtime::KernelPlan::Path::kFallback;
    plan.reason = fmt::format("{} declined: {}", device_.type(), why);
    runtime::Runtime& rt = runtime::Runtime::Get();
    OAR_CHECK(!rt.strict(), kUnimplemented, "{}; CPU fallback is disabled (OAR_STRICT_DEVICE)", plan.reason);
    OAR_CHECK(device_.type() != "cpu", kUnimplemented, "{}", plan.reason);
    const int op_id = runtime::InternOp(s.name);
    OAR_CHECK(rt.Context(Device("cpu:0")).plugin().kernels().Find(op_id, key, OAR_FORMAT_PLAIN) != nullptr,
              kUnimplemented, "{}, and the cpu fallback has no kernel either", plan.reason);
    return false;
  }

  // The plugin's reason for declining the call of `op` with inputs in `in_format` and outputs in
  // `out_format` (contiguous, no data), or empty when it accepts it (or has no supports() query).
  static std::string Declined(runtime::DeviceContext& ctx, const ir::Operation* op, const ops::OpSchema& s,
                              std::span<const int32_t> key, int32_t in_format, int32_t out_format) {
    const oar_kernel_api_t* kapi = ctx.plugin().kernel();
    if (!OAR_HAS_SLOT(kapi, supports)) return {};
    const int op_id = runtime::InternOp(s.name);
    const runtime::KernelEntry* entry = ctx.plugin().kernels().Find(op_id, key, in_format);
    if (entry == nullptr) {
      return fmt::format("no kernel for these dtypes in format {}", runtime::FormatName(in_format));
    }
    const uint32_t n_in = op->num_operands(), n = n_in + op->num_results();
    std::vector<Dims> shapes(n), strides(n);
    std::vector<oar_tensor_desc_t> desc(n);
    for (uint32_t i = 0; i < n; ++i) {
      const ir::Type t = i < n_in ? op->operand(i).type() : op->result(i - n_in).type();
      shapes[i] = Dims(t.dims());
      strides[i] = Dims::Filled(shapes[i].size(), 1);
      for (int d = shapes[i].size() - 2; d >= 0; --d) {
        strides[i][d] = strides[i][d + 1] * std::max<int64_t>(shapes[i][d + 1], 1);
      }
      desc[i] = {OAR_TENSOR_DESC_STRUCT_SIZE, nullptr, nullptr, static_cast<int32_t>(t.dtype()),
                 i < n_in ? in_format : out_format, shapes[i].size(), 0, shapes[i].data(), strides[i].data()};
    }
    // The attributes exactly as the eager dispatcher passes them (ops/kernel_attrs.h).
    const ops::AttrValues values = ir::SchemaAttrValues(s, op->attributes());
    const DType value_dtype =
        ops::KernelValueDType(s, n_in > 0 ? op->operand(0).type().dtype() : DType::kInvalid,
                              op->num_results() > 0 ? op->result(0).type().dtype() : DType::kInvalid);
    std::vector<oar_attr_t> attrs;
    for (size_t i = 0; i < values.size(); ++i) attrs.push_back(ops::ToAbiAttr(ops::ToKernelAttr(s, i, values[i], value_dtype)));
    oar_kernel_call_t call{};
    call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
    call.op = entry->op_name;
    call.device = ctx.ordinal();
    call.num_inputs = static_cast<int32_t>(n_in);
    call.num_outputs = static_cast<int32_t>(op->num_results());
    call.num_attrs = static_cast<int32_t>(attrs.size());
    call.inputs = desc.data();
    call.outputs = desc.data() + n_in;
    call.attrs = attrs.data();
    call.kernel_data = entry->kernel_data;
    oar_status_t* status = nullptr;
    try {
      status = kapi->supports(&call);
    } catch (...) {
      Throw(ErrorCode::kInternal, "{}: supports() threw a C++ exception across the ABI", ctx.device().str());
    }
    if (status == nullptr) return {};
    runtime::StatusInfo info = runtime::TakeStatus(status);
    if (info.code != ErrorCode::kUnimplemented) {
      Throw(info.code, "{}: supports() failed: {}", ctx.device().str(), info.message);
    }
    return info.message.empty() ? "unsupported (no reason given)" : info.message;
  }

  ir::Value FormatCast(ir::Builder& b, ir::Value v, std::string_view from, std::string_view to) {
    ir::IrContext& ctx = b.context();
    return b.Create1("kernel.format_cast", {v},
                     {b.Attr("device", device_attr_), b.Attr("from", ctx.StringAttr(from)), b.Attr("to", ctx.StringAttr(to))});
  }
  ir::Value Copy(ir::Builder& b, ir::Value v, ir::Attribute from, ir::Attribute to) {
    return b.Create1("kernel.transfer", {v}, {b.Attr("from", from), b.Attr("to", to)});
  }

  Device device_;
  ir::Attribute device_attr_, cpu_attr_;
};

}  // namespace

void RegisterKernelSelectPass() {
  RegisterPass("kernel-select",
               "bind op.* ops to kernels on {device=NAME}: on the device, in a private format with format casts, or "
               "on the cpu fallback with copies",
               [](const PassOptions& o) {
                 CheckPassOptions("kernel-select", o, {"device"});
                 auto it = o.find("device");
                 OAR_CHECK_ARG(it != o.end(), "pass 'kernel-select' needs a device: kernel-select{{device=NAME}}");
                 return std::make_unique<KernelSelectPass>(Device(it->second));
               });
}

}  // namespace oar::passes
