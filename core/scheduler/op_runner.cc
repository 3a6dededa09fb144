#include "core/scheduler/op_runner.h"

#include <map>
#include <mutex>
#include <string>

#include "core/base/error.h"
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
