// A cinn.group's body as a list of steps: what the runner infers shapes through, and what runs, one kernel
// per op, when the group's generated kernel did not compile.
#ifndef OAR_CORE_COMPILER_UNFUSED_H_
#define OAR_CORE_COMPILER_UNFUSED_H_

#include <vector>

#include "core/ops/schema.h"
#include "core/tensor/tensor.h"

namespace oar::compiler {

/// One op of the body: its schema (null for a builtin.constant), attributes, operand and result slots.
struct BodyStep {
  const ops::OpSchema* schema = nullptr;
  ops::AttrValues attrs;
  std::vector<int> in;
  int out = -1;
  DType dtype = DType::kInvalid;
  Dims static_shape;    // builtin.constant: its shape
  double constant = 0;  // builtin.constant: its one value
};

/// Run `steps` in order on `device`, reading and writing `values` by slot (the body's arguments filled in).
void RunSteps(const std::vector<BodyStep>& steps, std::vector<Tensor>& values, Device device);

}  // namespace oar::compiler

#endif  // OAR_CORE_COMPILER_UNFUSED_H_
