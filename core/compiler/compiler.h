// CINN, the fusion compiler: the public entry points.
//
//   program (op dialect) --decompose--> primitives --cinn--> cinn.group ops (fusion groups, printable)
//   Executor / jit::Interpret compile each cinn.group once per device: group -> loop IR (lower.h) ->
//   source (codegen.h: C for cpu and the simulators, CUDA/HIP for GPUs) -> the plugin's compiler table
//   (runtime/compiler.h, cached in memory and on disk by the plugin) -> a kernel launched on the run's
//   stream. A compile error runs the group unfused (its ops one kernel each); a device without a usable
//   compiler runs the loop-IR interpreter (both logged once per device and reason, counted in CinnStats)
//   — never an abort.
//
// Controls: `cinn` in a pass pipeline; jit Predictor's Config::cinn; OAR_CINN=0|1 for the default.
#ifndef OAR_CORE_COMPILER_COMPILER_H_
#define OAR_CORE_COMPILER_COMPILER_H_

#include <cstdint>
#include <string>

#include "core/ir/builder.h"

namespace oar::compiler {

/// Registers the cinn dialect (into every IrContext made from now on, so its text parses), the `cinn`
/// pass and the runner of cinn.group ops. Idempotent and thread-safe.
void RegisterCinn();

/// OAR_CINN: "1" on, "0" or unset off; anything else is an oar::Error naming the variable.
bool CinnFromEnvironment();

struct FusionReport {
  size_t groups = 0;       ///< cinn.group ops made
  size_t fused_ops = 0;    ///< ops moved into them
  size_t elementwise = 0;  ///< groups per template
  size_t row_reduce = 0;
  size_t column_reduce = 0;
};

/// Form fusion groups in the top-level block of `program` (what the `cinn` pass does).
FusionReport FuseGroups(ir::Program& program);

struct CinnStats {
  uint64_t kernels_compiled = 0;   ///< distinct (device, source) modules built in this process
  uint64_t kernels_reused = 0;     ///< group compilations served by an already built module
  uint64_t interpreted = 0;        ///< groups that run on the loop-IR interpreter (no usable compiler)
  uint64_t unfused = 0;            ///< groups whose kernel did not compile: their ops run one kernel each
  double compile_seconds = 0;      ///< wall time spent in the plugins' compile calls
};
CinnStats Stats();

/// The loop IR and generated source of every cinn.group in `program`, for `device` (for
/// `oar ir opt --passes cinn --print-kernels` and debugging).
std::string DescribeKernels(const ir::Program& program, Device device);

}  // namespace oar::compiler

#endif  // OAR_CORE_COMPILER_COMPILER_H_
