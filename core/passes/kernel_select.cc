// kernel-select{device=NAME}: bind every op.* op to a kernel on a named device, as the eager dispatcher
// would (runtime::PlanKernel): on the device (kernel.<op>), on the device in a private storage format with
// explicit kernel.format_cast ops around it, or on the cpu fallback with explicit kernel.transfer ops both ways.
// Views and composites carry the device only (they run no kernel of their own).
#include <memory>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ops/schema.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"
#include "core/runtime/kernel_plan.h"
#include "core/runtime/runtime.h"

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
      try {
        plan = runtime::PlanKernel(device_, s.name, key, shapes);
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
          for (ir::Value& r : results) r = FormatCast(b, r, format, "plain");
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
