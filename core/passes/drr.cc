#include "core/passes/drr.h"

#include <algorithm>
#include <set>

#include "core/base/error.h"

namespace oar::passes::drr {

ir::Value Match::Tensor(const std::string& name) const {
  auto it = tensors.find(name);
  OAR_CHECK(it != tensors.end(), kInternal, "DRR: no tensor '{}' in the match", name);
  return it->second;
}

ir::Attribute Match::Attr(const std::string& name) const {
  auto it = attrs.find(name);
  OAR_CHECK(it != attrs.end(), kInternal, "DRR: no attribute binding '{}' in the match", name);
  return it->second;
}

namespace {

// `general` says the same as `t` or less: the same dtype and rank, each extent equal or `?`.
bool Generalizes(ir::Type general, ir::Type t) {
  if (!general.IsTensor() || !t.IsTensor() || general.dtype() != t.dtype() || general.rank() != t.rank()) return false;
  for (int d = 0; d < t.rank(); ++d) {
    if (general.dims()[d] != t.dims()[d] && !ir::SymDim::IsDynamic(general.dims()[d])) return false;
  }
  return true;
}

class DrrPattern : public RewritePattern {
 public:
  DrrPattern(std::string name, int benefit, SourcePattern source, ResultPattern result, std::vector<Constraint> c)
      : RewritePattern(source.ops.back().op, benefit, std::move(name)),
        source_(std::move(source)),
        result_(std::move(result)),
        constraints_(std::move(c)) {
    for (size_t i = 0; i < source_.ops.size(); ++i) {
      for (size_t k = 0; k < source_.ops[i].outputs.size(); ++k) producer_[source_.ops[i].outputs[k]] = {i, k};
    }
  }

  bool MatchAndRewrite(ir::Operation* root, PatternRewriter& rewriter) const override {
    Match m;
    std::vector<ir::Operation*> bound(source_.ops.size(), nullptr);
    if (!MatchNode(source_.ops.size() - 1, root, m, bound)) return false;
    for (const Constraint& c : constraints_) {
      if (!c(m)) return false;
    }
    std::map<std::string, ir::Value> values = m.tensors;
    for (const ResultOp& r : result_.ops) {
      std::vector<ir::Value> operands;
      for (const std::string& in : r.inputs) operands.push_back(values.at(in));
      std::vector<ir::NamedAttribute> attrs;
      for (const auto& [attr, src] : r.attrs) {
        ir::Attribute a;
        if (const auto* f = std::get_if<FromMatch>(&src)) a = m.Attr(f->binding);
        else if (const auto* lit = std::get_if<ir::Attribute>(&src)) a = *lit;
        else a = std::get<AttrFn>(src)(m, rewriter.context());
        attrs.push_back(rewriter.Attr(attr, a));
      }
      ir::Operation* op = rewriter.Create(r.op, operands, std::move(attrs));
      for (size_t k = 0; k < r.outputs.size(); ++k) values[r.outputs[k]] = op->result(static_cast<uint32_t>(k));
    }
    for (const auto& [out, tensor] : result_.aliases) values[out] = values.at(tensor);
    std::vector<ir::Value> replacement;
    for (const std::string& out : source_.ops.back().outputs) replacement.push_back(values.at(out));
    const std::vector<ir::Operation*> created = rewriter.created();
    for (size_t i = 0; i < replacement.size(); ++i) {
      const ir::Type want = root->result(static_cast<uint32_t>(i)).type();
      // A new op may know more than the program stated (`B*6` where it says `?`): it keeps the stated type.
      ir::Operation* def = replacement[i].defining_op();
      if (replacement[i].type() != want && def != nullptr &&
          std::find(created.begin(), created.end(), def) != created.end() && Generalizes(want, replacement[i].type())) {
        replacement[i].set_type(want);
      }
      if (replacement[i].type() != want) {
        // The result would change a type the rest of the program relies on: undo and refuse the match.
        for (ir::Operation* created : rewriter.TakeCreated()) {
          if (!created->HasUses()) created->Erase();
        }
        return false;
      }
    }
    rewriter.ReplaceOp(root, replacement);
    return true;
  }

