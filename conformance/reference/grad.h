// Gradients (vector-Jacobian products) of the elementwise, reduction and linear-algebra ops, and the
// finite-difference helpers that check them. The VJPs of conv/pooling, nn and gather-like ops live
// beside their forward ops (conv.h, nn.h, shape.h) because they share the forward's index loops.
//
// Convention (all VJPs, here and beside their forward ops): `op_grad` takes the forward's required
// Array inputs, then the upstream gradient `grad_y` (of the forward's output shape), then the forward's
// remaining arguments in the forward's order with the same defaults; an input that does not affect the
// gradients (a bias) is left out. It returns the gradient of each differentiable input, of that input's
// shape (a struct when there are several). Broadcast operands receive the broadcast gradient summed
// back to their own shape.
//
// At a point where an op is not differentiable the returned value is the conventional subgradient of
// torch: relu'(0) = 0, abs'(0) = 0, clip passes the gradient for lo <= x <= hi, maximum/minimum split it
// equally on ties, max/min (amax/amin) split it equally among all tied maxima.
#ifndef OAR_CONFORMANCE_REFERENCE_GRAD_H_
#define OAR_CONFORMANCE_REFERENCE_GRAD_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "conformance/reference/array.h"

namespace oar::reference {

// ---------------------------------------------------------------------------------------------------
// Unary elementwise: dx = grad_y · f'(x)
// ---------------------------------------------------------------------------------------------------

Array neg_grad(const Array& x, const Array& grad_y);
Array abs_grad(const Array& x, const Array& grad_y);
/// Zero everywhere (sign is piecewise constant).
Array sign_grad(const Array& x, const Array& grad_y);
Array exp_grad(const Array& x, const Array& grad_y);
Array log_grad(const Array& x, const Array& grad_y);
Array log1p_grad(const Array& x, const Array& grad_y);
Array sqrt_grad(const Array& x, const Array& grad_y);
Array rsqrt_grad(const Array& x, const Array& grad_y);
Array square_grad(const Array& x, const Array& grad_y);
Array reciprocal_grad(const Array& x, const Array& grad_y);
Array sin_grad(const Array& x, const Array& grad_y);
Array cos_grad(const Array& x, const Array& grad_y);
Array tanh_grad(const Array& x, const Array& grad_y);
Array sigmoid_grad(const Array& x, const Array& grad_y);
Array relu_grad(const Array& x, const Array& grad_y);
Array leaky_relu_grad(const Array& x, const Array& grad_y, double slope = 0.01);
Array gelu_grad(const Array& x, const Array& grad_y, bool approximate_tanh = false);
Array silu_grad(const Array& x, const Array& grad_y);
Array erf_grad(const Array& x, const Array& grad_y);
Array clip_grad(const Array& x, const Array& grad_y, double lo, double hi);

// ---------------------------------------------------------------------------------------------------
// Binary elementwise (broadcasting)
// ---------------------------------------------------------------------------------------------------

struct BinaryGrads {
  Array da;
  Array db;
};
BinaryGrads add_grad(const Array& a, const Array& b, const Array& grad_y);
BinaryGrads sub_grad(const Array& a, const Array& b, const Array& grad_y);
BinaryGrads mul_grad(const Array& a, const Array& b, const Array& grad_y);
BinaryGrads div_grad(const Array& a, const Array& b, const Array& grad_y);
/// da = g·b·a^(b-1) (0 where b == 0); db = g·a^b·log(a) (0 where a == 0 and b >= 0), as torch.
BinaryGrads pow_grad(const Array& a, const Array& b, const Array& grad_y);
/// torch's rule: g/2 to each on a tie, else all of g to the larger (a NaN operand gives both g).
BinaryGrads maximum_grad(const Array& a, const Array& b, const Array& grad_y);
BinaryGrads minimum_grad(const Array& a, const Array& b, const Array& grad_y);
/// Gradients of a and b (cond is not differentiable).
BinaryGrads where_grad(const Array& cond, const Array& a, const Array& b, const Array& grad_y);

// ---------------------------------------------------------------------------------------------------
// Reductions: grad_y has the forward's output shape (keepdim or not, as given).
// ---------------------------------------------------------------------------------------------------

Array sum_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Array mean_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes = {}, bool keepdim = false);
/// The product of the other elements (exact with zeros: no division).
Array prod_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes = {}, bool keepdim = false);
/// amax semantics: grad_y is split equally among the elements equal to the maximum.
Array max_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Array min_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Array var_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes = {}, double correction = 1.0,
               bool keepdim = false);
/// 0 where the std is 0 (docs/ops.md, as torch: a constant row does not turn into NaN); NaN stays NaN.
Array stddev_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes = {}, double correction = 1.0,
                  bool keepdim = false);
Array logsumexp_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes = {}, bool keepdim = false);

// ---------------------------------------------------------------------------------------------------
// Linear algebra
// ---------------------------------------------------------------------------------------------------

/// matmul's gradients with 1-D promotion and batch broadcasting undone.
BinaryGrads matmul_grad(const Array& a, const Array& b, const Array& grad_y);
/// dbias (sum of grad_y over every row) is returned whether or not the forward had a bias.
struct LinearGrads {
  Array dx;
  Array dweight;
  Array dbias;
};
LinearGrads linear_grad(const Array& x, const Array& weight, const Array& grad_y);

// ---------------------------------------------------------------------------------------------------
// Finite differences
// ---------------------------------------------------------------------------------------------------

/// Central differences of a scalar function: out[i] = (f(x + eps·e_i) - f(x - eps·e_i)) / (2·eps).
/// Truncation error is O(eps^2 · f'''), rounding error O(ulp(f) / eps): eps = 1e-6 suits smooth
/// functions of O(1) inputs in double. Keep inputs away from kinks (relu at 0, ties of max, pooling).
Array NumericalGrad(const std::function<double(const Array&)>& f, const Array& x, double eps = 1e-6);
/// The VJP of an array function by central differences: NumericalGrad of x -> sum(grad_y · f(x)).
Array NumericalVjp(const std::function<Array(const Array&)>& f, const Array& x, const Array& grad_y, double eps = 1e-6);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_GRAD_H_
