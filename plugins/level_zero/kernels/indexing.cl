// index_select: out[.., j, ..] = x[.., index[j], ..] along `axis`; gather: out[i] = x[i with i[axis]
// replaced by index[i]]. The host has checked every index
// against [0, x.shape[axis]) before launching, so the kernel trusts them.
#define INDEX_SELECT(W)                                                                            \
  __kernel void index_select_##W(__global const T_##W* x, __global const long* index,             \
                                 __global T_##W* out, OarIndexLayout L) {                          \
    GRID_LOOP(i, L.n) {                                                                            \
      long rest = i, off = 0;                                                                      \
      for (int d = L.rank - 1; d >= 0; --d) {                                                      \
        long c = rest % L.shape[d];                                                                \
        rest /= L.shape[d];                                                                        \
        if (d == L.axis) c = index[c * L.index_stride];                                            \
        off += c * L.x_stride[d];                                                                  \
      }                                                                                            \
      out[i] = x[off];                                                                             \
    }                                                                                              \
  }

#define GATHER(W)                                                                                  \
  __kernel void gather_##W(__global const T_##W* x, __global const long* index, __global T_##W* out, \
                           OarGatherLayout L) {                                                    \
    GRID_LOOP(i, L.n) {                                                                            \
      long rest = i, xo = 0, io = 0;                                                               \
      for (int d = L.rank - 1; d >= 0; --d) {                                                      \
        const long c = rest % L.shape[d];                                                          \
        rest /= L.shape[d];                                                                        \
        io += c * L.index_stride[d];                                                               \
        if (d != L.axis) xo += c * L.x_stride[d];                                                  \
      }                                                                                            \
      out[i] = x[xo + index[io] * L.x_stride[L.axis]];                                             \
    }                                                                                              \
  }

#define INDEXING(W) INDEX_SELECT(W) GATHER(W)
INDEXING(x8)
INDEXING(x16)
INDEXING(x32)
INDEXING(x64)
