// Rewrites of elementwise chains into one fused kernel that computes the very same operations, each rounded to
// the dtype (plugins/common/fused_elementwise.cc), so a program's results do not change. Each rewrites only
// where the named device has the fused op's kernel for the dtype; elsewhere the chain stays as it is.
//
// fuse-adam{device=NAME}: the elementwise chain core/optim's Adam (and AdamW) records per parameter becomes one
// op.fused_adam, as Paddle's fused_adam / PyTorch's fused Adam kernels do, so a captured training step runs one
// kernel per parameter for its update where eager runs fifteen:
//
//   m_out  = add(mul(m, beta1), mul(g, one_minus_beta1))
//   v_out  = add(mul(v, beta2), mul(mul(g, g), one_minus_beta2))
//   p_out  = sub(value, mul(div(div(m_out, bc1), add(sqrt(div(v_out, bc2)), eps)), lr))
//   value  = mul(p, decay) (AdamW: with_decay = 1) or p (Adam: with_decay = 0, lr fills the unread decay operand)
//
// The scalars (beta1, ..., lr) are 0-d values of the parameter's dtype; add and mul may have their operands
// either way round (IEEE addition and multiplication commute exactly). Every intermediate has one use; m_out
// and v_out may have more (the program's outputs: the new moments), which must come after the update. The
// kernel computes these operations in this order.
//
// fuse-rotary{device=NAME}: the rotation of rotary position embeddings with its rows given (examples/models.cc's
// RotateWith; the llama decoding step has two per layer), seven kernels, becomes one op.fused_rotary:
//
//   out = concat(sub(mul(x1, c), mul(x2, s)), add(mul(x2, c), mul(x1, s)))   along x's last axis,
//   x1 = slice(x, last, 0, h), x2 = slice(x, last, h, 2h)
//
// with c and s broadcasting against the halves (their products keep the halves' type), every mul, the sub and
// the add used once (the slices may have other uses: they are views).
//
// fuse-rms-scale{device=NAME}: the end of rms_norm (core/ops/nn.cc), mul(mul(x, rsqrt(add(ms, eps))), w), four
// kernels, becomes one op.fused_rms_scale(x, ms, eps, w), the inner ops used once and of x's type where they
// have x's shape (ms, eps and w broadcast against x; eps is 0-d).
//
// fuse-act-grad{device=NAME}: the backward of tanh and of sigmoid as their VJPs (core/ops/schema.cc) record it,
// y = tanh(x) and s = sigmoid(x) being the forward's results (CSE merges the VJP's recomputation with them):
//
//   mul(grad, add(neg(mul(y, y)), one))      -> op.fused_tanh_grad(grad, y, one)      (four kernels)
//   mul(mul(grad, s), add(neg(s), one))      -> op.fused_sigmoid_grad(grad, s, one)   (three kernels; silu's
//                                                                                      backward holds one)
//
// `one` a 0-d scalar of the dtype, grad, y and s of the result's type, every inner op used once; mul and add may
// have their operands either way round.
//
// fuse-log-softmax{device=NAME}: log_softmax(x, axis) and a later softmax(x, axis) of the same x (cross_entropy's
// forward and the softmax its VJP recomputes, core/ops/vjp.cc) become one op.fused_log_softmax(x) at the
// log_softmax's place, with both results: one maximum and one sum of exponentials per row instead of two
// (plugins/common/softmax_norm.cc computes both results as the two kernels do, bit for bit).
//
// fuse-masked-softmax{device=NAME}, fuse-masked-softmax-grad{device=NAME}: attention's scores scaled, masked and
// normalised (scaled_dot_product_attention with a mask or causal, core/ops/nn.cc) and their backward as the VJPs
// of softmax, where and mul record it (y the softmax's result):
//
//   softmax(where(mask, mul(x, scale), fill), last axis)            -> op.fused_masked_softmax(x, scale, mask, fill)
//   mul(where(mask, mul(y, sub(grad, sum(mul(grad, y), [last], keepdim))), zero), scale)
//                                                                   -> op.fused_masked_softmax_grad(grad, y, mask,
//                                                                                                   zero, scale)
//
// scale, fill and zero 0-d scalars of the dtype, mask bool broadcasting against x, every inner op used once and
// every operand in the order written (the kernels compute in that order: a NaN operand's payload depends on it).
// Three and six kernels become one each (plugins/common/softmax_norm.cc, bitwise).
//
// fuse-rotary-grad{device=NAME}: the rotary rotation's backward as rotary_embedding's VJP records it (static
// training programs), eleven kernels, becomes one op.fused_rotary_grad(g, c, s):
//
//   add(slice_scatter(add(mul(g2, c), mul(neg(g1), s)), [h, 2h)), slice_scatter(add(mul(g2, s), mul(g1, c)), [0, h)))
//
// g1, g2 the halves of g's last axis (slices), the scatters over the last axis into zeros of g's type, the add's
// operands either way round (x + 0 and 0 + x are the same number), every other operand in the order written.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/ops/schema.h"
#include "core/passes/pass.h"
#include "core/passes/pattern.h"
#include "core/passes/transforms.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/runtime.h"

