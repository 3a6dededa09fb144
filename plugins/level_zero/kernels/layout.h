/* Argument structs shared by the OpenCL C kernels (the .cl files in kernels/) and the host code that launches them
 * (ops.cc). One definition on both sides so the byte layout cannot drift: every field is 64 bits wide
 * or an explicit 32-bit pair, so OpenCL C (long = 64 bits) and C++ (int64_t) agree without packing
 * pragmas. Passed to kernels by value (a ByVal struct argument in SPIR-V).
 */
#ifndef OAR_LEVEL_ZERO_KERNELS_LAYOUT_H_
#define OAR_LEVEL_ZERO_KERNELS_LAYOUT_H_

#ifdef __OPENCL_C_VERSION__
typedef long oar_i64;
typedef int oar_i32;
#else
#include <cstdint>
typedef int64_t oar_i64;
typedef int32_t oar_i32;
#endif

#define OAR_L0_MAX_RANK 8
/* Work-group size of the reduction, softmax and matmul kernels (local arrays are sized with it). */
#define OAR_L0_REDUCE_GROUP 256
#define OAR_L0_GEMM_TILE 16

/* Elementwise, copy, where, cast: up to three inputs and one output over one logical shape.
 * stride[k] are the element strides of operand k (inputs in order, then the output last used slot). */
typedef struct OarEwLayout {
  oar_i64 n;                                /* elements */
  oar_i64 shape[OAR_L0_MAX_RANK];           /* row-major logical extents, dims [0, rank) */
  oar_i64 stride[4][OAR_L0_MAX_RANK];       /* operand 0..3 */
  oar_i32 rank;                             /* 1 .. OAR_L0_MAX_RANK (the host never passes 0) */
  oar_i32 pad_;
} OarEwLayout;

/* Reductions: one work-group per output element. The output is contiguous in row-major order of the
 * kept dimensions; `kept_*` walk the input to the first element of a group's set, `red_*` walk the set. */
typedef struct OarReduceLayout {
  oar_i64 outputs;                          /* output elements (product of kept_shape) */
  oar_i64 count;                            /* elements reduced per output (product of red_shape) */
  oar_i64 kept_shape[OAR_L0_MAX_RANK];
  oar_i64 kept_stride[OAR_L0_MAX_RANK];     /* input strides of the kept dims */
  oar_i64 red_shape[OAR_L0_MAX_RANK];
  oar_i64 red_stride[OAR_L0_MAX_RANK];      /* input strides of the reduced dims */
  oar_i32 kept_rank;
  oar_i32 red_rank;
} OarReduceLayout;

/* Softmax along one axis: one work-group per row. */
typedef struct OarRowLayout {
  oar_i64 rows;
  oar_i64 n;                                /* extent of the axis */
  oar_i64 x_axis_stride;
  oar_i64 out_axis_stride;
  oar_i64 outer_shape[OAR_L0_MAX_RANK];     /* every dim but the axis */
  oar_i64 x_outer_stride[OAR_L0_MAX_RANK];
  oar_i64 out_outer_stride[OAR_L0_MAX_RANK];
  oar_i32 outer_rank;
  oar_i32 pad_;
} OarRowLayout;

/* Batched matmul out[b, i, j] = sum_k a[b, i, k] * b[b, k, j]; `out` is contiguous [batch, M, N]. */
typedef struct OarGemmLayout {
  oar_i64 batch;
  oar_i64 m, n, k;
  oar_i64 a_rs, a_cs;                       /* a: stride of i, stride of k */
  oar_i64 b_rs, b_cs;                       /* b: stride of k, stride of j */
  oar_i64 batch_shape[OAR_L0_MAX_RANK];
  oar_i64 a_batch_stride[OAR_L0_MAX_RANK];
  oar_i64 b_batch_stride[OAR_L0_MAX_RANK];
  oar_i32 batch_rank;
  oar_i32 pad_;
} OarGemmLayout;

/* index_select: out = x with `index` applied along `axis`. Out is contiguous with shape `shape`. */
typedef struct OarIndexLayout {
  oar_i64 n;                                /* output elements */
  oar_i64 shape[OAR_L0_MAX_RANK];           /* output shape */
  oar_i64 x_stride[OAR_L0_MAX_RANK];
  oar_i64 index_stride;
  oar_i32 rank;
  oar_i32 axis;
} OarIndexLayout;

/* gather: out[i] = x[i with i[axis] replaced by index[i]]; out is contiguous with the index's shape. */
typedef struct OarGatherLayout {
  oar_i64 n;                                /* output elements */
  oar_i64 shape[OAR_L0_MAX_RANK];           /* the index's (and the output's) shape */
  oar_i64 x_stride[OAR_L0_MAX_RANK];
  oar_i64 index_stride[OAR_L0_MAX_RANK];
  oar_i32 rank;
  oar_i32 axis;
} OarGatherLayout;

#endif /* OAR_LEVEL_ZERO_KERNELS_LAYOUT_H_ */
