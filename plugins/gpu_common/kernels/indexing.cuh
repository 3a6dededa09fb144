// Host-and-device index arithmetic shared by every GPU kernel: strided offsets, dimension coalescing,
// launch configuration and the matrix-layout test of the BLAS fast path. Plain C++ when compiled by the
// host compiler, so the unit tests run the same functions the kernels run.
#ifndef OAR_PLUGINS_GPU_COMMON_KERNELS_INDEXING_CUH_
#define OAR_PLUGINS_GPU_COMMON_KERNELS_INDEXING_CUH_

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define OAR_HD __host__ __device__ inline
#else
#define OAR_HD inline
#endif

namespace oar::gpu {

inline constexpr int kMaxRank = 8;

/// N operands that share one logical shape (the output's): offsets of element `linear` (row-major
/// position in that shape) in each operand, from its element strides. Passed to kernels by value.
template <int N>
struct Indexer {
  int32_t rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[N][kMaxRank] = {};

  OAR_HD int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
  OAR_HD void Offsets(int64_t linear, int64_t (&offsets)[N]) const {
    for (int k = 0; k < N; ++k) offsets[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t extent = shape[d];
      const int64_t index = d == 0 ? linear : linear % extent;
      linear = d == 0 ? 0 : linear / extent;
      for (int k = 0; k < N; ++k) offsets[k] += index * strides[k][d];
    }
  }
};

/// Row-major contiguous strides of `shape` written into `strides`.
OAR_HD void ContiguousStrides(int32_t rank, const int64_t* shape, int64_t* strides) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
}

/// Drop extent-1 dimensions and merge neighbours that are contiguous with each other in every operand,
/// so that a dense tensor becomes rank 1 and the per-element division chain is as short as possible.
/// The row-major order of elements (what `linear` means) is unchanged.
template <int N>
OAR_HD Indexer<N> Coalesce(const Indexer<N>& in) {
  Indexer<N> out;
  for (int d = 0; d < in.rank; ++d) {
    if (in.shape[d] == 1) continue;
    if (in.shape[d] == 0) {  // empty: nothing to index; keep one zero extent
      out.rank = 1;
      out.shape[0] = 0;
      for (int k = 0; k < N; ++k) out.strides[k][0] = 0;
      return out;
    }
    bool merge = out.rank > 0;
    for (int k = 0; k < N && merge; ++k) {
      merge = out.strides[k][out.rank - 1] == in.strides[k][d] * in.shape[d];
    }
    if (merge) {
      out.shape[out.rank - 1] *= in.shape[d];
      for (int k = 0; k < N; ++k) out.strides[k][out.rank - 1] = in.strides[k][d];
    } else {
      out.shape[out.rank] = in.shape[d];
      for (int k = 0; k < N; ++k) out.strides[k][out.rank] = in.strides[k][d];
      ++out.rank;
    }
  }
  return out;
}

/// A 1-D launch: `blocks` blocks of `threads` threads running a grid-stride loop over n items.
struct LaunchConfig {
  uint32_t blocks = 0;
  uint32_t threads = 0;
};
inline constexpr uint32_t kThreads = 256;
inline constexpr uint32_t kMaxBlocks = 65535;  // grid-stride loops cover the rest

OAR_HD LaunchConfig ElementwiseConfig(int64_t n) {
  LaunchConfig c;
  if (n <= 0) return c;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  c.blocks = static_cast<uint32_t>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  c.threads = kThreads;
  return c;
}

/// Threads per block for a block that cooperatively reduces `n` items: a power of two between 32 and
/// 256, no larger than needed (small reductions do not leave most threads idle).
OAR_HD uint32_t ReductionThreads(int64_t n) {
  uint32_t t = 32;
  while (t < kThreads && t < n) t *= 2;
  return t;
}

/// How a BLAS library can read one matrix operand of `rows` x `cols` with element strides
/// (row_stride, col_stride): row-major with leading dimension `ld` (rows are `ld` apart), column-major
/// likewise, or not at all (`ok` false: the operand needs the generic kernel).
struct MatrixLayout {
  bool ok = false;
  bool column_major = false;
  int64_t ld = 0;
};

OAR_HD MatrixLayout BlasLayout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  MatrixLayout m;
  const int64_t min_row_ld = cols > 1 ? cols : 1;
  const int64_t min_col_ld = rows > 1 ? rows : 1;
  if (cols <= 1 || col_stride == 1) {  // row-major candidate
    const int64_t ld = rows <= 1 ? min_row_ld : row_stride;
    if (ld >= min_row_ld) {
      m.ok = true;
      m.ld = ld;
      return m;
    }
  }
  if (rows <= 1 || row_stride == 1) {  // column-major candidate
    const int64_t ld = cols <= 1 ? min_col_ld : col_stride;
    if (ld >= min_col_ld) {
      m.ok = true;
      m.column_major = true;
      m.ld = ld;
    }
  }
  return m;
}

}  // namespace oar::gpu

#endif  // OAR_PLUGINS_GPU_COMMON_KERNELS_INDEXING_CUH_
