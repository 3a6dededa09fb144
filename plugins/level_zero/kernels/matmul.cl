// Batched, strided GEMM: out[b] (M x N, contiguous) = a[b] (M x K) * b[b] (K x N), tiled through local
// memory in OAR_L0_GEMM_TILE x OAR_L0_GEMM_TILE blocks; one work-item per output element of a tile.
// Any strides (transposes arrive as swapped strides, broadcast batch dims as stride 0). Accumulates in
// float32 and rounds once for f16. Tiles and batches beyond the launched grid are walked in loops whose
// trip counts are uniform across the group, so the barriers stay legal.
#define TS OAR_L0_GEMM_TILE

#define MATMUL(S)                                                                                 \
  __kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void matmul_##S(                     \
      __global const T_##S* a, __global const T_##S* b, __global T_##S* out, OarGemmLayout L) {  \
    __local float ta[TS][TS];                                                                     \
    __local float tb[TS][TS];                                                                     \
    const int lx = get_local_id(0); /* column within the tile */                                  \
    const int ly = get_local_id(1); /* row within the tile */                                     \
    const long tiles_n = (L.n + TS - 1) / TS;                                                     \
    const long tiles_m = (L.m + TS - 1) / TS;                                                     \
    for (long bt = get_group_id(2); bt < L.batch; bt += get_num_groups(2)) {                      \
      const long ab = StridedOffset(bt, L.batch_rank, L.batch_shape, L.a_batch_stride);           \
      const long bb = StridedOffset(bt, L.batch_rank, L.batch_shape, L.b_batch_stride);           \
      for (long tm = get_group_id(1); tm < tiles_m; tm += get_num_groups(1)) {                    \
        for (long tn = get_group_id(0); tn < tiles_n; tn += get_num_groups(0)) {                  \
          const long row = tm * TS + ly;                                                          \
          const long col = tn * TS + lx;                                                          \
          float acc = 0.0f;                                                                       \
          for (long k0 = 0; k0 < L.k; k0 += TS) {                                                 \
            const long ka = k0 + lx; /* a tile: row `row`, column ka */                           \
            const long kb = k0 + ly; /* b tile: row kb, column `col` */                           \
            ta[ly][lx] = (row < L.m && ka < L.k) ? LD_##S(a, ab + row * L.a_rs + ka * L.a_cs) : 0.0f; \
            tb[ly][lx] = (kb < L.k && col < L.n) ? LD_##S(b, bb + kb * L.b_rs + col * L.b_cs) : 0.0f; \
            barrier(CLK_LOCAL_MEM_FENCE);                                                         \
            for (int kk = 0; kk < TS; ++kk) acc = fma(ta[ly][kk], tb[kk][lx], acc);               \
            barrier(CLK_LOCAL_MEM_FENCE);                                                         \
          }                                                                                       \
          if (row < L.m && col < L.n) ST_##S(out, (bt * L.m + row) * L.n + col, acc);             \
        }                                                                                         \
      }                                                                                           \
    }                                                                                             \
  }

MATMUL(f32)
MATMUL(f16)
