// index_select: out[.., j, ..] = x[.., index[j], ..] along `axis`. The host has checked every index
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

INDEX_SELECT(x8)
INDEX_SELECT(x16)
INDEX_SELECT(x32)
INDEX_SELECT(x64)
