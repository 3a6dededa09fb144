// Shape, indexing and creation ops of the reference (NumPy/PyTorch user-level semantics). Axes may be
// negative (counted from the end) unless stated otherwise; indices held in Arrays must be integral.
// An index outside its dimension is OUT_OF_RANGE; every other misuse is INVALID_ARGUMENT.
#ifndef OAR_CONFORMANCE_REFERENCE_SHAPE_H_
#define OAR_CONFORMANCE_REFERENCE_SHAPE_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "conformance/reference/array.h"

namespace oar::reference {

/// Same data, new shape; one extent may be -1 (inferred). The element counts must agree.
Array reshape(const Array& x, const std::vector<int64_t>& shape);
/// out.shape[i] = x.shape[dims[i]]; `dims` must be a permutation of the axes.
Array permute(const Array& x, const std::vector<int64_t>& dims);
/// Swaps two axes.
Array transpose(const Array& x, int64_t dim0, int64_t dim1);
/// Removes extent-1 dimensions: all of them when `axes` is empty, else those listed — a listed dimension
/// whose extent is not 1 is kept (torch.squeeze; numpy would throw).
Array squeeze(const Array& x, const std::vector<int64_t>& axes = {});
/// Inserts an extent-1 dimension at `axis` in [-rank-1, rank].
Array unsqueeze(const Array& x, int64_t axis);
/// Merges dimensions start..end (inclusive) into one; a scalar becomes [1].
Array flatten(const Array& x, int64_t start = 0, int64_t end = -1);
/// Broadcasts x to `shape` (torch.expand): new leading dimensions may be added, extent-1 dimensions
/// repeated; -1 keeps x's extent (not allowed on a new leading dimension).
Array expand(const Array& x, const std::vector<int64_t>& shape);
/// Joins arrays of equal rank (>= 1) along `axis`; the other extents must match.
Array concat(const std::vector<Array>& xs, int64_t axis = 0);
/// Joins arrays of one shape along a new dimension at `axis` in [-rank-1, rank].
Array stack(const std::vector<Array>& xs, int64_t axis = 0);
/// Pieces of the given extents along `axis` (they must sum to its extent).
std::vector<Array> split(const Array& x, const std::vector<int64_t>& sizes, int64_t axis = 0);
/// torch.chunk: pieces of ceil(n / chunks) along `axis`, the last one smaller, so possibly fewer than
/// `chunks` pieces; an empty dimension gives `chunks` empty pieces.
std::vector<Array> chunk(const Array& x, int64_t chunks, int64_t axis = 0);
/// x[..., start:end:step, ...] along `axis` with Python rules: negative start/end count from the end,
/// both are clamped to [0, extent]; step must be >= 1.
Array slice(const Array& x, int64_t axis, int64_t start = 0, int64_t end = std::numeric_limits<int64_t>::max(),
            int64_t step = 1);

/// torch.gather: index has x's rank and extents <= x's except along `axis`; out has index's shape with
/// out[..i..] = x[..index[..i..]..] (index replacing the `axis` coordinate). Index in [0, x.shape[axis]).
Array gather(const Array& x, int64_t axis, const Array& index);
/// torch.index_select: index rank 1; out has x's shape with `axis` extent len(index).
Array index_select(const Array& x, int64_t axis, const Array& index);
/// torch.scatter_add: a copy of x with out[..index[..i..]..] += src[..i..] (index replacing the `axis`
/// coordinate), in row-major order of index. index has x's rank, extents <= src's, and <= x's except
/// along `axis`.
Array scatter_add(const Array& x, int64_t axis, const Array& index, const Array& src);
/// One-hot encoding: x of integers in [0, classes) -> x.shape + [classes] of 0/1. classes = -1 means
/// max(x) + 1 (x must then be non-empty).
Array one_hot(const Array& x, int64_t classes = -1);
/// Constant padding. `pads` holds (before, after) for each dimension in order, dimension 0 first — the
/// layout of oar's `pad` attribute (numpy.pad's order; torch.nn.functional.pad lists the *last*
/// dimension first). Length 2·rank, every entry >= 0.
Array pad(const Array& x, const std::vector<int64_t>& pads, double value = 0.0);
/// Keeps elements with col - row <= k in the last two dimensions (rank >= 2), zeroes the rest.
Array tril(const Array& x, int64_t k = 0);
/// Keeps elements with col - row >= k in the last two dimensions, zeroes the rest.
Array triu(const Array& x, int64_t k = 0);

/// The k largest (or smallest) entries along an axis and their indices.
struct TopKResult {
  Array values;
  Array indices;
};
/// Sorted (descending when `largest`, else ascending), ties by lower index first. NaN orders above
/// every number (as in torch): first when largest, last otherwise. 0 <= k <= extent.
TopKResult topk(const Array& x, int64_t k, int64_t axis = -1, bool largest = true);

/// [start, start + step, ...) below `end` (above it for step < 0): ceil((end - start) / step) elements,
/// none when that is <= 0. step must be finite and nonzero.
Array arange(double start, double end, double step = 1.0);
/// An array of `shape` filled with `value` (same as Array::Full, validated).
Array full(const std::vector<int64_t>& shape, double value);

// ---------------------------------------------------------------------------------------------------
// Gradients (VJPs): required inputs, grad_y, then the other arguments (the convention of grad.h).
// ---------------------------------------------------------------------------------------------------

/// dx: grad_y scattered (added) back to the gathered positions.
Array gather_grad(const Array& x, const Array& index, const Array& grad_y, int64_t axis);
/// dx: each grad_y slice added to the x slice it was selected from (repeats accumulate).
Array index_select_grad(const Array& x, const Array& index, const Array& grad_y, int64_t axis);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_SHAPE_H_
