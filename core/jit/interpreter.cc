#include "core/jit/interpreter.h"

#include <map>
#include <unordered_map>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/ops/ops.h"
#include "core/scheduler/op_runner.h"

namespace oar::jit {
namespace {

using ValueMap = std::unordered_map<const void*, Tensor>;

class Interpreter {
 public:
  Interpreter(const ir::Program& program, std::span<const Tensor> inputs, Device device)
      : program_(program), inputs_(inputs), device_(device) {}

  std::vector<Tensor> Run() {
    std::vector<Tensor> outputs;
    RunBlock(program_.block(), &outputs);
    return outputs;
  }

 private:
  const Tensor& Get(ir::Value v) const { return values_.at(v.impl()); }
  void Set(ir::Value v, Tensor t) { values_[v.impl()] = std::move(t); }

  // Runs `block`; its terminator's operands (cf.yield / cf.condition / builtin.output) go to `yielded`.
  void RunBlock(const ir::Block& block, std::vector<Tensor>* yielded) {
    for (ir::Operation* op : block) {
      try {
        RunOp(*op, yielded);
      } catch (const Error& e) {
        if (std::string_view(e.what()).starts_with("interpreter: ")) throw;
        Throw(e.code(), "interpreter: {}: {}", ir::DescribeOp(*op), e.what());
      }
    }
  }

  void RunOp(const ir::Operation& op, std::vector<Tensor>* yielded) {
    const std::string_view name = op.name();
    if (name == "builtin.data") return Set(op.result(0), Input(op));
    if (name == "builtin.parameter") return Set(op.result(0), scheduler::ParameterValue(program_, op, device_, ""));
    if (name == "builtin.constant") return Set(op.result(0), scheduler::ConstantValue(op, device_));
    if (name == "builtin.output" || name == "cf.yield" || name == "cf.condition") {
      yielded->clear();
      for (uint32_t i = 0; i < op.num_operands(); ++i) yielded->push_back(Get(op.operand(i)));
      return;
    }
    if (name == "cf.if") return If(op);
    if (name == "cf.while") return While(op);
    if (name == "kernel.transfer") return Set(op.result(0), Get(op.operand(0)).to(Device(op.attr("to").AsString())));
    if (name == "kernel.format_cast") return Set(op.result(0), Get(op.operand(0)));  // formats are the runtime's
    if (scheduler::OpCompiler compile = scheduler::FindOpCompiler(name)) return RunCompiled(op, compile);
    const ops::OpSchema* s = op.info().schema;
    OAR_CHECK(s != nullptr, kUnimplemented, "no interpretation for {}", name);
    const Device device = op.info().dialect->name() == "kernel" ? Device(op.attr("device").AsString()) : device_;
    std::vector<Tensor> in;
    for (uint32_t i = 0; i < op.num_operands(); ++i) in.push_back(Get(op.operand(i)));
    const ops::AttrValues attrs = ir::SchemaAttrValues(*s, op.attributes());
    std::vector<Tensor> out = RunSchemaOp(*s, in, attrs, device);
    OAR_CHECK(out.size() == op.num_results(), kInternal, "{} gave {} results for {}", name, out.size(), op.num_results());
    for (uint32_t i = 0; i < op.num_results(); ++i) Set(op.result(i), std::move(out[i]));
  }

  static std::vector<Tensor> RunSchemaOp(const ops::OpSchema& s, const std::vector<Tensor>& in,
                                         const ops::AttrValues& a, Device device) {
    if (scheduler::IsTensorMethodOp(s.op)) return scheduler::RunTensorMethodOp(s, in, a);
    std::vector<Tensor> on_device;
    for (const Tensor& t : in) on_device.push_back(t.device() == device ? t : t.to(device));
    return ops::Run(s.op, on_device, a, device);
  }

