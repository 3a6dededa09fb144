// Linear algebra of the reference: matmul with NumPy semantics and linear (x wᵀ + b).
#ifndef OAR_CONFORMANCE_REFERENCE_LINALG_H_
#define OAR_CONFORMANCE_REFERENCE_LINALG_H_

#include <optional>

#include "conformance/reference/array.h"

namespace oar::reference {

/// numpy.matmul: a [..., M, K] @ b [..., K, N] -> [..., M, N] with the batch dimensions broadcast. A
/// rank-1 `a` is promoted to [1, K] and a rank-1 `b` to [K, 1], and the promoted dimension is removed
/// from the result (1-D @ 1-D is a scalar). K = 0 gives zeros. Throws on rank 0 or mismatched K.
Array matmul(const Array& a, const Array& b);

/// torch.nn.functional.linear: x [..., in], weight [out, in], bias [out] -> x weightᵀ + bias, shape
/// [..., out]. A rank-1 x gives [out].
Array linear(const Array& x, const Array& weight, const std::optional<Array>& bias = std::nullopt);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_LINALG_H_
