#include "core/compiler/unfused.h"

#include "core/ops/ops.h"
#include "core/scheduler/op_runner.h"

namespace oar::compiler {

void RunSteps(const std::vector<BodyStep>& steps, std::vector<Tensor>& values, Device device) {
  for (const BodyStep& s : steps) {
    std::vector<Tensor> in;
    for (int v : s.in) in.push_back(values[static_cast<size_t>(v)]);
    Tensor out;
    if (s.schema == nullptr) {
      out = full(s.static_shape, s.constant, s.dtype, device);
    } else if (scheduler::IsTensorMethodOp(s.schema->op)) {
      out = scheduler::RunTensorMethodOp(*s.schema, in, s.attrs)[0];
    } else {
      out = ops::Run(s.schema->op, in, s.attrs, device)[0];
    }
    values[static_cast<size_t>(s.out)] = std::move(out);
  }
}

}  // namespace oar::compiler