namespace oar::passes {

bool FusedKernelOn(ops::Op op, Device device, DType dtype) {
  const ops::OpSchema& s = ops::Schema(op);
  if (!s.Accepts(dtype)) return false;
  const std::vector<int32_t> key(s.inputs.size() + s.outputs.size(), static_cast<int32_t>(dtype));
  return runtime::Runtime::Get().Context(device).plugin().kernels().Find(s.kernel_id, key, OAR_FORMAT_PLAIN) != nullptr;
}

namespace {

// `v` is made by `op` (an op.* name) with one use.
ir::Operation* OneUseDef(ir::Value v, std::string_view op) {
  ir::Operation* d = v.defining_op();
  return d != nullptr && d->name() == op && v.HasOneUse() ? d : nullptr;
}

bool IsScalarOf(ir::Value v, DType dtype) {
  return v.type().IsTensor() && v.type().rank() == 0 && v.type().dtype() == dtype;
}

// `op` (binary, commutative) has one operand of type `t` and one 0-d scalar of t's dtype: {tensor, scalar}.
bool SplitScalar(ir::Operation* op, ir::Type t, ir::Value* tensor, ir::Value* scalar) {
  for (uint32_t side = 0; side < 2; ++side) {
    if (op->operand(side).type() == t && IsScalarOf(op->operand(1 - side), t.dtype())) {
      *tensor = op->operand(side);
      *scalar = op->operand(1 - side);
      return true;
    }
  }
  return false;
}

// `user` comes after `op` in op's block.
bool After(const ir::Operation* op, const ir::Operation* user) {
  for (const ir::Operation* o = op->next(); o != nullptr; o = o->next()) {
    if (o == user) return true;
  }
  return false;
}

// Every use of `v` but `chain_user` comes after `root`.
bool OtherUsesAfter(ir::Value v, const ir::Operation* chain_user, const ir::Operation* root) {
  for (ir::OpOperand* u = v.first_use(); u != nullptr; u = u->next_use()) {
    if (u->owner() != chain_user && !After(root, u->owner())) return false;
  }
  return true;
}

// A moment: add(mul(state, beta), mul(term, one_minus_beta)) where `term` is g (first moment) or mul(g, g)
// (second); `is_term` tells the term's mul from the state's.
struct Moment {
  ir::Value state, beta, one_minus_beta, term;
};
bool MatchMoment(ir::Value out, ir::Type t, const std::function<bool(ir::Value)>& is_term, Moment* m) {
  ir::Operation* add = out.defining_op();
  if (add == nullptr || add->name() != "op.add" || out.type() != t) return false;
  for (uint32_t side = 0; side < 2; ++side) {
    ir::Operation* decay_mul = OneUseDef(add->operand(side), "op.mul");
    ir::Operation* term_mul = OneUseDef(add->operand(1 - side), "op.mul");
    if (decay_mul == nullptr || term_mul == nullptr) continue;
    Moment r;
    if (!SplitScalar(decay_mul, t, &r.state, &r.beta)) continue;
    if (!SplitScalar(term_mul, t, &r.term, &r.one_minus_beta)) continue;
    if (!is_term(r.term) || is_term(r.state)) continue;
    *m = r;
    return true;
  }
  return false;
}

class FuseAdamPattern : public RewritePattern {
 public:
  explicit FuseAdamPattern(Device device) : RewritePattern("op.sub", 1, "fuse_adam"), device_(device) {}

