#include "core/jit/capture.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>

#include "core/base/error.h"
#include "core/ir/op_dialect.h"
#include "core/ir/text.h"
#include "core/ops/ops.h"
#include "core/ops/trace.h"
#include "core/tensor/autograd_meta.h"

namespace oar::jit {
namespace {

constexpr std::string_view kStateAttr = "jit.state_updates";

// One traced value: where it comes from.
struct Node {
  enum Kind { kInput, kState, kConstant, kResult } kind;
  int index = 0;   // input index, state slot index, constant index, or event index
  int result = 0;  // which result of the event
};

// One op the function ran.
struct Event {
  ops::Op op;
  std::vector<int> inputs;  // node ids
  ops::AttrValues attrs;
  std::vector<ops::TensorMeta> outputs;
};

// Everything one run of the function produced.
struct Trace {
  std::vector<Node> nodes;
  std::vector<Event> events;
  std::vector<Tensor> constants;
  std::vector<int> outputs;       // node ids of the function's results
  std::vector<int> state_final;   // per state slot: its node at the end, or -1 when it ended undefined
  std::vector<Tensor> results;    // the eager results
};

std::string EventName(const Trace& t, int node) {
  const Node& n = t.nodes[static_cast<size_t>(node)];
  if (n.kind != Node::kResult) return "an input";
  return fmt::format("op.{} (op #{} of the capture)", ops::Schema(t.events[static_cast<size_t>(n.index)].op).name,
                     n.index);
}

class Tracer final : public ops::Tracer {
 public:
  Tracer(Trace& trace, std::span<const Tensor> inputs, std::span<const StateSlot> state) : t_(trace) {
    for (size_t i = 0; i < inputs.size(); ++i) Bind(inputs[i], {Node::kInput, static_cast<int>(i)});
    for (size_t i = 0; i < state.size(); ++i) {
      if (state[i].tensor->defined()) Bind(*state[i].tensor, {Node::kState, static_cast<int>(i)});
    }
  }

  int Id(const Tensor& t) {
    auto it = ids_.find(t.impl());
    if (it != ids_.end()) return it->second;
    // A tensor made outside the traced ops: its current value becomes part of the program.
    const int c = static_cast<int>(t_.constants.size());
    {
      ops::TraceSuspend quiet;
      t_.constants.push_back(t.detach());
    }
    return Bind(t, {Node::kConstant, c});
  }
  std::optional<int> Find(const Tensor& t) const {
    auto it = ids_.find(t.impl());
    return it == ids_.end() ? std::nullopt : std::optional<int>(it->second);
  }

  void OnOp(ops::Op op, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
            const ops::AttrValues& attrs) override {
    Event e{op, {}, attrs, {}};
    for (const Tensor& in : inputs) e.inputs.push_back(Id(in));
    const int index = static_cast<int>(t_.events.size());
    for (const Tensor& out : outputs) e.outputs.push_back({out.dtype(), out.shape()});
    t_.events.push_back(std::move(e));
    for (size_t r = 0; r < outputs.size(); ++r) Bind(outputs[r], {Node::kResult, index, static_cast<int>(r)});
  }

  void OnView(const Tensor& base, const Tensor& view, ViewOp op, std::span<const int64_t> args) override {
    const ops::ViewCall call = ops::ViewCallOf(view, op, args);
    OnOp(call.op, {&base, 1}, {&view, 1}, call.attrs);
  }

  void OnCopy(const Tensor& dst, const Tensor& src) override {
    const size_t bytes = dst.nbytes();
    OAR_CHECK(dst.offset() == 0 && dst.is_contiguous() && bytes == dst.storage()->nbytes(), kFailedPrecondition,
              "capture: an in-place copy into part of a tensor (shape {}, offset {}, {} of {} bytes) cannot be "
              "captured; build the value out of place (e.g. with concat or slice_scatter)",
              dst.shape().ToString(), dst.offset(), bytes, dst.storage()->nbytes());
    int value = Id(src);
    if (src.shape() != dst.shape()) {
      ops::TraceSuspend quiet;
      const Tensor expanded = src.expand(dst.shape());
      OnOp(ops::Op::kExpand, {&src, 1}, {&expanded, 1},
           {std::vector<int64_t>(dst.shape().begin(), dst.shape().end())});
      value = Id(expanded);
    }
    Rebind(dst, value);
  }