 private:
  bool MatchNode(size_t node, ir::Operation* op, Match& m, std::vector<ir::Operation*>& bound) const {
    const SourceOp& s = source_.ops[node];
    if (bound[node] != nullptr) return bound[node] == op;
    if (op->name() != s.op || op->num_operands() != s.inputs.size() || op->num_results() != s.outputs.size()) {
      return false;
    }
    bound[node] = op;
    for (const auto& [attr, binding] : s.attr_bindings) {
      const ir::Attribute a = op->attr(attr);
      if (!a) return false;
      auto [it, fresh] = m.attrs.emplace(binding, a);
      if (!fresh && it->second != a) return false;
    }
    for (size_t k = 0; k < s.outputs.size(); ++k) m.tensors[s.outputs[k]] = op->result(static_cast<uint32_t>(k));
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const ir::Value v = op->operand(static_cast<uint32_t>(i));
      auto p = producer_.find(s.inputs[i]);
      if (p != producer_.end()) {
        ir::Operation* def = v.defining_op();
        if (def == nullptr || v.index() != p->second.second || !MatchNode(p->second.first, def, m, bound)) return false;
        continue;
      }
      auto [it, fresh] = m.tensors.emplace(s.inputs[i], v);
      if (!fresh && it->second != v) return false;
    }
    return true;
  }

  SourcePattern source_;
  ResultPattern result_;
  std::vector<Constraint> constraints_;
  std::map<std::string, std::pair<size_t, size_t>> producer_;  // tensor -> (source op, output)
};

}  // namespace

std::unique_ptr<RewritePattern> Rule::Build() const {
  OAR_CHECK_ARG(!source_.ops.empty(), "DRR rule '{}': the source pattern has no ops", name_);
  std::set<std::string> produced, known;
  for (const SourceOp& s : source_.ops) {
    for (const std::string& out : s.outputs) {
      OAR_CHECK_ARG(produced.insert(out).second, "DRR rule '{}': tensor '{}' is produced twice", name_, out);
    }
  }
  for (const SourceOp& s : source_.ops) {
    known.insert(s.inputs.begin(), s.inputs.end());
    known.insert(s.outputs.begin(), s.outputs.end());
  }
  std::set<std::string> available = known;
  std::set<std::string> bindings;
  for (const SourceOp& s : source_.ops) {
    for (const auto& [attr, b] : s.attr_bindings) bindings.insert(b);
  }
  std::set<std::string> defined_by_result;
  for (const ResultOp& r : result_.ops) {
    for (const std::string& in : r.inputs) {
      OAR_CHECK_ARG(available.contains(in), "DRR rule '{}': result op {} uses tensor '{}', which is neither bound by the "
                    "source pattern nor produced by an earlier result op", name_, r.op, in);
    }
    for (const auto& [attr, src] : r.attrs) {
      if (const auto* f = std::get_if<FromMatch>(&src)) {
        OAR_CHECK_ARG(bindings.contains(f->binding), "DRR rule '{}': result op {} copies attribute binding '{}', which "
                      "the source pattern does not bind", name_, r.op, f->binding);
      }
    }
    for (const std::string& out : r.outputs) {
      available.insert(out);
      defined_by_result.insert(out);
    }
  }
  for (const auto& [out, tensor] : result_.aliases) {
    OAR_CHECK_ARG(available.contains(tensor), "DRR rule '{}': alias of '{}' to unknown tensor '{}'", name_, out, tensor);
    defined_by_result.insert(out);
  }
  for (const std::string& out : source_.ops.back().outputs) {
    OAR_CHECK_ARG(defined_by_result.contains(out), "DRR rule '{}': the root's output '{}' is not given by the result "
                  "pattern", name_, out);
  }
  return std::make_unique<DrrPattern>(name_, benefit_, source_, result_, constraints_);
}

}  // namespace oar::passes::drr