  bool MatchAndRewrite(ir::Operation* root, PatternRewriter& rewriter) const override {
    const ir::Type t = root->result(0).type();
    if (!t.IsTensor() || root->operand(0).type() != t) return false;
    // sub(value, mul(update, lr))
    ir::Operation* step = OneUseDef(root->operand(1), "op.mul");
    ir::Value update, lr;
    if (step == nullptr || !SplitScalar(step, t, &update, &lr)) return false;
    // update = div(div(m_out, bc1), add(sqrt(div(v_out, bc2)), eps))
    ir::Operation* ratio = OneUseDef(update, "op.div");
    if (ratio == nullptr) return false;
    ir::Operation* m_hat = OneUseDef(ratio->operand(0), "op.div");
    ir::Operation* denom = OneUseDef(ratio->operand(1), "op.add");
    if (m_hat == nullptr || denom == nullptr || m_hat->operand(0).type() != t ||
        !IsScalarOf(m_hat->operand(1), t.dtype())) {
      return false;
    }
    ir::Value root_v, eps;
    if (!SplitScalar(denom, t, &root_v, &eps)) return false;
    ir::Operation* root_op = OneUseDef(root_v, "op.sqrt");
    if (root_op == nullptr) return false;
    ir::Operation* v_hat = OneUseDef(root_op->operand(0), "op.div");
    if (v_hat == nullptr || v_hat->operand(0).type() != t || !IsScalarOf(v_hat->operand(1), t.dtype())) return false;
    ir::Value m_out = m_hat->operand(0), v_out = v_hat->operand(0);
    // The moments: the second one's term is mul(g, g), which names g; the first one's term is g.
    Moment second, first;
    ir::Value g;
    auto is_square = [&](ir::Value x) {
      ir::Operation* sq = OneUseDef(x, "op.mul");
      if (sq == nullptr || sq->operand(0) != sq->operand(1) || sq->operand(0).type() != t) return false;
      g = sq->operand(0);
      return true;
    };
    if (!MatchMoment(v_out, t, is_square, &second)) return false;
    is_square(second.term);  // g of the match (is_term may have run on the other operand last)
    const auto is_g = [&](ir::Value x) { return x == g; };
    if (!MatchMoment(m_out, t, is_g, &first)) return false;
    // value: mul(p, decay) used only here, or the param itself.
    ir::Value param = root->operand(0), decay;
    if (ir::Operation* d = OneUseDef(param, "op.mul")) SplitScalar(d, t, &param, &decay);  // else decay stays null
    if (!OtherUsesAfter(m_out, m_hat, root) || !OtherUsesAfter(v_out, v_hat, root)) return false;
    if (!FusedKernelOn(ops::Op::kFusedAdam, device_, t.dtype())) return false;

    rewriter.SetInsertionPoint(root);
    const int64_t with_decay = decay ? 1 : 0;
    if (!decay) decay = lr;  // not read (a constant 1 would be an allocation of its own, live with the program)
    // In the schema's order: param, grad, m, v, decay, beta1, 1 - beta1, beta2, 1 - beta2, bc1, bc2, eps, lr.
    std::vector<ir::Value> operands = {param, g, first.state, second.state, decay};
    operands.insert(operands.end(), {first.beta, first.one_minus_beta, second.beta, second.one_minus_beta});
    operands.insert(operands.end(), {m_hat->operand(1), v_hat->operand(1), eps, lr});
    ir::Operation* fused = rewriter.Create("op.fused_adam", operands,
                                           {rewriter.Attr("with_decay", rewriter.context().IntAttr(with_decay))});
    // The new moments replace m_out and v_out in their later uses; the chain, left without users once the
    // root is replaced, is erased by the driver (pure ops without uses).
    m_out.ReplaceUsesWithIf(fused->result(1), [&](ir::OpOperand& u) { return u.owner() != m_hat; });
    v_out.ReplaceUsesWithIf(fused->result(2), [&](ir::OpOperand& u) { return u.owner() != v_hat; });
    rewriter.ReplaceOp(root, fused->result(0));
    return true;
  }

 private:
  Device device_;
};

// `v` is slice(x, last axis of x, start, end) with step 1: x, or a null Value.
ir::Value LastAxisSlice(ir::Value v, int64_t start, int64_t end) {
  ir::Operation* d = v.defining_op();
  if (d == nullptr || d->name() != "op.slice") return ir::Value();
  const ir::Value x = d->operand(0);
  const int rank = x.type().rank();
  auto int_attr = [&](std::string_view name, int64_t otherwise) {
    const ir::Attribute a = d->attr(name);
    return a && a.kind() == ir::AttrKind::kInt ? a.AsInt() : otherwise;
  };
  int64_t dim = int_attr("dim", -rank - 1);
  if (dim < 0) dim += rank;
  if (dim != rank - 1 || int_attr("start", -1) != start || int_attr("end", -1) != end || int_attr("step", 1) != 1) {
    return ir::Value();
  }
  return x;
}

// `v` = mul(a, b) or mul(b, a), used once: the other operand (b given a), else null.
ir::Value MulPartner(ir::Value v, ir::Value a) {
  ir::Operation* m = OneUseDef(v, "op.mul");
  if (m == nullptr) return ir::Value();
  if (m->operand(0) == a) return m->operand(1);
  if (m->operand(1) == a) return m->operand(0);
  return ir::Value();
}

class FuseRotaryPattern : public RewritePattern {
 public:
  explicit FuseRotaryPattern(Device device) : RewritePattern("op.concat", 1, "fuse_rotary"), device_(device) {}

