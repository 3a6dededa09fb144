// fuse-linear{device=NAME}: matmul -> add(bias over the rows) [-> relu | tanh] becomes one op.fused_linear,
// written as DRR rules (drr.h). A rewrite happens only where the named device's kernel registry has a
// fused_linear kernel for the dtype: elsewhere the ops stay as they are (kernel selection would otherwise
// have to send the fused op to the cpu fallback). The same rewrite written by hand is FuseLinearByHand in
// fuse_linear_test.cc, which checks both give identical IR (docs/design/pir.md compares them).
#include <memory>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/ops/nn.h"
#include "core/passes/drr.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/runtime.h"

namespace oar::passes {

bool FusedLinearKernelOn(Device device, DType dtype) {
  static const int op_id = runtime::InternOp(ops::Schema(ops::Op::kFusedLinear).name);
  if (!ops::Schema(ops::Op::kFusedLinear).Accepts(dtype)) return false;
  const int32_t t = static_cast<int32_t>(dtype);
  const int32_t key[] = {t, t, t, t};
  return runtime::Runtime::Get().Context(device).plugin().kernels().Find(op_id, key, OAR_FORMAT_PLAIN) != nullptr;
}

bool CanFuseLinear(ir::Value x, ir::Value w, ir::Value bias, ir::Value mm, ir::Value sum, Device device) {
  const ir::Type xt = x.type(), wt = w.type(), bt = bias.type(), mt = mm.type();
  if (!xt.IsTensor() || !wt.IsTensor() || !bt.IsTensor() || xt.rank() < 2 || wt.rank() != 2 || bt.rank() != 1) {
    return false;  // a vector operand, a batched weight, or a bias that is not one value per column
  }
  // The bias broadcasts over the rows only: one static extent equal to w's columns, and the sum keeps
  // the matmul's type (a bias that broadcast the product to a larger shape is not a linear's bias).
  const int64_t n = wt.dims()[1];
  if (n < 0 || bt.dims()[0] != n || sum.type() != mt || bt.dtype() != mt.dtype()) return false;
  if (!mm.HasOneUse()) return false;  // the product is needed on its own elsewhere
  return FusedLinearKernelOn(device, mt.dtype());
}

namespace {

// The activations the rules absorb, with their `activation` attribute. (gelu has no op of its own:
// nn.h's gelu is five primitives, which these rules do not match.)
const std::pair<const char*, FusedActivation> kActivations[] = {{"op.relu", FusedActivation::kRelu},
                                                                {"op.tanh", FusedActivation::kTanh}};

// `v` is the operand of nothing but one activation a rule below absorbs: the matmul-add rule leaves it
// to that rule (the driver visits the add first).
bool FeedsOneActivation(ir::Value v) {
  if (!v.HasOneUse()) return false;
  const std::string_view user = v.first_use()->owner()->name();
  for (const auto& [op, act] : kActivations) {
    if (user == op) return true;
  }
  return false;
}

// The result op's `activation` attribute (an int attribute needs the program's context: made per match).
drr::AttrFn ActivationAttr(FusedActivation act) {
  return [code = static_cast<int64_t>(act)](const drr::Match&, ir::IrContext& ctx) { return ctx.IntAttr(code); };
}

}  // namespace

void AddFuseLinearPatterns(PatternList& patterns, Device device) {
  for (const bool bias_first : {false, true}) {  // add is commutative: bias on either side
    const std::vector<std::string> add_in = bias_first ? std::vector<std::string>{"b", "mm"}
                                                       : std::vector<std::string>{"mm", "b"};
    {
      drr::Rule r(bias_first ? "fuse_linear_bias_lhs" : "fuse_linear");
      r.Source().Op("op.matmul", {"x", "w"}, {"mm"}).Op("op.add", add_in, {"out"});
      r.Require([device](const drr::Match& m) {
        return !FeedsOneActivation(m.Tensor("out")) &&
               CanFuseLinear(m.Tensor("x"), m.Tensor("w"), m.Tensor("b"), m.Tensor("mm"), m.Tensor("out"), device);
      });
      r.Result().Op("op.fused_linear", {"x", "w", "b"}, {"out"}, {{"activation", ActivationAttr(FusedActivation::kNone)}});
      patterns.push_back(r.Build());
    }
    for (const auto& [act_op, act] : kActivations) {
      drr::Rule r(std::string(bias_first ? "fuse_linear_bias_lhs_" : "fuse_linear_") + (act_op + 3), 2);
      r.Source().Op("op.matmul", {"x", "w"}, {"mm"}).Op("op.add", add_in, {"z"}).Op(act_op, {"z"}, {"out"});
      r.Require([device](const drr::Match& m) {
        return m.Tensor("z").HasOneUse() &&
               CanFuseLinear(m.Tensor("x"), m.Tensor("w"), m.Tensor("b"), m.Tensor("mm"), m.Tensor("z"), device);
      });
      r.Result().Op("op.fused_linear", {"x", "w", "b"}, {"out"}, {{"activation", ActivationAttr(act)}});
      patterns.push_back(r.Build());
    }
  }
}

namespace {

class FuseLinearPass : public Pass {
 public:
  explicit FuseLinearPass(Device device) : device_(device) {}
  std::string_view name() const override { return "fuse-linear"; }
  void Run(ir::Program& program) override {
    runtime::Runtime::Get().Context(device_);  // an unknown device is an error before anything changes
    if (patterns_.empty()) AddFuseLinearPatterns(patterns_, device_);
    const GreedyResult r = ApplyPatternsGreedily(program, patterns_);
    OAR_CHECK(r.converged, kInternal, "fuse-linear did not converge in {} sweeps ({} rewrites)", r.iterations,
              r.rewrites);
  }

 private:
  Device device_;
  PatternList patterns_;
};

}  // namespace

void RegisterFuseLinearPass() {
  RegisterPass("fuse-linear",
               "matmul -> add(bias over rows) [-> relu | tanh] into op.fused_linear where {device=NAME} has its "
               "kernel (DRR)",
               [](const PassOptions& o) {
                 CheckPassOptions("fuse-linear", o, {"device"});
                 auto it = o.find("device");
                 OAR_CHECK_ARG(it != o.end(), "pass 'fuse-linear' needs a device: fuse-linear{{device=NAME}}");
                 return std::make_unique<FuseLinearPass>(Device(it->second));
               });
}

}  // namespace oar::passes
