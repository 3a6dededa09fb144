// The fusion patterns CINN's tests run (the issue's: what users write from primitive ops, the composites'
// decompositions, column reductions), how they are captured and how they are fused, shared by
// compiler_test.cc and opencl_test.cc.
#ifndef OAR_CORE_COMPILER_TEST_PATTERNS_H_
#define OAR_CORE_COMPILER_TEST_PATTERNS_H_

#include <functional>
#include <memory>
#include <vector>

#include "core/compiler/compiler.h"
#include "core/compiler/group.h"
#include "core/ir/builder.h"
#include "core/jit/capture.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/passes/pass.h"

namespace oar::compiler::patterns {

using Body = std::function<Tensor(const Tensor& x, const Tensor& w)>;

// The bodies users write from primitive ops (the patterns the issue names).
inline Tensor RmsNorm(const Tensor& x, const Tensor& w) { return rms_norm(x, 1, w, 1e-6); }
inline Tensor Softmax(const Tensor& x, const Tensor&) {
  const Tensor e = exp(x - amax(x, {-1}, true));
  return e / sum(e, {-1}, true);
}
inline Tensor LayerNorm(const Tensor& x, const Tensor& w) {
  const Tensor d = x - mean(x, {-1}, true);
  return d * rsqrt(mean(d * d, {-1}, true) + 1e-5) * w + w;
}
inline Tensor Silu(const Tensor& x, const Tensor& w) { return x * sigmoid(x) * w + 0.5; }
// Every value indexes the whole domain alike: the kernel's domain collapses to one dimension of B * 3 * H
// elements (a product with the symbolic batch), split into tiles.
inline Tensor SiluPlain(const Tensor& x, const Tensor&) { return x * sigmoid(x) - x * 0.25; }
// GELU's tanh form (the generated C has its own vectorisable tanh), times w; |x| spans both tanh branches.
inline Tensor TanhGelu(const Tensor& x, const Tensor& w) {
  return x * 0.5 * (tanh((x + x * x * x * 0.044715) * 0.7978845608) + 1.0) * w;
}
// Two independent reductions sharing a prologue, a row output (the mean) and a full one.
inline Tensor MeanAndCentered(const Tensor& x, const Tensor&) { return (x - mean(x, {-1}, true)) * amin(x, {-1}, true); }

// erf, sin and cos in one elementwise group (the C prelude's oar_erff, oar_sinf, oar_cosf): an erf GELU plus
// a rotary-embedding-like term with a large argument (x * 1e4, so the sines reduce well past 2 pi).
inline Tensor ErfSinCos(const Tensor& x, const Tensor& w) {
  const Tensor gelu = x * 0.5 * (erf(x * 0.70710678) + 1.0);
  return gelu + sin(x * 1e4) * w - cos(x * w) * 0.5;
}

// Column reductions (over dimensions other than the last): a weight gradient's sum over batch and
// sequence, a max over the batch alone (the kept [S, H] tiles), and batch statistics in two passes with a
// full-domain output (a batch-norm over the rows of [B * S, H]).
inline Tensor ColumnSum(const Tensor& x, const Tensor& w) { return sum(x * w, {0, 1}); }
inline Tensor ColumnMax(const Tensor& x, const Tensor& w) { return amax(x, {0}, false) * w; }
inline Tensor ColumnNorm(const Tensor& x, const Tensor& w) {
  const Tensor d = x - mean(x, {0, 1}, true);
  return d * rsqrt(mean(d * d, {0, 1}, true) + 1e-5) * w;
}

struct Case {
  const char* name;
  Body body;
  GroupTemplate kind;
  int passes;
};
inline const Case kCases[] = {
    {"rms_norm", RmsNorm, GroupTemplate::kRowReduce, 1},
    {"softmax", Softmax, GroupTemplate::kRowReduce, 2},
    {"layer_norm", LayerNorm, GroupTemplate::kRowReduce, 2},
    {"silu", Silu, GroupTemplate::kElementwise, 0},
    {"silu_plain", SiluPlain, GroupTemplate::kElementwise, 0},
    {"tanh_gelu", TanhGelu, GroupTemplate::kElementwise, 0},
    {"mean_centered", MeanAndCentered, GroupTemplate::kRowReduce, 1},
    {"erf_sin_cos", ErfSinCos, GroupTemplate::kElementwise, 0},
    // The composite ops, through their schema decompositions.
    {"softmax_op", [](const Tensor& x, const Tensor&) { return softmax(x, -1); }, GroupTemplate::kRowReduce, 2},
    {"layer_norm_op", [](const Tensor& x, const Tensor& w) { return layer_norm(x, 1, w, w, 1e-5); },
     GroupTemplate::kRowReduce, 2},
    {"column_sum", ColumnSum, GroupTemplate::kColumnReduce, 1},
    {"column_max", ColumnMax, GroupTemplate::kColumnReduce, 1},
    {"column_norm", ColumnNorm, GroupTemplate::kColumnReduce, 2},
};

// Capture body(x, w) with x: [B, S, H] (B symbolic) and w: [H] a parameter.
inline std::unique_ptr<ir::Program> CaptureBody(ir::IrContext& ctx, const Body& body, int64_t h, Tensor* w) {
  const std::vector<jit::InputSpec> specs = {
      {"x", DType::kFloat32, {jit::DimSpec::Symbol("B"), jit::DimSpec::Static(3), jit::DimSpec::Static(h)}}};
  jit::CaptureOptions o;
  o.state = {{"w", w}};
  jit::Captured c = jit::Capture(
      ctx, [&](std::span<const Tensor> in) { return std::vector<Tensor>{body(in[0], *w)}; }, specs, {}, Device("cpu:0"), o);
  return std::move(c.program);
}

// As the Predictor does: composites to primitives, the cinn pass, then dce for the constants the groups
// copied in.
inline FusionReport Fuse(ir::Program& program) {
  passes::CreatePass("decompose")->Run(program);
  const FusionReport r = FuseGroups(program);
  passes::CreatePass("dce")->Run(program);
  return r;
}

}  // namespace oar::compiler::patterns

#endif  // OAR_CORE_COMPILER_TEST_PATTERNS_H_