  bool MatchAndRewrite(ir::Operation* root, PatternRewriter& rewriter) const override {
    const ir::Type t = root->result(0).type();
    if (root->num_operands() != 2 || !t.IsTensor() || t.rank() < 1) return false;
    const int64_t last = t.dims()[t.rank() - 1];
    const ir::Attribute axis_attr = root->attr("axis");
    if (!axis_attr || axis_attr.kind() != ir::AttrKind::kInt) return false;
    int64_t axis = axis_attr.AsInt();
    if (axis < 0) axis += t.rank();
    if (last <= 0 || last % 2 != 0 || axis != t.rank() - 1) return false;
    const int64_t h = last / 2;
    // first half: sub(mul(x1, c), mul(x2, s)); second: add(mul(x2, c), mul(x1, s)), either way round.
    ir::Operation* sub = OneUseDef(root->operand(0), "op.sub");
    ir::Operation* add = OneUseDef(root->operand(1), "op.add");
    if (sub == nullptr || add == nullptr) return false;
    const ir::Type ht = sub->result(0).type();
    for (uint32_t k = 0; k < 2; ++k) {
      ir::Operation* m = sub->operand(k).defining_op();
      if (m == nullptr || m->name() != "op.mul") return false;
    }
    // x1 and c from the sub's first product: one operand is a slice [0, h) of the last axis.
    ir::Operation* p0 = sub->operand(0).defining_op();
    for (uint32_t side = 0; side < 2; ++side) {
      const ir::Value x1 = p0->operand(side), c = p0->operand(1 - side);
      const ir::Value x = LastAxisSlice(x1, 0, h);
      if (!x || x.type() != t || x1.type() != ht) continue;
      const ir::Value x2 = FindSlice(x, h, last);
      if (!x2) continue;
      const ir::Value s = MulPartner(sub->operand(1), x2);
      if (!s || MulPartner(sub->operand(0), x1) != c) continue;
      // add(mul(x2, c), mul(x1, s)), the add's operands either way round.
      bool ok = false;
      for (uint32_t a = 0; a < 2 && !ok; ++a) {
        ok = MulPartner(add->operand(a), x2) == c && MulPartner(add->operand(1 - a), x1) == s;
      }
      if (!ok || add->result(0).type() != ht) continue;
      if (c.type().dtype() != t.dtype() || s.type().dtype() != t.dtype()) continue;
      if (!FusedKernelOn(ops::Op::kFusedRotary, device_, t.dtype())) return false;
      rewriter.SetInsertionPoint(root);
      const std::vector<ir::Value> operands = {x, c, s};
      rewriter.ReplaceOp(root, rewriter.Create1("op.fused_rotary", operands));
      return true;
    }
    return false;
  }

 private:
  // A user of x that is slice(x, last axis, start, end).
  static ir::Value FindSlice(ir::Value x, int64_t start, int64_t end) {
    for (ir::OpOperand* u = x.first_use(); u != nullptr; u = u->next_use()) {
      const ir::Value r = u->owner()->num_results() == 1 ? u->owner()->result(0) : ir::Value();
      if (r && LastAxisSlice(r, start, end) == x) return r;
    }
    return ir::Value();
  }
  Device device_;
};

class FuseRmsScalePattern : public RewritePattern {
 public:
  explicit FuseRmsScalePattern(Device device) : RewritePattern("op.mul", 1, "fuse_rms_scale"), device_(device) {}

  bool MatchAndRewrite(ir::Operation* root, PatternRewriter& rewriter) const override {
    const ir::Type t = root->result(0).type();
    if (!t.IsTensor()) return false;
    for (uint32_t side = 0; side < 2; ++side) {
      ir::Operation* scaled = OneUseDef(root->operand(side), "op.mul");  // x * rsqrt(...)
      const ir::Value w = root->operand(1 - side);
      if (scaled == nullptr || scaled->result(0).type() != t || w.type().dtype() != t.dtype()) continue;
      for (uint32_t xs = 0; xs < 2; ++xs) {
        const ir::Value x = scaled->operand(xs);
        ir::Operation* rs = OneUseDef(scaled->operand(1 - xs), "op.rsqrt");
        if (rs == nullptr || x.type() != t) continue;
        ir::Operation* sum = OneUseDef(rs->operand(0), "op.add");
        if (sum == nullptr) continue;
        for (uint32_t es = 0; es < 2; ++es) {
          const ir::Value eps = sum->operand(es), ms = sum->operand(1 - es);
          if (!IsScalarOf(eps, t.dtype()) || ms.type().dtype() != t.dtype() || sum->result(0).type() != ms.type()) {
            continue;
          }
          if (!FusedKernelOn(ops::Op::kFusedRmsScale, device_, t.dtype())) return false;
          rewriter.SetInsertionPoint(root);
          const std::vector<ir::Value> operands = {x, ms, eps, w};
          rewriter.ReplaceOp(root, rewriter.Create1("op.fused_rms_scale", operands));
          return true;
        }
      }
    }
    return false;
  }

