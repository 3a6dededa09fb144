// Elementwise ops of the reference: unary maps, NumPy-broadcast binary ops, comparisons, where.
//
// Every function computes in double from the exact input values and returns an unrounded double
// result; RoundTo (dtype.h) gives what a given dtype can hold. Binary ops broadcast their operands per
// NumPy (right-aligned; each extent equal or 1) and throw INVALID_ARGUMENT on incompatible shapes.
// Booleans are 0/1 doubles; logical ops treat any nonzero (NaN too) as true.
#ifndef OAR_CONFORMANCE_REFERENCE_ELEMENTWISE_H_
#define OAR_CONFORMANCE_REFERENCE_ELEMENTWISE_H_

#include "conformance/reference/array.h"

namespace oar::reference {

// ---------------------------------------------------------------------------------------------------
// Unary
// ---------------------------------------------------------------------------------------------------

Array neg(const Array& x);
Array abs(const Array& x);
/// -1, 0 or 1 (0 for ±0); NaN -> NaN.
Array sign(const Array& x);
Array exp(const Array& x);
/// log(0) = -inf, log(<0) = NaN.
Array log(const Array& x);
Array log1p(const Array& x);
Array expm1(const Array& x);
/// sqrt(<0) = NaN.
Array sqrt(const Array& x);
/// 1 / sqrt(x); rsqrt(0) = inf.
Array rsqrt(const Array& x);
Array square(const Array& x);
/// 1 / x (IEEE: ±inf at ±0).
Array reciprocal(const Array& x);
Array sin(const Array& x);
Array cos(const Array& x);
Array tanh(const Array& x);
/// 1 / (1 + e^-x), evaluated so that it never overflows (e^x / (1 + e^x) for x < 0).
Array sigmoid(const Array& x);
/// x < 0 ? 0 : x — so relu(NaN) = NaN and relu(-0) = -0.
Array relu(const Array& x);
/// x < 0 ? slope * x : x.
Array leaky_relu(const Array& x, double slope = 0.01);
/// x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); with `approximate_tanh`,
/// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
Array gelu(const Array& x, bool approximate_tanh = false);
/// x * sigmoid(x).
Array silu(const Array& x);
Array erf(const Array& x);
/// min(max(x, lo), hi), NaN propagating; with lo > hi every element is hi (as torch.clamp and
/// numpy.clip). Use ±inf for a missing bound. Throws on a NaN bound.
Array clip(const Array& x, double lo, double hi);
/// 1 where x is NaN, else 0.
Array isnan(const Array& x);
/// 1 where x is ±inf, else 0.
Array isinf(const Array& x);
/// 1 where x == 0, else 0.
Array logical_not(const Array& x);

// ---------------------------------------------------------------------------------------------------
// Binary (broadcasting)
// ---------------------------------------------------------------------------------------------------

Array add(const Array& a, const Array& b);
Array sub(const Array& a, const Array& b);
Array mul(const Array& a, const Array& b);
/// IEEE division (x / 0 = ±inf, 0 / 0 = NaN).
Array div(const Array& a, const Array& b);
/// std::pow semantics (pow(x, 0) = 1 even for NaN x; pow(<0, non-integer) = NaN).
Array pow(const Array& a, const Array& b);
/// NaN when either operand is NaN (numpy.maximum / torch.maximum).
Array maximum(const Array& a, const Array& b);
/// NaN when either operand is NaN.
Array minimum(const Array& a, const Array& b);

/// Comparisons return 0/1. NaN compares unequal to everything: eq -> 0, ne -> 1, the orderings -> 0.
Array eq(const Array& a, const Array& b);
Array ne(const Array& a, const Array& b);
Array lt(const Array& a, const Array& b);
Array le(const Array& a, const Array& b);
Array gt(const Array& a, const Array& b);
Array ge(const Array& a, const Array& b);
Array logical_and(const Array& a, const Array& b);
Array logical_or(const Array& a, const Array& b);

/// cond != 0 ? a : b, the three broadcast to a common shape.
Array where(const Array& cond, const Array& a, const Array& b);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_ELEMENTWISE_H_