  void OnTransfer(const Tensor& src, const Tensor& moved) override { Rebind(moved, Id(src)); }
  void OnAlias(const Tensor& src, const Tensor& alias) override { Rebind(alias, Id(src)); }

  void OnHostRead(const Tensor& t, std::string_view what) override {
    const std::optional<int> id = Find(t);
    if (!id) return;  // a tensor from outside: its value is fixed during the capture
    Throw(ErrorCode::kFailedPrecondition,
          "capture: {} of a tensor of shape {} computed by {} inside the captured function; a program cannot "
          "depend on values read on the host. Move the read out of the function or return the tensor as an "
          "output",
          what, t.shape().ToString(), EventName(t_, *id));
  }

 private:
  int Bind(const Tensor& t, Node n) {
    const int id = static_cast<int>(t_.nodes.size());
    t_.nodes.push_back(n);
    Rebind(t, id);
    return id;
  }
  void Rebind(const Tensor& t, int id) {
    ids_[t.impl()] = id;
    keep_.push_back(t);  // an impl's address must not be reused while the trace refers to it
  }

  Trace& t_;
  std::unordered_map<const TensorImpl*, int> ids_;
  std::vector<Tensor> keep_;
};

Trace RunTrace(const Function& fn, std::span<const Tensor> inputs, std::span<const StateSlot> state) {
  Trace trace;
  Tracer tracer(trace, inputs, state);
  {
    ops::ScopedTracer active(tracer);
    trace.results = fn(inputs);
  }
  for (const Tensor& r : trace.results) {
    OAR_CHECK_ARG(r.defined(), "capture: the function returned an undefined tensor");
    trace.outputs.push_back(tracer.Id(r));
  }
  for (const StateSlot& s : state) trace.state_final.push_back(s.tensor->defined() ? tracer.Id(*s.tensor) : -1);
  return trace;
}

Tensor ExampleInput(const InputSpec& spec, int trace, const CaptureOptions& o, Device device) {
  Dims shape;
  for (const DimSpec& d : spec.dims) shape.push_back(d.is_static() ? d.extent : o.probe_extents[trace]);
  return zeros(shape, spec.dtype, device);
}

bool HasSymbolic(std::span<const InputSpec> specs) {
  for (const InputSpec& s : specs) {
    for (const DimSpec& d : s.dims) {
      if (!d.is_static()) return true;
    }
  }
  return false;
}

// Make trace `a`'s attributes valid for every extent, given trace `b` at other extents (see capture.h).
void Generalise(Trace& a, const Trace& b) {
  OAR_CHECK(a.events.size() == b.events.size() && a.nodes.size() == b.nodes.size(), kFailedPrecondition,
            "capture: the function ran {} ops at one extent of its symbolic dimensions and {} at another; its "
            "ops must not depend on those extents",
            a.events.size(), b.events.size());
  auto input_shape = [&](const Trace& t, const Event& e) -> Dims {
    const Node& n = t.nodes[static_cast<size_t>(e.inputs[0])];
    if (n.kind == Node::kResult) {
      return t.events[static_cast<size_t>(n.index)].outputs[static_cast<size_t>(n.result)].shape;
    }
    return {};
  };
  for (size_t i = 0; i < a.events.size(); ++i) {
    Event& ea = a.events[i];
    const Event& eb = b.events[i];
    const ops::OpSchema& s = ops::Schema(ea.op);
    OAR_CHECK(ea.op == eb.op && ea.inputs == eb.inputs, kFailedPrecondition,
              "capture: op #{} is op.{} at one extent of the symbolic dimensions and op.{} at another", i, s.name,
              ops::Schema(eb.op).name);
    for (size_t k = 0; k < ea.attrs.size(); ++k) {
      if (ea.attrs[k] == eb.attrs[k]) continue;
      const std::string_view attr = s.attrs[k].name;
      auto refuse = [&](std::string_view why) {
        Throw(ErrorCode::kFailedPrecondition,
              "capture: op #{} (op.{}) has attribute '{}' depending on a symbolic extent ({}); {}", i, s.name, attr,
              why, "make that dimension static, or compute the value from a tensor");
      };
      if ((ea.op == ops::Op::kView || ea.op == ops::Op::kExpand) && attr == "shape") {
        auto& va = std::get<std::vector<int64_t>>(ea.attrs[k]);
        const auto& vb = std::get<std::vector<int64_t>>(eb.attrs[k]);
        const Dims ina = input_shape(a, ea);
        int changed = 0;
        for (size_t j = 0; j < va.size(); ++j) {
          if (va[j] == vb[j]) continue;
          ++changed;
          if (ea.op == ops::Op::kExpand) {
            const int64_t lead = static_cast<int64_t>(va.size()) - ina.size();
            const int64_t at = static_cast<int64_t>(j) - lead;
            if (ina.size() == 0 || at < 0 || ina[static_cast<int>(at)] == 1) refuse("a broadcast to that extent");
          }
          va[j] = -1;
        }
        if (ea.op == ops::Op::kView && changed > 1) refuse("more than one extent of a view");
        continue;
      }
      if (ea.op == ops::Op::kSlice && (attr == "start" || attr == "end")) {
        const int64_t dim = std::get<int64_t>(ea.attrs[static_cast<size_t>(s.AttrIndex("dim"))]);
        const Dims ina = input_shape(a, ea), inb = input_shape(b, eb);
        if (dim < ina.size() && dim < inb.size()) {
          const int64_t ra = std::get<int64_t>(ea.attrs[k]) - ina[static_cast<int>(dim)];
          const int64_t rb = std::get<int64_t>(eb.attrs[k]) - inb[static_cast<int>(dim)];
          if (ra == rb && ra <= 0) {
            // Counted from the end: `end` == extent becomes "to the end".
            ea.attrs[k] = ra == 0 ? (attr == "end" ? std::numeric_limits<int64_t>::max() : int64_t{0}) : ra;
            continue;
          }
        }
        refuse("a slice bound that is not a fixed distance from the end");
      }
      refuse(ea.op == ops::Op::kFill ? "a tensor created with that extent" : "an attribute value");
    }
  }
  for (size_t c = 0; c < a.constants.size(); ++c) {
    const Tensor& ca = a.constants[c];
    const Tensor& cb = b.constants[c];
    OAR_CHECK(ca.shape() == cb.shape() && ca.dtype() == cb.dtype(), kFailedPrecondition,
              "capture: a tensor made outside the traced ops is {}{} at one extent of the symbolic dimensions and "
              "{}{} at another; create it with ops inside the function",
              DTypeName(ca.dtype()), ca.shape().ToString(), DTypeName(cb.dtype()), cb.shape().ToString());
    // Its values must not depend on the extent either (a position table made on the host, say).
    ops::TraceSuspend quiet;
    const std::vector<double> va = ca.ToVector<double>(), vb = cb.ToVector<double>();
    OAR_CHECK(std::memcmp(va.data(), vb.data(), va.size() * sizeof(double)) == 0, kFailedPrecondition,
              "capture: a tensor made outside the traced ops ({}{}) holds different values at different extents "
              "of the symbolic dimensions; compute it with ops inside the function, or make that dimension static",
              DTypeName(ca.dtype()), ca.shape().ToString());
  }
}

ir::Attribute ConstantValues(ir::IrContext& ctx, const Tensor& t) {
  std::vector<ir::Attribute> values;
  if (IsFloating(t.dtype())) {
    for (double v : t.contiguous().ToVector<double>()) values.push_back(ctx.FloatAttr(v));
  } else if (t.dtype() == DType::kBool) {
    for (bool v : t.contiguous().ToVector<bool>()) values.push_back(ctx.BoolAttr(v));
  } else {
    for (int64_t v : t.contiguous().ToVector<int64_t>()) values.push_back(ctx.IntAttr(v));
  }
  return ctx.ArrayAttr(values);
}

// Build the program of trace `t` (attributes already generalised).
std::unique_ptr<ir::Program> Emit(ir::IrContext& ctx, const Trace& t, std::span<const InputSpec> specs,
                                  std::span<const StateSlot> state, std::span<const Tensor> state_values,
                                  const CaptureOptions& options, bool symbolic, std::vector<std::string>* updates) {
  auto program = std::make_unique<ir::Program>(ctx);
  ir::Builder b(ctx, program->block());
  std::vector<ir::Value> values(t.nodes.size());
  std::vector<ir::Value> state_value(state.size());
  std::vector<ir::Value> constant_value(t.constants.size());
  std::vector<ir::Value> input_value(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    Dims dims;
    for (const DimSpec& d : specs[i].dims) {
      dims.push_back(d.is_static() ? d.extent : d.symbol.empty() ? ir::SymDim::kDynamic : ctx.Symbol(d.symbol));
    }
    const ir::Type type = ctx.TensorType(specs[i].dtype, dims);
    input_value[i] = b.Create("builtin.data", {},
                              {b.Attr("name", ctx.StringAttr(specs[i].name)), b.Attr("index", ctx.IntAttr(static_cast<int64_t>(i)))},
                              {&type, 1})
                         ->result(0);
  }
  int lifted = 0;
  std::map<std::pair<int, int>, ir::Value> results;  // (event, result) -> value
  for (size_t id = 0; id < t.nodes.size(); ++id) {
    const Node& n = t.nodes[id];
    switch (n.kind) {
      case Node::kInput: values[id] = input_value[static_cast<size_t>(n.index)]; break;
      case Node::kState: {
        ir::Value& v = state_value[static_cast<size_t>(n.index)];
        if (!v) {
          const Tensor& value = state_values[static_cast<size_t>(n.index)];
          const ir::Type type = ctx.TensorType(value.dtype(), value.shape());
          const std::string& name = state[static_cast<size_t>(n.index)].name;
          v = b.Create("builtin.parameter", {}, {b.Attr("name", ctx.StringAttr(name))}, {&type, 1})->result(0);
          program->parameters[name] = value;
        }
        values[id] = v;
        break;
      }
      case Node::kConstant: {
        ir::Value& v = constant_value[static_cast<size_t>(n.index)];
        if (!v) {
          const Tensor& c = t.constants[static_cast<size_t>(n.index)];
          const ir::Type type = ctx.TensorType(c.dtype(), c.shape());
          if (c.numel() <= options.max_constant_elements && c.numel() > 0) {
            v = b.Create("builtin.constant", {}, {b.Attr("value", ConstantValues(ctx, c))}, {&type, 1})->result(0);
          } else {
            const std::string name = fmt::format("const.{}", lifted++);
            v = b.Create("builtin.parameter", {}, {b.Attr("name", ctx.StringAttr(name))}, {&type, 1})->result(0);
            program->parameters[name] = c.contiguous();
          }
        }
        values[id] = v;
        break;
      }
      case Node::kResult: {
        const Event& e = t.events[static_cast<size_t>(n.index)];
        if (n.result == 0) {
          const ops::OpSchema& s = ops::Schema(e.op);
          std::vector<ir::Value> operands;
          for (int in : e.inputs) operands.push_back(values[static_cast<size_t>(in)]);
          std::vector<ir::Type> types;
          if (!symbolic) {
            for (const ops::TensorMeta& m : e.outputs) types.push_back(ctx.TensorType(m.dtype, m.shape));
          }
          ir::Operation* op = nullptr;
          try {
            op = b.Create("op." + std::string(s.name), operands, ir::SchemaAttributes(ctx, s, e.attrs), types);
          } catch (const Error& err) {
            Throw(err.code(), "capture: op #{} (op.{}): {}", n.index, s.name, err.what());
          }
          for (uint32_t r = 0; r < op->num_results(); ++r) {
            // Later nodes for the other results of this op follow; remember them by (event, result).
            results.emplace(std::pair(n.index, static_cast<int>(r)), op->result(r));
          }
        }
        values[id] = results.at(std::pair(n.index, n.result));
        break;
      }
    }
  }
  std::vector<ir::Value> outs;
  std::vector<ir::Attribute> names;
  for (size_t i = 0; i < t.outputs.size(); ++i) {
    outs.push_back(values[static_cast<size_t>(t.outputs[i])]);
    names.push_back(ctx.StringAttr(i < options.output_names.size() ? options.output_names[i] : fmt::format("out{}", i)));
  }
  std::vector<ir::Attribute> update_names;
  for (size_t s = 0; s < state.size(); ++s) {
    const int final_node = t.state_final[s];
    if (final_node < 0) continue;
    const Node& n = t.nodes[static_cast<size_t>(final_node)];
    if (n.kind == Node::kState && n.index == static_cast<int>(s)) continue;  // unchanged
    outs.push_back(values[static_cast<size_t>(final_node)]);
    names.push_back(ctx.StringAttr(state[s].name));
    update_names.push_back(ctx.StringAttr(state[s].name));
    updates->push_back(state[s].name);
  }
  b.Create("builtin.output", outs, {b.Attr("names", ctx.ArrayAttr(names))});
  if (!update_names.empty()) program->module()->SetAttr(kStateAttr, ctx.ArrayAttr(update_names));
  return program;
}

}  // namespace

InputSpec InputSpec::Of(std::string name, const Tensor& t) {
  InputSpec s{std::move(name), t.dtype(), {}};
  for (int64_t e : t.shape()) s.dims.push_back(DimSpec::Static(e));
  return s;
}

std::string InputSpec::ToString() const {
  std::string dims;
  for (const DimSpec& d : this->dims) {
    if (!dims.empty()) dims += ", ";
    dims += d.is_static() ? std::to_string(d.extent) : d.symbol.empty() ? "?" : d.symbol;
  }
  return fmt::format("{}: {}[{}]", name, DTypeName(dtype), dims);
}

Captured Capture(ir::IrContext& ctx, const Function& fn, std::span<const InputSpec> specs,
                 std::span<const Tensor> example_inputs, Device device, const CaptureOptions& options) {
  for (const StateSlot& s : options.state) {
    OAR_CHECK_ARG(s.tensor != nullptr, "capture: state slot '{}' has no tensor", s.name);
  }
  const bool symbolic = HasSymbolic(specs);
  OAR_CHECK_ARG(example_inputs.empty() || example_inputs.size() == specs.size(),
                "capture: {} example inputs for {} input specs", example_inputs.size(), specs.size());
  std::vector<Tensor> inputs[2];
  for (int trace = 0; trace < (symbolic ? 2 : 1); ++trace) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!symbolic && !example_inputs.empty()) {
        const Tensor& t = example_inputs[i];
        OAR_CHECK_ARG(t.defined() && InputSpec::Of(specs[i].name, t).ToString() == specs[i].ToString(),
                      "capture: example input {} is {} but its spec is {}", i,
                      t.defined() ? InputSpec::Of(specs[i].name, t).ToString() : "undefined", specs[i].ToString());
        inputs[trace].push_back(t);
      } else {
        inputs[trace].push_back(ExampleInput(specs[i], trace, options, device));
      }
    }
  }
  std::vector<Tensor> state_before;
  for (const StateSlot& s : options.state) state_before.push_back(*s.tensor);

  Trace first = RunTrace(fn, inputs[0], options.state);
  if (symbolic) {
    for (size_t s = 0; s < options.state.size(); ++s) {
      OAR_CHECK(first.state_final[s] < 0 || options.state[s].tensor->impl() == state_before[s].impl(),
                kFailedPrecondition,
                "capture: the function replaced state '{}'; a function with symbolic input extents is traced twice "
                "and must not change its state",
                options.state[s].name);
    }
    const Trace second = RunTrace(fn, inputs[1], options.state);
    Generalise(first, second);
  }
  Captured out;
  out.program = Emit(ctx, first, specs, options.state, state_before, options, symbolic, &out.state_updates);
  out.outputs = std::move(first.results);
  return out;
}