 private:
  Device device_;
};

// `op` (binary, commutative) has an operand made by `name` with one use: that op, the other operand in *other.
ir::Operation* OneUseOperand(ir::Operation* op, std::string_view name, ir::Value* other) {
  for (uint32_t side = 0; side < 2; ++side) {
    if (ir::Operation* d = OneUseDef(op->operand(side), name)) {
      *other = op->operand(1 - side);
      return d;
    }
  }
  return nullptr;
}

class FuseActGradPattern : public RewritePattern {
 public:
  explicit FuseActGradPattern(Device device) : RewritePattern("op.mul", 1, "fuse_act_grad"), device_(device) {}

  bool MatchAndRewrite(ir::Operation* root, PatternRewriter& rewriter) const override {
    const ir::Type t = root->result(0).type();
    if (!t.IsTensor() || root->num_operands() != 2) return false;
    for (uint32_t side = 0; side < 2; ++side) {
      // d = add(neg(z), one), the root's other operand `rest`.
      ir::Operation* d = OneUseDef(root->operand(side), "op.add");
      const ir::Value rest = root->operand(1 - side);
      if (d == nullptr || d->result(0).type() != t || rest.type() != t) continue;
      ir::Value one;
      ir::Operation* neg = OneUseOperand(d, "op.neg", &one);
      if (neg == nullptr || !IsScalarOf(one, t.dtype())) continue;
      const ir::Value z = neg->operand(0);
      if (z.type() != t) continue;
      // tanh: z = mul(y, y) used once, rest = grad.
      if (ir::Operation* sq = OneUseDef(z, "op.mul"); sq != nullptr && sq->operand(0) == sq->operand(1)) {
        return Rewrite(root, "op.fused_tanh_grad", ops::Op::kFusedTanhGrad, {rest, sq->operand(0), one}, rewriter);
      }
      // sigmoid: rest = mul(grad, s) used once, with s = z.
      ir::Operation* gs = OneUseDef(rest, "op.mul");
      if (gs == nullptr) continue;
      for (uint32_t k = 0; k < 2; ++k) {
        if (gs->operand(k) == z && gs->operand(1 - k).type() == t) {
          return Rewrite(root, "op.fused_sigmoid_grad", ops::Op::kFusedSigmoidGrad, {gs->operand(1 - k), z, one},
                         rewriter);
        }
      }
    }
    return false;
  }

 private:
  bool Rewrite(ir::Operation* root, std::string_view name, ops::Op op, const std::vector<ir::Value>& operands,
               PatternRewriter& rewriter) const {
    if (!FusedKernelOn(op, device_, root->result(0).type().dtype())) return false;
    rewriter.SetInsertionPoint(root);
    rewriter.ReplaceOp(root, rewriter.Create1(name, operands));
    return true;
  }
  Device device_;
};

// The `axis` attribute of `op` normalised against `rank`, or -1 when absent or out of range.
int64_t NormalAxis(const ir::Operation* op, int rank) {
  const ir::Attribute a = op->attr("axis");
  if (!a || a.kind() != ir::AttrKind::kInt) return -1;
  const int64_t axis = a.AsInt() < 0 ? a.AsInt() + std::max(rank, 1) : a.AsInt();
  return axis >= 0 && axis < std::max(rank, 1) ? axis : -1;
}

class FuseLogSoftmaxPattern : public RewritePattern {
 public:
  explicit FuseLogSoftmaxPattern(Device device)
      : RewritePattern("op.softmax", 1, "fuse_log_softmax"), device_(device) {}

  bool MatchAndRewrite(ir::Operation* root, PatternRewriter& rewriter) const override {
    const ir::Value x = root->operand(0);
    const ir::Type t = root->result(0).type();
    if (!t.IsTensor() || x.type() != t) return false;
    const int64_t axis = NormalAxis(root, t.rank());
    if (axis < 0) return false;
    for (ir::OpOperand* u = x.first_use(); u != nullptr; u = u->next_use()) {
      ir::Operation* ls = u->owner();
      if (ls->name() != "op.log_softmax" || !After(ls, root)) continue;  // the log_softmax first, in root's block
      if (ls->result(0).type() != t || NormalAxis(ls, t.rank()) != axis) continue;
      if (!FusedKernelOn(ops::Op::kFusedLogSoftmax, device_, t.dtype())) return false;
      rewriter.SetInsertionPoint(ls);
      const ir::Value operand[] = {x};
      ir::Operation* fused =
          rewriter.Create("op.fused_log_softmax", operand, {rewriter.Attr("axis", rewriter.context().IntAttr(axis))});
      // The log_softmax, left without users, is erased by the driver (a pure op without uses).
      ls->result(0).ReplaceAllUsesWith(fused->result(0));
      rewriter.ReplaceOp(root, fused->result(1));
      return true;
    }
    return false;
  }

