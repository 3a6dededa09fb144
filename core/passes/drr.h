// DRR: declarative rewrite rules, written as a C++ builder and compiled into a RewritePattern.
//
//   drr::Rule rule("cast_of_widening_cast");
//   rule.Source().Op("op.cast", {"x"}, {"wide"}, {{"dtype", "mid"}});
//   rule.Source().Op("op.cast", {"wide"}, {"out"}, {{"dtype", "to"}});      // the last op is the root
//   rule.Require([](const drr::Match& m) { return IsWidening(m.Tensor("x"), m.Attr("mid")); });
//   rule.Result().Op("op.cast", {"x"}, {"out"}, {{"dtype", drr::FromMatch("to")}});
//   patterns.push_back(rule.Build());
//
// A source op lists its input tensors by name: a name produced by another source op must be produced by the
// matching op; any other name is a free input, bound to whatever value is there (the same name twice means
// the same value). Attribute bindings name an op attribute's value (the same name twice means equal values).
// The result ops are created in order; the root's output tensors are replaced by the result tensors (or the
// bound tensors, via Alias) of the same name. Build() checks the rule and throws kInvalidArgument when it
// is malformed.
#ifndef OAR_CORE_PASSES_DRR_H_
#define OAR_CORE_PASSES_DRR_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/passes/pattern.h"

namespace oar::passes::drr {

/// What a match bound: tensors, attributes and ops by name.
class Match {
 public:
  ir::Value Tensor(const std::string& name) const;
  ir::Attribute Attr(const std::string& name) const;
  std::map<std::string, ir::Value> tensors;
  std::map<std::string, ir::Attribute> attrs;
};

using Constraint = std::function<bool(const Match&)>;
using AttrFn = std::function<ir::Attribute(const Match&, ir::IrContext&)>;

/// How a result op's attribute is given: copied from a binding, a literal, or computed from the match.
struct FromMatch {
  std::string binding;
};
using AttrSource = std::variant<FromMatch, ir::Attribute, AttrFn>;

struct SourceOp {
  std::string op;
  std::vector<std::string> inputs, outputs;
  std::vector<std::pair<std::string, std::string>> attr_bindings;  // op attribute -> binding name
};

struct ResultOp {
  std::string op;
  std::vector<std::string> inputs, outputs;
  std::vector<std::pair<std::string, AttrSource>> attrs;
};

class SourcePattern {
 public:
  SourcePattern& Op(std::string op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                    std::vector<std::pair<std::string, std::string>> attr_bindings = {}) {
    ops.push_back({std::move(op), std::move(inputs), std::move(outputs), std::move(attr_bindings)});
    return *this;
  }
  std::vector<SourceOp> ops;
};

class ResultPattern {
 public:
  ResultPattern& Op(std::string op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                    std::vector<std::pair<std::string, AttrSource>> attrs = {}) {
    ops.push_back({std::move(op), std::move(inputs), std::move(outputs), std::move(attrs)});
    return *this;
  }
  /// The root's output `output` becomes the bound tensor `tensor` (no new op).
  ResultPattern& Alias(std::string output, std::string tensor) {
    aliases.emplace_back(std::move(output), std::move(tensor));
    return *this;
  }
  std::vector<ResultOp> ops;
  std::vector<std::pair<std::string, std::string>> aliases;
};

class Rule {
 public:
  explicit Rule(std::string name, int benefit = 1) : name_(std::move(name)), benefit_(benefit) {}
  SourcePattern& Source() { return source_; }
  ResultPattern& Result() { return result_; }
  Rule& Require(Constraint c) {
    constraints_.push_back(std::move(c));
    return *this;
  }
  /// Check the rule and compile it into a pattern rooted at the last source op.
  std::unique_ptr<RewritePattern> Build() const;

 private:
  std::string name_;
  int benefit_;
  SourcePattern source_;
  ResultPattern result_;
  std::vector<Constraint> constraints_;
};

}  // namespace oar::passes::drr

#endif  // OAR_CORE_PASSES_DRR_H_
