// oar::reference — Oar's independent numerical reference: every op, naive, in double precision.
//
// This is the oracle the conformance suite and the unit tests compare every device's kernels against.
// It is written for obviousness, not speed, and shares no code with the kernels (plugins/, core/ops):
// each op is derived from its user-level semantics (NumPy/PyTorch-like, see docs/ops.md and
// docs/ops-library-plan.md) — broadcasting, negative axes, keepdim, 1-D matmul promotion, optional
// bias — so a bug in the fast path cannot hide in a shared helper.
//
// Model
//   * Array: shape + row-major doubles (array.h). Every dtype is carried as double: bool as 0/1,
//     integers by value (exact below 2^53), floats by their exact value.
//   * Ops compute in double from the exact inputs and return unrounded results. To compare a kernel of
//     dtype T: build the inputs as T values (RoundTo / cast), run the reference, and compare with the
//     tolerance of the op's class and T (compare.h, tolerances.json) — or RoundTo(ref, T) for ops that
//     are exact in T (integer arithmetic wraps: RoundTo(add(a, b), RefDType::I8)).
//   * Every sum (reductions, dot products, convolutions, statistics) uses a compensated accumulator, so
//     results are accurate to about one double rounding: the reference stays more accurate than a
//     float64 kernel, not merely as accurate.
//   * Misuse (bad shape, axis, argument) throws oar::Error: INVALID_ARGUMENT, or OUT_OF_RANGE for an
//     index outside its dimension. Nothing aborts.
//   * Gradients: `op_grad(required inputs…, grad_y, other arguments…)` (see grad.h), checked against
//     central finite differences (NumericalVjp) in the self-tests.
//   * Functions are pure and thread-safe (no shared state).
//
// Headers
//   array.h        Array, ShapeString
//   dtype.h        RefDType, RoundTo, float32/float16/bfloat16 rounding and bit patterns, cast
//   elementwise.h  unary and broadcasting binary ops, comparisons, where
//   reduce.h       sum mean prod max min argmax argmin var stddev logsumexp
//   linalg.h       matmul linear
//   conv.h         conv2d max_pool2d avg_pool2d adaptive_avg_pool2d (+ gradients)
//   nn.h           softmax log_softmax layer_norm(_stats) rms_norm batch_norm(_train) cross_entropy
//                  nll_loss mse_loss embedding rotary_embedding scaled_dot_product_attention
//                  (+ gradients, batch_norm_train and rotary_embedding included)
//   shape.h        reshape permute transpose squeeze unsqueeze flatten expand concat stack split chunk
//                  slice gather index_select scatter_add one_hot pad tril triu topk arange full
//                  (+ gather/index_select gradients)
//   grad.h         gradients of elementwise, reduction and linalg ops; NumericalGrad, NumericalVjp
//   compare.h      Compare, Tolerance, LoadTolerance
#ifndef OAR_CONFORMANCE_REFERENCE_REFERENCE_H_
#define OAR_CONFORMANCE_REFERENCE_REFERENCE_H_

#include "conformance/reference/array.h"
#include "conformance/reference/compare.h"
#include "conformance/reference/conv.h"
#include "conformance/reference/dtype.h"
#include "conformance/reference/elementwise.h"
#include "conformance/reference/grad.h"
#include "conformance/reference/linalg.h"
#include "conformance/reference/nn.h"
#include "conformance/reference/reduce.h"
#include "conformance/reference/shape.h"

#endif  // OAR_CONFORMANCE_REFERENCE_REFERENCE_H_
