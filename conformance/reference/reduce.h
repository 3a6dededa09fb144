// Reductions of the reference, at user level: `axes` may be negative, an empty list reduces every
// axis, duplicates are an error, and `keepdim` keeps reduced dimensions as extent 1 (else they are
// dropped). A rank-0 input accepts only the empty axis list. Sums are compensated (Neumaier), so a
// result is accurate to about one double rounding whatever the number of terms.
#ifndef OAR_CONFORMANCE_REFERENCE_REDUCE_H_
#define OAR_CONFORMANCE_REFERENCE_REDUCE_H_

#include <cstdint>
#include <vector>

#include "conformance/reference/array.h"

namespace oar::reference {

/// Sum; an empty reduction gives 0.
Array sum(const Array& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
/// Sum / count; an empty reduction gives NaN.
Array mean(const Array& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
/// Product; an empty reduction gives 1.
Array prod(const Array& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
/// Maximum (amax); NaN propagates. An empty reduction throws INVALID_ARGUMENT (no identity).
Array max(const Array& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
/// Minimum (amin); NaN propagates. An empty reduction throws.
Array min(const Array& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
/// Index of the maximum along one axis: first index on ties; a NaN counts as the maximum at its first
/// position. Throws on an empty axis.
Array argmax(const Array& x, int64_t axis, bool keepdim = false);
/// Index of the minimum along one axis: first index on ties; a NaN counts as the minimum.
Array argmin(const Array& x, int64_t axis, bool keepdim = false);
/// sum((x - mean)^2) / max(0, N - correction) with N the reduced count (correction 1: unbiased,
/// 0: population). N - correction <= 0 divides by 0 (NaN or inf), as torch.var does.
Array var(const Array& x, const std::vector<int64_t>& axes = {}, double correction = 1.0, bool keepdim = false);
/// sqrt(var). Named `stddev` rather than `std`: a function named `std` would shadow the namespace in
/// every reader's head if not in the compiler's.
Array stddev(const Array& x, const std::vector<int64_t>& axes = {}, double correction = 1.0, bool keepdim = false);
/// log(sum(exp(x))), evaluated as m + log(sum(exp(x - m))) with m the maximum; all -inf (or an empty
/// reduction) gives -inf, any +inf gives +inf, NaN propagates.
Array logsumexp(const Array& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_REDUCE_H_
