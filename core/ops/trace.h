// The op layer's half of program capture: a tracer sees every op the eager dispatch runs on this thread
// (after it ran, with its completed and normalised attributes), every view, in-place copy, device transfer
// and host read. core/jit builds programs from these events; nothing here knows about the IR.
//
// Ops built from other ops (clone, slice_scatter) report themselves once and suspend the tracer for their
// insides, so a program holds what the user called, not how it is implemented.
#ifndef OAR_CORE_OPS_TRACE_H_
#define OAR_CORE_OPS_TRACE_H_

#include <span>
#include <string_view>

#include "core/ops/schema.h"
#include "core/tensor/trace.h"

namespace oar::ops {

class Tracer : public TensorTracer {
 public:
  /// `op` ran on `inputs` with `attrs` (schema order, defaults filled, axes normalised) giving `outputs`.
  virtual void OnOp(Op op, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                    const AttrValues& attrs) = 0;
  /// dst.copy_(src): dst now holds src's values (broadcast to dst's shape).
  virtual void OnCopy(const Tensor& dst, const Tensor& src) = 0;
  /// `moved` is `src` copied to another device (Tensor::to).
  virtual void OnTransfer(const Tensor& src, const Tensor& moved) = 0;
  /// The host is about to read `t`'s values (`what`: "ToVector", "item", ...).
  virtual void OnHostRead(const Tensor& t, std::string_view what) = 0;
};

/// The tracer active on this thread, or null.
inline Tracer* ActiveTracer() { return static_cast<Tracer*>(ActiveTensorTracer()); }

/// Makes `tracer` the active one on this thread for its lifetime.
class ScopedTracer {
 public:
  explicit ScopedTracer(Tracer& tracer) : previous_(SetActiveTensorTracer(&tracer)) {}
  ~ScopedTracer() { SetActiveTensorTracer(previous_); }
  ScopedTracer(const ScopedTracer&) = delete;
  ScopedTracer& operator=(const ScopedTracer&) = delete;

 private:
  TensorTracer* previous_;
};

/// No tracer on this thread for its lifetime (the inside of an op that reported itself).
class TraceSuspend {
 public:
  TraceSuspend() : previous_(SetActiveTensorTracer(nullptr)) {}
  ~TraceSuspend() { SetActiveTensorTracer(previous_); }
  TraceSuspend(const TraceSuspend&) = delete;
  TraceSuspend& operator=(const TraceSuspend&) = delete;

 private:
  TensorTracer* previous_;
};

/// The schema op and attributes of a metadata view (what autograd records and programs hold).
struct ViewCall {
  Op op;
  AttrValues attrs;
};
ViewCall ViewCallOf(const Tensor& view, ViewOp op, std::span<const int64_t> args);

}  // namespace oar::ops

#endif  // OAR_CORE_OPS_TRACE_H_
