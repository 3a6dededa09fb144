#include "core/scheduler/op_runner.h"

#include <map>
#include <mutex>
#include <string>

#include "core/base/error.h"
#include "core/ir/text.h"
#include "core/ops/ops.h"

namespace oar::scheduler {

bool IsTensorMethodOp(ops::Op op) {
  switch (op) {
    case ops::Op::kView: case ops::Op::kPermute: case ops::Op::kSlice: case ops::Op::kExpand:
    case ops::Op::kSqueeze: case ops::Op::kUnsqueeze: case ops::Op::kClone: case ops::Op::kCopy:
    case ops::Op::kSliceScatter:
      return true;
    default:
      return false;
  }
}

std::vector<Tensor> RunTensorMethodOp(const ops::OpSchema& s, std::span<const Tensor> in, const ops::AttrValues& a) {
  auto ints = [&](const char* n) { return std::get<std::vector<int64_t>>(a[s.AttrIndex(n)]); };
  auto integer = [&](const char* n) { return std::get<int64_t>(a[s.AttrIndex(n)]); };
  switch (s.op) {
    case ops::Op::kView: return {in[0].reshape(Dims(ints("shape")))};
    case ops::Op::kPermute: return {in[0].permute(ints("dims"))};
    case ops::Op::kSlice: return {in[0].slice(integer("dim"), integer("start"), integer("end"), integer("step"))};
    case ops::Op::kExpand: return {in[0].expand(Dims(ints("shape")))};
    case ops::Op::kSqueeze: return {in[0].squeeze(integer("dim"))};
    case ops::Op::kUnsqueeze: return {in[0].unsqueeze(integer("dim"))};
    case ops::Op::kClone:
    case ops::Op::kCopy: return {in[0].clone()};
    case ops::Op::kSliceScatter:
      return {SliceScatter(in[0], Dims(ints("shape")), integer("dim"), integer("start"), integer("end"),
                           integer("step"))};
    default: Throw(ErrorCode::kInternal, "{} is not run as a Tensor method", s.name);
  }
}

Tensor ParameterValue(const ir::Program& program, const ir::Operation& op, Device device, std::string_view who) {
  const std::string& name = op.attr("name").AsString();
  auto it = program.parameters.find(name);
  OAR_CHECK_ARG(it != program.parameters.end(), "{}parameter '{}' has no value in the program", who, name);
  const ir::Type want = op.result(0).type();
  OAR_CHECK_ARG(it->second.dtype() == want.dtype() && Dims(want.dims()) == it->second.shape(),
                "{}parameter '{}' is {}{} but the program declares {}", who, name, DTypeName(it->second.dtype()),
                it->second.shape().ToString(), ir::PrintType(program.context(), want));
  return it->second.device() == device ? it->second : it->second.to(device);
}

Tensor ConstantValue(const ir::Operation& op, Device device) {
  const ir::Type t = op.result(0).type();
  std::vector<double> values;
  for (ir::Attribute a : op.attr("value").AsArray()) {
    values.push_back(a.kind() == ir::AttrKind::kFloat ? a.AsFloat()
                     : a.kind() == ir::AttrKind::kInt ? static_cast<double>(a.AsInt())
                                                      : (a.AsBool() ? 1.0 : 0.0));
  }
  const Dims shape = t.kind() == ir::TypeKind::kTensor ? t.dims() : Dims{};
  Tensor flat = FromVector<double>(values, Dims{static_cast<int64_t>(values.size())}, device);
  Tensor typed = cast(flat, t.dtype());
  return values.size() == 1 ? typed.reshape(Dims{}).expand(shape).contiguous() : typed.reshape(shape);
}

namespace {
struct Registry {
  std::mutex mutex;
  std::map<std::string, OpCompiler, std::less<>> compilers;
};
Registry& GetRegistry() {
  static Registry* r = new Registry;  // never destroyed: compilers may be looked up during exit
  return *r;
}
}  // namespace

void RegisterOpCompiler(std::string_view op_name, OpCompiler compiler) {
  Registry& r = GetRegistry();
  std::lock_guard lock(r.mutex);
  r.compilers[std::string(op_name)] = compiler;
}

OpCompiler FindOpCompiler(std::string_view op_name) {
  Registry& r = GetRegistry();
  std::lock_guard lock(r.mutex);
  auto it = r.compilers.find(op_name);
  return it == r.compilers.end() ? nullptr : it->second;
}

}  // namespace oar::scheduler
