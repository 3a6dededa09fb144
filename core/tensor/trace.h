// The tensor layer's half of program capture (core/jit): while a tracer is active on a thread, every
// metadata view made there is reported to it, whether or not autograd records it. The op layer extends the
// tracer with ops, in-place copies, transfers and host reads (core/ops/trace.h); only such tracers are
// ever installed.
#ifndef OAR_CORE_TENSOR_TRACE_H_
#define OAR_CORE_TENSOR_TRACE_H_

#include <span>

#include "core/tensor/autograd_meta.h"

namespace oar {

class TensorTracer {
 public:
  virtual ~TensorTracer() = default;
  /// `view` was made from `base` (args as for ViewRecorder).
  virtual void OnView(const Tensor& base, const Tensor& view, ViewOp op, std::span<const int64_t> args) = 0;
  /// `alias` is `src` under another handle with the same values (detach).
  virtual void OnAlias(const Tensor& src, const Tensor& alias) = 0;
};

/// The tracer active on this thread, or null (the common case: one thread-local load per view).
TensorTracer* ActiveTensorTracer();
/// Install `tracer` (null: none) on this thread; returns the previous one.
TensorTracer* SetActiveTensorTracer(TensorTracer* tracer);

}  // namespace oar

#endif  // OAR_CORE_TENSOR_TRACE_H_
