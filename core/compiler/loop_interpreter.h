// The loop-IR interpreter: runs a Kernel on host buffers, one task and one iteration at a time, each
// operation rounded to its type (float32 arithmetic in float32). It shares nothing with the code
// generators, so it is the oracle every generated kernel is tested against, and the fallback where a
// device has no usable compiler. Every load and store is bounds-checked (kInternal naming the buffer).
#ifndef OAR_CORE_COMPILER_LOOP_INTERPRETER_H_
#define OAR_CORE_COMPILER_LOOP_INTERPRETER_H_

#include <cstdint>
#include <span>

#include "core/compiler/loop_ir.h"

namespace oar::compiler {

struct HostBuffer {
  void* data = nullptr;
  int64_t numel = 0;  ///< elements of the buffer's dtype (Kernel::buffers)
};

/// Run every task of `k` with `buffers` (Kernel::buffers order) and `params` (Kernel::int_params order).
void InterpretKernel(const Kernel& k, std::span<const HostBuffer> buffers, std::span<const int64_t> params);

/// An int64 expression over the kernel's parameters (Kernel::num_tasks).
int64_t EvaluateIndex(const Kernel& k, const Expr& e, std::span<const int64_t> params);

}  // namespace oar::compiler

#endif  // OAR_CORE_COMPILER_LOOP_INTERPRETER_H_
