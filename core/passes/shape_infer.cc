// The `shape-infer` pass: symbolic shape inference over a whole program (core/ir/shape_infer.h).
//
// Every op of the op and kernel dialects is inferred again, in program order, from its operands' current
// types. A result extent the program leaves `?` takes the inferred expression (`B*S`, `S+1`); an extent the
// program states is kept. Equality constraints that an op's rule imposes (matmul's inner extents) unify
// their symbols: each class of equal symbols is written as one representative in every type of the program
// (block arguments included), preferring an expression over a symbol and then the smaller text, and
// expressions are simplified again (bcast(S,S) is S). This repeats until nothing changes.
#include <algorithm>
#include <map>
#include <vector>

#include "core/base/error.h"
#include "core/ir/dim_expr.h"
#include "core/ir/shape_infer.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"

namespace oar::passes {
namespace {

constexpr int kMaxRounds = 8;

class Unifier {
 public:
  explicit Unifier(ir::IrContext& ctx) : ctx_(ctx) {}

  int64_t Find(int64_t d) {
    auto it = parent_.find(d);
    if (it == parent_.end() || it->second == d) return d;
    return it->second = Find(it->second);
  }
  /// Records a == b; returns whether a named symbol gets a new representative.
  bool Merge(int64_t a, int64_t b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return false;
    if (Better(b, a)) std::swap(a, b);  // a becomes the representative
    if (ir::DimNode(ctx_, b) != nullptr) return false;  // two expressions: nothing to substitute
    const std::vector<int64_t> in_a = ir::DimSymbols(ctx_, a);
    if (std::find(in_a.begin(), in_a.end(), b) != in_a.end()) return false;  // K = 2*K: no substitution
    parent_[b] = a;
    return true;
  }
  int64_t Substitute(int64_t d) {
    return ir::DimSubstitute(ctx_, d, [&](int64_t s) { return Find(s); });
  }
  ir::Type Substitute(ir::Type t) {
    if (!t.IsTensor()) return t;
    Dims dims = t.dims();
    for (int64_t& d : dims) d = Substitute(d);
    return ctx_.TensorType(t.dtype(), dims);
  }

 private:
  // Expressions before symbols (they say more), then the smaller text.
  bool Better(int64_t a, int64_t b) const {
    const bool ea = ir::DimNode(ctx_, a) != nullptr;
    const bool eb = ir::DimNode(ctx_, b) != nullptr;
    if (ea != eb) return ea;
    return ir::DimText(ctx_, a) < ir::DimText(ctx_, b);
  }

  ir::IrContext& ctx_;
  std::map<int64_t, int64_t> parent_;
};

// `have` refined by `inferred`: extents the program leaves `?` take the inferred ones.
ir::Type Refine(ir::IrContext& ctx, ir::Type have, ir::Type inferred) {
  if (!have.IsTensor() || !inferred.IsTensor() || have.rank() != inferred.rank() || have.dtype() != inferred.dtype()) {
    return have;
  }
  Dims dims = have.dims();
  for (int d = 0; d < dims.size(); ++d) {
    if (ir::SymDim::IsDynamic(dims[d])) dims[d] = inferred.dims()[d];
  }
  return ctx.TensorType(have.dtype(), dims);
}

class ShapeInferPass : public Pass {
 public:
  std::string_view name() const override { return "shape-infer"; }
  void Run(ir::Program& program) override {
    ir::IrContext& ctx = program.context();
    Unifier unify(ctx);
    for (int round = 0; round < kMaxRounds; ++round) {
      bool changed = false;
      program.module()->Walk([&](ir::Operation* op) {
        const ir::OpInfo& info = op->info();
        if (info.schema == nullptr) return;
        std::vector<ir::Type> operand_types;
        for (uint32_t i = 0; i < op->num_operands(); ++i) operand_types.push_back(op->operand(i).type());
        const ir::SymbolicInference r = ir::InferSymbolic(ctx, *info.schema, operand_types, op->attributes());
        for (const auto& [a, b] : r.equal) changed = unify.Merge(a, b) || changed;
        for (uint32_t i = 0; i < op->num_results() && i < r.types.size(); ++i) {
          const ir::Type t = Refine(ctx, op->result(i).type(), r.types[i]);
          if (t != op->result(i).type()) {
            op->result(i).set_type(t);
            changed = true;
          }
        }
      });
      // Write each class of equal symbols as its representative everywhere.
      auto rewrite = [&](ir::Value v) {
        const ir::Type t = unify.Substitute(v.type());
        if (t != v.type()) {
          v.set_type(t);
          changed = true;
        }
      };
      program.module()->Walk([&](ir::Operation* op) {
        for (uint32_t i = 0; i < op->num_results(); ++i) rewrite(op->result(i));
        for (uint32_t r = 0; r < op->num_regions(); ++r) {
          for (const auto& block : op->region(r).blocks()) {
            for (size_t a = 0; a < block->num_arguments(); ++a) rewrite(block->argument(a));
          }
        }
      });
      if (!changed) return;
    }
  }
};

}  // namespace

void RegisterShapeInferPass() {
  RegisterPass("shape-infer",
               "symbolic shape inference: derived extents become expressions (B*S, S+1), symbols an op requires "
               "equal are unified",
               [](const PassOptions& o) {
                 CheckPassOptions("shape-infer", o, {});
                 return std::make_unique<ShapeInferPass>();
               });
}

}  // namespace oar::passes
