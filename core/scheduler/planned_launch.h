// The executor's launch path for planned instructions. A plan fixes every operand's shape (one plan per
// input-shape signature), so what eager dispatch (ops::Run) works out on every call — completed and
// normalised attributes, the results' shapes and dtypes, the kernel form of the operands (broadcast
// operands expanded, matmul's vectors as matrices), the kernel and its ABI attributes — is worked out once
// per (instruction, plan) here; a run then allocates the results and launches (runtime::PreparedKernel).
// View instructions (view, permute, slice, expand, squeeze, unsqueeze) are planned too: their result is a
// fixed (shape, strides, offset) over their operand's bytes, made without running the Tensor method.
// Results are bitwise those of ops::Run and RunTensorMethodOp: the same kernels get the same calls.
#ifndef OAR_CORE_SCHEDULER_PLANNED_LAUNCH_H_
#define OAR_CORE_SCHEDULER_PLANNED_LAUNCH_H_

#include <array>
#include <cstddef>
#include <new>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/ops/schema.h"
#include "core/runtime/prepared_launch.h"
#include "core/tensor/tensor.h"

namespace oar::scheduler {

/// At most 16 tensors on the stack of which only the first n are made (std::array<Tensor, 16> makes and
/// destroys all sixteen on every launch).
class TensorSlots {
 public:
  static constexpr size_t kCapacity = 16;
  explicit TensorSlots(size_t n) : n_(n < kCapacity ? n : kCapacity) {
    for (size_t i = 0; i < n_; ++i) new (buf_ + i * sizeof(Tensor)) Tensor();
  }
  ~TensorSlots() {
    for (size_t i = 0; i < n_; ++i) data()[i].~Tensor();
  }
  TensorSlots(const TensorSlots&) = delete;
  TensorSlots& operator=(const TensorSlots&) = delete;
  Tensor* data() { return std::launder(reinterpret_cast<Tensor*>(buf_)); }
  Tensor& operator[](size_t i) { return data()[i]; }
  std::span<const Tensor> span() { return {data(), n_}; }
  size_t size() const { return n_; }

 private:
  alignas(Tensor) std::byte buf_[kCapacity * sizeof(Tensor)];
  size_t n_;
};

/// A kernel op (ops::Run's path) planned for its operands' dtypes and shapes.
struct PlannedKernel {
  enum class Form : uint8_t { kAsIs, kExpand, kRowThenExpand, kColumnThenExpand };
  std::vector<Form> in_form;        // per operand: how it becomes the kernel's input
  std::vector<Dims> in_shape;       // per operand: the kernel input's shape
  std::vector<Dims> in_expect;      // per operand: the shape planned for (checked on every run)
  std::vector<DType> in_dtype;
  std::vector<Tensor> in_fixed;     // per operand: its kernel form made once (FixOperand), else undefined
  std::vector<ops::TensorMeta> results;  // the instruction's results
  bool result_is_view = false;      // one result, a view of a kernel output of shape kernel_out (another shape)
  Dims kernel_out;
  ops::AttrValues attrs;            // completed and normalised (what the kernel sees)
  std::unique_ptr<runtime::PreparedKernel> kernel;
};

/// Plan `s` (a kernel op: not a view, copy or composite) for `inputs` on `device`, as ops::Run would run
/// it. Throws what ops::Run throws for invalid calls.
std::unique_ptr<PlannedKernel> PlanKernel(const ops::OpSchema& s, std::span<const Tensor> inputs,
                                          const ops::AttrValues& attrs, Device device);

/// Operand `i` of `p` is `t` on every run (a parameter or constant): its kernel form (an expanded bias, a
/// matmul vector as a matrix) is made now, once, rather than on every launch.
void FixOperand(PlannedKernel& p, size_t i, const Tensor& t);

/// Whether `inputs` are what `p` was planned for (dtype and shape of every operand).
bool Matches(const PlannedKernel& p, std::span<const Tensor> inputs);

/// Run `p` on `inputs` (Matches). `allocate(k, shape, dtype)` gives output allocation k (in the order ops::Run
/// asks its output allocator). Results go to `results` (p.results.size() of them).
template <typename Allocate>
void LaunchPlanned(const PlannedKernel& p, std::span<const Tensor> inputs, Allocate&& allocate,
                   std::span<Tensor> results);

/// A view op (view, permute, slice, expand, squeeze, unsqueeze) planned for one operand layout.
struct PlannedView {
  DType dtype = DType::kInvalid;
  Dims in_shape, in_strides;   // the operand planned for
  Dims shape, strides;         // the result
  int64_t offset_delta = 0;    // result offset - operand offset
};

/// Whether `op` can be planned as a PlannedView.
bool IsPlannableView(ops::Op op);
/// The view `result` is of `operand` (RunTensorMethodOp's result for it), or null when it is not a view of
/// the operand's bytes (a reshape that copied).
std::unique_ptr<PlannedView> PlanView(const Tensor& operand, const Tensor& result);
/// The planned view of `operand`; undefined when `operand` is not laid out as planned.
Tensor ApplyView(const PlannedView& v, const Tensor& operand);

/// Plans of one plan's instructions, made on first use; safe to read and fill from concurrent runs.
class PlannedInstructions {
 public:
  explicit PlannedInstructions(size_t n);
  ~PlannedInstructions();
  PlannedInstructions(const PlannedInstructions&) = delete;
  PlannedInstructions& operator=(const PlannedInstructions&) = delete;