 private:
  Device device_;
};

// `v` = slice_scatter(src) into [start, end) of the last axis of v's shape, used once: src, else null.
ir::Value LastAxisScatterSource(ir::Value v, int64_t start, int64_t end) {
  ir::Operation* d = OneUseDef(v, "op.slice_scatter");
  if (d == nullptr) return ir::Value();
  const int rank = v.type().rank();
  auto int_attr = [&](std::string_view name, int64_t otherwise) {
    const ir::Attribute a = d->attr(name);
    return a && a.kind() == ir::AttrKind::kInt ? a.AsInt() : otherwise;
  };
  int64_t dim = int_attr("dim", 0);
  if (dim < 0) dim += rank;
  if (dim != rank - 1 || int_attr("start", 0) != start || int_attr("end", -1) != end || int_attr("step", 1) != 1) {
    return ir::Value();
  }
  return d->operand(0);
}

// `v` = mul(a, b) used once with these operands in this order.
bool IsMulOf(ir::Value v, ir::Value a, ir::Value b) {
  ir::Operation* m = OneUseDef(v, "op.mul");
  return m != nullptr && m->operand(0) == a && m->operand(1) == b;
}

class FuseRotaryGradPattern : public RewritePattern {
 public:
  explicit FuseRotaryGradPattern(Device device) : RewritePattern("op.add", 1, "fuse_rotary_grad"), device_(device) {}

  // root = add(slice_scatter(d2, [h, 2h)), slice_scatter(d1, [0, h))) (either way round) over the last axis, with
  // d1 = add(mul(g2, s), mul(g1, c)), d2 = add(mul(g2, c), mul(neg(g1), s)), g1, g2 the halves of one grad:
  // rotary_embedding's VJP (core/ops/nn.cc's concat of x1 * cos - x2 * sin, x2 * cos + x1 * sin, through the
  // VJPs of concat, sub, add and mul).
  bool MatchAndRewrite(ir::Operation* root, PatternRewriter& rewriter) const override {
    const ir::Type t = root->result(0).type();
    if (!t.IsTensor() || t.rank() < 1 || root->operand(0).type() != t || root->operand(1).type() != t) return false;
    const int64_t last = t.dims()[t.rank() - 1];
    if (last <= 0 || last % 2 != 0) return false;
    const int64_t h = last / 2;
    for (uint32_t side = 0; side < 2; ++side) {
      const ir::Value d2 = LastAxisScatterSource(root->operand(side), h, last);
      const ir::Value d1 = LastAxisScatterSource(root->operand(1 - side), 0, h);
      if (!d1 || !d2) continue;
      ir::Operation* a1 = OneUseDef(d1, "op.add");
      ir::Operation* a2 = OneUseDef(d2, "op.add");
      if (a1 == nullptr || a2 == nullptr) continue;
      // d1's second product is mul(g1, c): it names g1 and c; g is the tensor g1 slices.
      ir::Operation* p = OneUseDef(a1->operand(1), "op.mul");
      if (p == nullptr) continue;
      const ir::Value g1 = p->operand(0), c = p->operand(1);
      const ir::Value g = LastAxisSlice(g1, 0, h);
      if (!g || g.type() != t) continue;
      ir::Value g2;
      for (ir::OpOperand* u = g.first_use(); u != nullptr && !g2; u = u->next_use()) {
        const ir::Value r = u->owner()->num_results() == 1 ? u->owner()->result(0) : ir::Value();
        if (r && LastAxisSlice(r, h, last) == g) g2 = r;
      }
      if (!g2) continue;
      ir::Operation* sm = OneUseDef(a1->operand(0), "op.mul");  // mul(g2, s)
      if (sm == nullptr || sm->operand(0) != g2) continue;
      const ir::Value s = sm->operand(1);
      ir::Operation* nm = OneUseDef(a2->operand(1), "op.mul");  // mul(neg(g1), s)
      ir::Operation* neg = nm == nullptr ? nullptr : OneUseDef(nm->operand(0), "op.neg");
      if (!IsMulOf(a2->operand(0), g2, c) || neg == nullptr || neg->operand(0) != g1 || nm->operand(1) != s) continue;
      if (c.type().dtype() != t.dtype() || s.type().dtype() != t.dtype() || g1.type() != d1.type() ||
          d1.type() != d2.type()) {
        continue;
      }
      if (!FusedKernelOn(ops::Op::kFusedRotaryGrad, device_, t.dtype())) return false;
      rewriter.SetInsertionPoint(root);
      const std::vector<ir::Value> operands = {g, c, s};
      rewriter.ReplaceOp(root, rewriter.Create1("op.fused_rotary_grad", operands));
      return true;
    }
    return false;
  }