std::vector<std::string> StateUpdates(const ir::Program& program) {
  std::vector<std::string> names;
  const ir::Attribute a = program.module()->attr(kStateAttr);
  if (!a) return names;
  for (ir::Attribute n : a.AsArray()) names.push_back(n.AsString());
  return names;
}

std::vector<InputSpec> ProgramInputs(const ir::Program& program) {
  std::vector<InputSpec> specs;
  const ir::IrContext& ctx = program.context();
  for (ir::Operation* op : program.block()) {
    if (op->name() != "builtin.data") continue;
    const size_t index = static_cast<size_t>(op->attr("index").AsInt());
    if (specs.size() <= index) specs.resize(index + 1);
    const ir::Type t = op->result(0).type();
    InputSpec& s = specs[index];
    s.name = op->attr("name").AsString();
    s.dtype = t.dtype();
    for (int64_t d : t.dims()) {
      s.dims.push_back(ir::SymDim::IsStatic(d)   ? DimSpec::Static(d)
                       : ir::SymDim::IsSymbol(d) ? DimSpec::Symbol(ctx.SymbolName(d))
                                                 : DimSpec::Dynamic());
    }
  }
  return specs;
}

std::vector<std::string> ProgramOutputNames(const ir::Program& program) {
  std::vector<std::string> names;
  for (ir::Operation* op : program.block()) {
    if (op->name() != "builtin.output") continue;
    const auto attrs = op->attr("names").AsArray();
    for (uint32_t i = 0; i < op->num_operands(); ++i) {
      names.push_back(i < attrs.size() ? attrs[i].AsString() : fmt::format("out{}", i));
    }
  }
  return names;
}

}  // namespace oar::jit
