// The shape checks and dimension split shared by the keepdim reduction kernels (sum, mean, max, min,
// prod): which input dimensions are kept (one output element each, in output order) and which are
// reduced, each group collapsed on its own.
#ifndef OAR_PLUGINS_COMMON_REDUCTION_H_
#define OAR_PLUGINS_COMMON_REDUCTION_H_

#include <span>
#include <string>

#include "plugins/common/kernel_util.h"
#include "plugins/common/strided.h"

namespace oar::host {

struct ReductionPlan {
  StridedLayout<1> kept;     ///< the kept dimensions of the input, byte strides
  StridedLayout<1> reduced;  ///< the reduced dimensions of the input, byte strides
  int64_t outputs = 0;       ///< elements of the output
  int64_t count = 1;         ///< input elements per output (0 for an empty reduction)
};

/// Split the dimensions of a tensor (extents `shape`, strides `strides` in elements) into those reduced over
/// `axes` (sorted, unique, within [0, rank): the caller checks) and the kept ones, each group collapsed on its
/// own. `elem_size` is the element size.
inline ReductionPlan SplitReduction(std::span<const int64_t> shape, std::span<const int64_t> strides,
                                    std::span<const int64_t> axes, int64_t elem_size) {
  const int rank = static_cast<int>(shape.size());
  bool reduced[OAR_MAX_RANK] = {};
  for (int64_t a : axes) reduced[a] = true;
  int64_t kept_shape[OAR_MAX_RANK], kept_strides[OAR_MAX_RANK];
  int64_t red_shape[OAR_MAX_RANK], red_strides[OAR_MAX_RANK];
  int kept_rank = 0, red_rank = 0;
  ReductionPlan plan;
  plan.outputs = 1;
  for (int d = 0; d < rank; ++d) {
    if (reduced[d]) {
      red_shape[red_rank] = shape[d];
      red_strides[red_rank++] = strides[d];
      plan.count *= shape[d];
    } else {
      kept_shape[kept_rank] = shape[d];
      kept_strides[kept_rank++] = strides[d];
      plan.outputs *= shape[d];
    }
  }
  plan.kept = Collapse<1>({kept_shape, static_cast<size_t>(kept_rank)},
                          {std::span<const int64_t>(kept_strides, kept_rank)}, {elem_size});
  plan.reduced = Collapse<1>({red_shape, static_cast<size_t>(red_rank)},
                             {std::span<const int64_t>(red_strides, red_rank)}, {elem_size});
  return plan;
}
/// The sum kernel's result for one output whose n >= 1 reduced elements lie contiguous at p (float32, float64):
/// what `sum` over the last axis of a contiguous tensor writes for each row when it sums one output at a time.
template <typename T>
T SumKernelRow(const T* p, int64_t n);
/// Whether the sum kernel sums each of `outputs` outputs of `count` elements whole on one thread (then
/// SumKernelRow gives its results), rather than splitting the reduced elements over threads.
bool SumKernelByOutputs(int64_t outputs, int64_t count);
/// `sum` over the last axis of the contiguous tensor x of `shape` (rank >= 1) into out (one element per row), as
/// the kernel computes it (the same threads and order).
template <typename T>
void SumKernelLastAxis(std::span<const int64_t> shape, const T* x, T* out);

/// Check `axes` (sorted, unique, within [0, rank)) and that `out` is x's keepdim shape, then split x's
/// dimensions. `elem_size` is x's element size.
inline ReductionPlan PlanReduction(const KernelCall& call, const TensorRef& x, const TensorRef& out,
                                   std::span<const int64_t> axes, int64_t elem_size) {
  const int rank = x.rank();
  if (out.rank() != rank) {
    Invalid(call, "the output must keep the input's rank " + std::to_string(rank) + " (reduced dims as 1)");
  }
  bool reduced[OAR_MAX_RANK] = {};
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= rank || (i > 0 && axes[i] <= axes[i - 1])) {
      Invalid(call, "attribute 'axes' must be sorted, unique and within [0, " + std::to_string(rank) + "); entry " +
                        std::to_string(i) + " is " + std::to_string(axes[i]));
    }
    reduced[axes[i]] = true;
  }
  for (int d = 0; d < rank; ++d) {
    if (out.dim(d) != (reduced[d] ? 1 : x.dim(d))) {
      Invalid(call, "output dimension " + std::to_string(d) + " must be " + std::to_string(reduced[d] ? 1 : x.dim(d)));
    }
  }
  ReductionPlan plan = SplitReduction(x.shape(), x.strides(), axes, elem_size);
  plan.outputs = out.numel();
  return plan;
}

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_REDUCTION_H_