  struct Entry {
    std::unique_ptr<PlannedKernel> kernel;
    std::unique_ptr<PlannedView> view;
    bool refused = false;  // cannot be planned: always the general path
  };
  /// Instruction i's entry, or null before one was published.
  const Entry* Get(size_t i) const { return slots_[i].load(std::memory_order_acquire); }
  /// Publish `e` for instruction i unless another run did first; returns the published one.
  const Entry* Publish(size_t i, std::unique_ptr<Entry> e) const;
  size_t size() const { return n_; }

 private:
  size_t n_;
  std::unique_ptr<std::atomic<const Entry*>[]> slots_;
};

// ---- implementation ---------------------------------------------------------------------------------

template <typename Allocate>
void LaunchPlanned(const PlannedKernel& p, std::span<const Tensor> inputs, Allocate&& allocate,
                   std::span<Tensor> results) {
  std::span<const Tensor> kernel_in = inputs;
  bool transformed = false;
  for (PlannedKernel::Form f : p.in_form) transformed = transformed || f != PlannedKernel::Form::kAsIs;
  TensorSlots kin(transformed ? inputs.size() : 0);
  if (transformed) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (p.in_fixed[i].defined()) {
        kin[i] = p.in_fixed[i];
        continue;
      }
      switch (p.in_form[i]) {
        case PlannedKernel::Form::kAsIs: kin[i] = inputs[i]; break;
        case PlannedKernel::Form::kExpand: kin[i] = inputs[i].expand(p.in_shape[i]); break;
        case PlannedKernel::Form::kRowThenExpand: kin[i] = inputs[i].unsqueeze(0).expand(p.in_shape[i]); break;
        case PlannedKernel::Form::kColumnThenExpand: kin[i] = inputs[i].unsqueeze(-1).expand(p.in_shape[i]); break;
      }
    }
    kernel_in = kin.span();
  }
  if (p.result_is_view) {
    const Tensor store = allocate(size_t{0}, p.kernel_out, p.results[0].dtype);
    results[0] = store.view(p.results[0].shape);
    p.kernel->Launch(kernel_in, {&store, 1});
    return;
  }
  for (size_t k = 0; k < p.results.size(); ++k) results[k] = allocate(k, p.results[k].shape, p.results[k].dtype);
  p.kernel->Launch(kernel_in, std::span<const Tensor>(results.data(), p.results.size()));
}

}  // namespace oar::scheduler

#endif  // OAR_CORE_SCHEDULER_PLANNED_LAUNCH_H_