  // An op a layer above compiles (cinn.group): compiled for this run's device, then run on its operands.
  void RunCompiled(const ir::Operation& op, scheduler::OpCompiler compile) {
    std::shared_ptr<const scheduler::CompiledOp> compiled = compile(op, device_);
    std::vector<Tensor> in;
    for (uint32_t i = 0; i < op.num_operands(); ++i) {
      const Tensor& t = Get(op.operand(i));
      in.push_back(t.device() == device_ ? t : t.to(device_));
    }
    std::vector<Tensor> out = compiled->Run(in);
    OAR_CHECK(out.size() == op.num_results(), kInternal, "{} gave {} results for {}", op.name(), out.size(),
              op.num_results());
    for (uint32_t i = 0; i < op.num_results(); ++i) Set(op.result(i), std::move(out[i]));
  }

  Tensor Input(const ir::Operation& op) {
    const int64_t index = op.attr("index").AsInt();
    const std::string& name = op.attr("name").AsString();
    OAR_CHECK_ARG(index >= 0 && static_cast<size_t>(index) < inputs_.size(),
                  "the program's input '{}' is input {} but {} inputs were given", name, index, inputs_.size());
    const Tensor& t = inputs_[static_cast<size_t>(index)];
    const ir::Type want = op.result(0).type();
    const ir::IrContext& ctx = program_.context();
    OAR_CHECK_ARG(t.defined() && t.dtype() == want.dtype() && t.rank() == want.rank(),
                  "input {} ('{}') must be {}, got {}{}", index, name, ir::PrintType(ctx, want),
                  t.defined() ? DTypeName(t.dtype()) : "undefined", t.defined() ? t.shape().ToString() : "");
    for (int d = 0; d < want.rank(); ++d) {
      const int64_t e = want.dims()[d];
      if (ir::SymDim::IsStatic(e)) {
        OAR_CHECK_ARG(t.dim(d) == e, "input {} ('{}') must be {}, got shape {}", index, name, ir::PrintType(ctx, want),
                      t.shape().ToString());
      } else if (ir::SymDim::IsSymbol(e)) {
        auto [it, fresh] = symbols_.emplace(e, t.dim(d));
        OAR_CHECK_ARG(fresh || it->second == t.dim(d),
                      "input {} ('{}') has extent {} for symbol {} in dimension {}, but an earlier input bound {} = {}",
                      index, name, t.dim(d), ctx.SymbolName(e), d, ctx.SymbolName(e), it->second);
      }
    }
    return t.device() == device_ ? t : t.to(device_);
  }

  bool Truth(const Tensor& t) { return cast(t, DType::kFloat64).reshape(Dims{}).item<double>() != 0; }

  void If(const ir::Operation& op) {
    std::vector<Tensor> out;
    RunBlock(op.region(Truth(Get(op.operand(0))) ? 0 : 1).front(), &out);
    for (uint32_t i = 0; i < op.num_results(); ++i) Set(op.result(i), out[i]);
  }

  void While(const ir::Operation& op) {
    std::vector<Tensor> carried;
    for (uint32_t i = 0; i < op.num_operands(); ++i) carried.push_back(Get(op.operand(i)));
    const ir::Block& cond = op.region(0).front();
    const ir::Block& body = op.region(1).front();
    for (;;) {
      for (size_t i = 0; i < carried.size(); ++i) Set(cond.argument(i), carried[i]);
      std::vector<Tensor> c;
      RunBlock(cond, &c);
      carried.assign(c.begin() + 1, c.end());
      if (!Truth(c[0])) break;
      for (size_t i = 0; i < carried.size(); ++i) Set(body.argument(i), carried[i]);
      RunBlock(body, &carried);
    }
    for (uint32_t i = 0; i < op.num_results(); ++i) Set(op.result(i), carried[i]);
  }

  const ir::Program& program_;
  std::span<const Tensor> inputs_;
  Device device_;
  ValueMap values_;
  std::map<int64_t, int64_t> symbols_;
};

}  // namespace

std::vector<Tensor> Interpret(const ir::Program& program, std::span<const Tensor> inputs, Device device) {
  ir::Verify(program);
  return Interpreter(program, inputs, device).Run();
}

}  // namespace oar::jit