 private:
  Device device_;
};

// The device has a kernel for a masked softmax op `op` of dtype `t` (every operand and result of t but the bool
// mask, input 2).
bool MaskedSoftmaxKernelOn(ops::Op op, Device device, DType t) {
  const ops::OpSchema& s = ops::Schema(op);
  if (!s.Accepts(t)) return false;
  std::vector<int32_t> key(s.inputs.size() + s.outputs.size(), static_cast<int32_t>(t));
  key[2] = static_cast<int32_t>(DType::kBool);
  return runtime::Runtime::Get().Context(device).plugin().kernels().Find(s.kernel_id, key, OAR_FORMAT_PLAIN) != nullptr;
}

// `w` = where(mask, a, v) used once, with a of type `t`, v a 0-d scalar of t's dtype and a bool mask that
// broadcasts against t without widening it (the where's result has type t): the where, else null.
ir::Operation* MaskedSelect(ir::Value w, ir::Type t) {
  ir::Operation* where = OneUseDef(w, "op.where");
  if (where == nullptr || where->result(0).type() != t || where->operand(1).type() != t ||
      !IsScalarOf(where->operand(2), t.dtype()) || where->operand(0).type().dtype() != DType::kBool) {
    return nullptr;
  }
  return where;
}

class FuseMaskedSoftmaxPattern : public RewritePattern {
 public:
  explicit FuseMaskedSoftmaxPattern(Device device)
      : RewritePattern("op.softmax", 1, "fuse_masked_softmax"), device_(device) {}

  bool MatchAndRewrite(ir::Operation* root, PatternRewriter& rewriter) const override {
    const ir::Type t = root->result(0).type();
    if (!t.IsTensor() || t.rank() < 1 || NormalAxis(root, t.rank()) != t.rank() - 1) return false;
    ir::Operation* where = MaskedSelect(root->operand(0), t);
    if (where == nullptr) return false;
    // x * scale: x first (the kernel multiplies in this order).
    ir::Operation* mul = OneUseDef(where->operand(1), "op.mul");
    if (mul == nullptr || mul->operand(0).type() != t || !IsScalarOf(mul->operand(1), t.dtype())) return false;
    if (!MaskedSoftmaxKernelOn(ops::Op::kFusedMaskedSoftmax, device_, t.dtype())) return false;
    rewriter.SetInsertionPoint(root);
    const std::vector<ir::Value> operands = {mul->operand(0), mul->operand(1), where->operand(0), where->operand(2)};
    rewriter.ReplaceOp(root, rewriter.Create1("op.fused_masked_softmax", operands));
    return true;
  }

 private:
  Device device_;
};

class FuseMaskedSoftmaxGradPattern : public RewritePattern {
 public:
  explicit FuseMaskedSoftmaxGradPattern(Device device)
      : RewritePattern("op.mul", 1, "fuse_masked_softmax_grad"), device_(device) {}

  // root = mul(where(mask, mul(y, sub(grad, sum(mul(grad, y), [last], keepdim))), zero), scale), each inner op
  // used once, every operand order as written (softmax's VJP, where's and mul's record them so).
  bool MatchAndRewrite(ir::Operation* root, PatternRewriter& rewriter) const override {
    const ir::Type t = root->result(0).type();
    if (!t.IsTensor() || t.rank() < 1 || !IsScalarOf(root->operand(1), t.dtype())) return false;
    ir::Operation* where = MaskedSelect(root->operand(0), t);
    if (where == nullptr) return false;
    ir::Operation* q = OneUseDef(where->operand(1), "op.mul");
    if (q == nullptr) return false;
    const ir::Value y = q->operand(0);
    ir::Operation* d = OneUseDef(q->operand(1), "op.sub");
    if (d == nullptr || y.type() != t || d->result(0).type() != t) return false;
    const ir::Value grad = d->operand(0);
    ir::Operation* sum = OneUseDef(d->operand(1), "op.sum");
    if (sum == nullptr || grad.type() != t) return false;
    const ir::Attribute axes = sum->attr("axes"), keep = sum->attr("keepdim");
    if (!axes || axes.kind() != ir::AttrKind::kArray || !keep || keep.kind() != ir::AttrKind::kBool || !keep.AsBool()) {
      return false;
    }
    const std::vector<int64_t> a = axes.AsInts("axes");
    if (a.size() != 1 || (a[0] != t.rank() - 1 && a[0] != -1)) return false;
    ir::Operation* p = OneUseDef(sum->operand(0), "op.mul");
    if (p == nullptr || p->operand(0) != grad || p->operand(1) != y || p->result(0).type() != t) return false;
    if (!MaskedSoftmaxKernelOn(ops::Op::kFusedMaskedSoftmaxGrad, device_, t.dtype())) return false;
    rewriter.SetInsertionPoint(root);
    const std::vector<ir::Value> operands = {grad, y, where->operand(0), where->operand(2), root->operand(1)};
    rewriter.ReplaceOp(root, rewriter.Create1("op.fused_masked_softmax_grad", operands));
    return true;
  }

