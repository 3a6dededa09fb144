// Float32 inner loops of the reductions, softmax and layer_norm, written with vector types and
// compiled for the CPU's widest vectors (x86-64: AVX-512, AVX2 or SSE2, chosen once at run time, as ExpN).
//
// Each function computes exactly the operations, in exactly the order, of the scalar loop it replaces
// (named in its comment): the same 16 independent lanes, the same tail, the same final combination. The
// source file is compiled with -ffp-contract=off, so no width fuses a multiply-add, and the results are
// bitwise those of the scalar loops on every machine. Why the scalar loops were slow: GCC kept the 16
// lanes in memory (a store-to-load chain per vector add), and under -ftrapping-math it does not
// if-convert float comparisons, so the max/min and sigmoid loops stayed scalar and branchy.
#ifndef OAR_PLUGINS_COMMON_VEC_LANES_H_
#define OAR_PLUGINS_COMMON_VEC_LANES_H_

#include <cstdint>

namespace oar::host {

/// SumRun's leaf (reduce.cc) for unit stride: the float sum of p[0..n), n <= 256, in 16 lanes (lane l
/// takes the elements i with i % 16 == l), then lanes [0, 8) += [8, 16), [0, 4) += [4, 8), and so on.
float SumLeaf(const float* p, int64_t n);

/// PairwiseSum's leaf (softmax_norm.cc) for f(i) = double(p[i]): the same lanes in double.
double SumLeafAsDouble(const float* p, int64_t n);

/// PairwiseSum's leaf for f(i) = (double(p[i]) - mean)^2.
double SquaredDeviationLeaf(const float* p, int64_t n, double mean);

/// The row maximum of SoftmaxRow: m = -inf, then m = p[i] > m ? p[i] : m for i = 0, 1, ... (NaN is skipped;
/// of equal zeros the first one wins, as in that loop).
float RowMax(const float* p, int64_t n);

/// FoldRun (reduce_extrema.cc) of MaxFold / MinFold for unit stride and n >= 32: 16 lanes folded with
/// (v > lane || v != v) ? v : lane (or <), then acc folded with the tail elements, then with lanes 0..15.
/// (Computed as each lane's last NaN, else its first greatest value, which is what that fold keeps.)
float MaxFoldRun(const float* p, int64_t n, float acc);
float MinFoldRun(const float* p, int64_t n, float acc);

/// The column fold of reduce_extrema.cc: a[j] = (s[j] > a[j] || s[j] != s[j]) ? s[j] : a[j] (or <).
void MaxFoldColumn(float* a, const float* s, int64_t w);
void MinFoldColumn(float* a, const float* s, int64_t w);

/// LayerNorm's output row: o[i] = float((double(v[i]) - mean) * rstd * double(w[i]) + double(b[i])).
void LayerNormRow(const float* v, const float* w, const float* b, float* o, int64_t n, double mean, double rstd);

/// The same three on float data already widened to double (d[i] = double(p[i]), WidenSumLeaf): the same
/// values in the same lanes and order, so bitwise the same results, without converting each element
/// again in every pass (layer_norm widens a row once, its weight and bias once per call).
double SumLeafAsDouble(const double* p, int64_t n);
double SquaredDeviationLeaf(const double* p, int64_t n, double mean);
void LayerNormRow(const double* v, const double* w, const double* b, float* o, int64_t n, double mean, double rstd);
/// d[i] = double(p[i]) for i in [0, n), n <= 256, and SumLeafAsDouble(d, n), in one pass: each widened
/// vector is stored and added to its lanes while in registers.
double WidenSumLeaf(const float* p, double* d, int64_t n);

/// The float32 binary maps of elementwise.cc (MapBinary) with a vector loop of the CPU's widest vectors.
enum class VecBinary { kAdd, kSub, kMul, kDiv, kReluGrad };

/// o[i] = x[i * x_step] op y[i * y_step] for i in [0, n), each step 1 or 0 (a broadcast scalar), not both
/// 0. One IEEE operation per element, the same as MapBinary's scalar Apply, so every width gives the
/// same bits. `o` may be `x` or `y` (no other overlap).
void BinaryRun(VecBinary op, const float* x, int64_t x_step, const float* y, int64_t y_step, float* o, int64_t n);

/// batch_norm_train's and batch_norm_train_grad's per-element steps (reduce.cc) on one channel's run: the
/// float operations of the composed ops they replace (core/ops/nn.cc's batch_norm and its VJP chain), each
/// rounded, in that order; BatchNormStep is the one definition of them, for vectors and scalars alike.
enum class VecBatchNorm {
  kSquare,   // o = (x - m) * (x - m)                          (var's summand)
  kProduct,  // o = g * (x - m)                                 (the scale's gradient's summand)
  kAffine,   // o = ((x - m) * a) + b                           (y; a = scale, b = bias)
  kGradD,    // gd = ((g * a) + q) + q, q = b * (x - m); o = -gd (a = scale, b = c2: the mean's summand)
};
template <VecBatchNorm kOp, typename V>
[[gnu::always_inline]] inline V BatchNormStep(V x, V g, V m, V a, V b, V* gd) {
  const V d = x - m;
  if constexpr (kOp == VecBatchNorm::kSquare) return d * d;
  if constexpr (kOp == VecBatchNorm::kProduct) return g * d;
  if constexpr (kOp == VecBatchNorm::kAffine) return (d * a) + b;
  if constexpr (kOp == VecBatchNorm::kGradD) {
    const V q = b * d;
    *gd = ((g * a) + q) + q;
    return -*gd;
  }
}
/// o[i] = BatchNormStep<op>(x[i], g[i], m, a, b, &gd[i]) for i in [0, n) (g: kProduct and kGradD only; gd:
/// kGradD only, may be null there). No overlap but `o` == `x`.
void BatchNormRun(VecBatchNorm op, const float* x, const float* g, float m, float a, float b, float* o, float* gd,
                  int64_t n);

/// log_softmax's output row: o[i] = (x[i] - a) - b, the two float subtractions in that order (what two
/// BinaryRun kSub passes with a broadcast scalar give), in one pass. `o` may be `x`.
void SubTwiceRun(const float* x, float a, float b, float* o, int64_t n);
/// A bias row added to each of `rows` dense rows of n: o[i * n + j] = o[i * n + j] + b[j] (fused_linear's
/// epilogue, matmul.cc): BinaryRun's kAdd per row, one call for the block of rows. `b` must not overlap `o`.
void AddRows(float* o, const float* b, int64_t rows, int64_t n);

/// ReluOp of elementwise.cc on a dense float32 run: y[i] = x[i] < 0 ? 0 : x[i] (NaN and -0 pass through;
/// y may be x).
void ReluRun(const float* x, float* y, int64_t n);

/// One output row of MaxPoolPlaneNoPad<float, 2, 2> (pool.cc) with a column stride of 2 over unit-stride
/// input rows r0 (the window's first row) and r1 (its second): for each ow in [0, n) the taps r0[2 ow],
/// r0[2 ow + 1], r1[2 ow], r1[2 ow + 1] in that order, best = -inf and `v > best` selects keep the first
/// greatest value; the first NaN of a window wins instead (value and position). y[ow] is the value and
/// idx[ow] the flat input position: base + 2 ow (+ 1 for the second column, + row_step for the second
/// row), exactly what that loop writes.
void MaxPool2x2Row(const float* r0, const float* r1, float* y, int64_t* idx, int64_t n, int64_t base, int64_t row_step);

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_VEC_LANES_H_