 private:
  Device device_;
};

// One pass per pattern, all alike: the device is checked first, then the rewrite runs to a fixed point.
template <typename PatternT>
class FusePass : public Pass {
 public:
  FusePass(std::string_view name, Device device) : name_(name), device_(device) {}
  std::string_view name() const override { return name_; }
  void Run(ir::Program& program) override {
    runtime::Runtime::Get().Context(device_);  // an unknown device is an error before anything changes
    PatternList patterns;
    patterns.push_back(std::make_unique<PatternT>(device_));
    const GreedyResult r = ApplyPatternsGreedily(program, patterns);
    OAR_CHECK(r.converged, kInternal, "{} did not converge in {} sweeps ({} rewrites)", name_, r.iterations,
              r.rewrites);
  }

 private:
  std::string_view name_;
  Device device_;
};

template <typename PatternT>
void RegisterFusePass(std::string_view name, std::string_view description) {
  RegisterPass(name, description, [name](const PassOptions& o) -> std::unique_ptr<Pass> {
    CheckPassOptions(name, o, {"device"});
    auto it = o.find("device");
    OAR_CHECK_ARG(it != o.end(), "pass '{}' needs a device: {}{{device=NAME}}", name, name);
    return std::make_unique<FusePass<PatternT>>(name, Device(it->second));
  });
}

}  // namespace

void RegisterFuseElementwisePasses() {
  RegisterFusePass<FuseAdamPattern>("fuse-adam",
                                    "Adam's (AdamW's) elementwise update chain per parameter into op.fused_adam where "
                                    "{device=NAME} has its kernel (bitwise the same operations)");
  RegisterFusePass<FuseRotaryPattern>(
      "fuse-rotary",
      "the rotary rotation concat(x1 c - x2 s, x2 c + x1 s) of x's halves into "
      "op.fused_rotary where {device=NAME} has its kernel (bitwise the same operations)");
  RegisterFusePass<FuseActGradPattern>("fuse-act-grad",
                                       "tanh's and sigmoid's backward (grad * (1 - y * y), grad * s * (1 - s)) into "
                                       "op.fused_tanh_grad / op.fused_sigmoid_grad where {device=NAME} has their "
                                       "kernels (bitwise the same operations)");
  RegisterFusePass<FuseLogSoftmaxPattern>("fuse-log-softmax",
                                          "log_softmax(x) and a later softmax(x) along one axis into one "
                                          "op.fused_log_softmax where {device=NAME} has its kernel (bitwise the "
                                          "two ops' results)");
  RegisterFusePass<FuseRotaryGradPattern>("fuse-rotary-grad",
                                          "the rotary rotation's backward (its VJP's products, negation and sums and "
                                          "the slice_scatter + add joining the halves) into op.fused_rotary_grad "
                                          "where {device=NAME} has its kernel (bitwise the same operations)");
  RegisterFusePass<FuseMaskedSoftmaxPattern>("fuse-masked-softmax",
                                             "attention's softmax(where(mask, x * scale, fill)) over the last axis "
                                             "into op.fused_masked_softmax where {device=NAME} has its kernel "
                                             "(bitwise the three ops)");
  RegisterFusePass<FuseMaskedSoftmaxGradPattern>(
      "fuse-masked-softmax-grad",
      "its backward where(mask, y * (grad - sum(grad * y, last, keepdim)), 0) * scale into "
      "op.fused_masked_softmax_grad where {device=NAME} has its kernel (bitwise the six ops)");
  RegisterFusePass<FuseRmsScalePattern>("fuse-rms-scale",
                                        "rms_norm's x * rsqrt(ms + eps) * w into op.fused_rms_scale where "
                                        "{device=NAME} has its kernel (bitwise the same operations)");
}

}  // namespace oar::passes
