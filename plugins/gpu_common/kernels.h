// Host interface of the shared GPU kernels (kernels.cu, compiled by nvcc for cuda and by hipcc for hip).
// Plain C++ without vendor types, so the plugin's host code compiles with the host compiler. Every
// launcher enqueues its work on `stream` (the vendor stream as a void*) and returns the vendor error
// code of the launch (0 = success); the caller turns a failure into a status naming the op and device.
// Launchers never synchronise the stream and never read device memory from the host.
#ifndef OAR_PLUGINS_GPU_COMMON_KERNELS_H_
#define OAR_PLUGINS_GPU_COMMON_KERNELS_H_

#include <cstdint>

#include "plugins/gpu_common/kernels/numeric.cuh"

namespace oar::gpu {

/// One tensor operand as the kernels see it: device address, dtype (oar_dtype), shape and strides in
/// elements (the ABI descriptor, copied so it can travel by value).
struct TensorArg {
  void* data = nullptr;
  int32_t dtype = 0;
  int32_t rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
};

enum class ReduceOp : int32_t { kSum, kMean, kMax, kMin, kProd };

using StreamHandle = void*;  // the vendor stream (cudaStream_t, hipStream_t)

/// out = op(x) (out contiguous, BOOL for the predicates).
int LaunchUnary(UnaryOp op, const TensorArg& x, const TensorArg& out, StreamHandle stream);
/// out = a op b; a and b already broadcast to out's shape (BOOL out for comparisons and logical ops).
int LaunchBinary(BinaryOp op, const TensorArg& a, const TensorArg& b, const TensorArg& out, StreamHandle stream);
/// out = cond ? a : b, bits copied unchanged.
int LaunchWhere(const TensorArg& cond, const TensorArg& a, const TensorArg& b, const TensorArg& out,
                StreamHandle stream);
/// out = cast(x) with the rules of docs/ops.md; out may be strided.
int LaunchCast(const TensorArg& x, const TensorArg& out, StreamHandle stream);
/// Element bytes of x into the strided view out (same dtype, same shape).
int LaunchCopy(const TensorArg& x, const TensorArg& out, StreamHandle stream);
/// Every element of the contiguous `out` set to the low DTypeSize bytes of `bits`.
int LaunchFill(const TensorArg& out, uint64_t bits, StreamHandle stream);
/// Keepdim reduction of x over the dimensions whose bit is set in `axes_mask`.
int LaunchReduce(ReduceOp op, const TensorArg& x, uint32_t axes_mask, const TensorArg& out, StreamHandle stream);
/// Index (I64) of the first maximum / minimum along `axis`, NaN counting as the extreme.
int LaunchArgReduce(bool is_max, const TensorArg& x, int axis, const TensorArg& out, StreamHandle stream);
/// softmax or log_softmax along `axis`.
int LaunchSoftmax(bool log, const TensorArg& x, int axis, const TensorArg& out, StreamHandle stream);
/// layer_norm over the dimensions [axis, rank).
int LaunchLayerNorm(const TensorArg& x, const TensorArg& weight, const TensorArg& bias, int axis, double eps,
                    const TensorArg& y, const TensorArg& mean, const TensorArg& rstd, StreamHandle stream);
/// out[..., M, N] = a[..., M, K] @ b[..., K, N] with any strides (the generic tiled kernel).
int LaunchGemm(const TensorArg& a, const TensorArg& b, const TensorArg& out, StreamHandle stream);
/// *first_bad (device memory, preset to UINT64_MAX by the caller) becomes the smallest row-major
/// position of an index outside [0, limit).
int LaunchFindBadIndex(const TensorArg& index, int64_t limit, unsigned long long* first_bad, StreamHandle stream);
/// gather (index has out's shape) or index_select (index is rank 1 along `axis`) along `axis`.
int LaunchGather(const TensorArg& x, const TensorArg& index, int axis, bool index_select, const TensorArg& out,
                 StreamHandle stream);

/// scatter_add: out (contiguous, x's shape) = x plus, for every index position, src added at the
/// index's value along `axis`. Deterministic: each output element sums its contributions in row-major
/// order of the index, in float32 (float64, wrapping integers) and rounds once. Indices must have been
/// checked already.
int LaunchScatterAdd(const TensorArg& x, const TensorArg& index, const TensorArg& src, int axis, const TensorArg& out,
                     StreamHandle stream);

/// topk along `axis`: the k first elements of each line in the contract's order (descending when
/// `largest`, NaN above every number, lower index first on ties), values bit-exact, indices I64.
int LaunchTopk(const TensorArg& x, int64_t k, int axis, bool largest, const TensorArg& values, const TensorArg& indices,
               StreamHandle stream);

/// Geometry of a 2-D convolution (validated by the caller against docs/ops.md).
struct ConvGeometry {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight [o, c / groups, kh, kw]
  int64_t ho, wo;      // output
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
};
enum class ConvKind : int32_t { kForward, kGradInput, kGradWeight };
/// conv2d (a = x, b = w, out = y), conv2d_grad_input (a = grad_out, b = w, out = grad_x) or
/// conv2d_grad_weight (a = grad_out, b = x, out = grad_w): one thread per output element, direct loops,
/// float accumulation (double for F64), deterministic.
int LaunchConv(ConvKind kind, const ConvGeometry& g, const TensorArg& a, const TensorArg& b, const TensorArg& out,
               StreamHandle stream);

/// max_pool2d with the geometry of `g` (o and groups unused): y and the flat h * W + w index of the
/// first maximum of each window (padding never wins, the first NaN does). Windows of only padding must
/// have been refused by the caller.
int LaunchMaxPool(const ConvGeometry& g, const TensorArg& x, const TensorArg& y, const TensorArg& indices,
                  StreamHandle stream);

enum class PoolKind : int32_t { kAvg, kAvgGrad, kAdaptiveAvg, kAdaptiveAvgGrad };
/// The average poolings of docs/ops.md, out contiguous, in float32 for 16-bit floats (float64 for F64):
///  - kAvg: y (out) from x (in) with the windows of `g` (dilation 1), each divided by its divisor;
///  - kAvgGrad: grad_x (out, shape [n, c, h, w]) from grad_y (in, [n, c, ho, wo]);
///  - kAdaptiveAvg / kAdaptiveAvgGrad: the same with the adaptive windows of g.h x g.w over g.ho x g.wo
///    (kernel, stride and padding unused).
/// The gradients gather, per input element, the windows that cover it: no atomics, deterministic.
/// Windows of only padding must have been refused by the caller (forward) or pass nothing back (gradient).
int LaunchPool(PoolKind kind, const ConvGeometry& g, bool count_include_pad, const TensorArg& in, const TensorArg& out,
               StreamHandle stream);

}  // namespace oar::gpu

#endif  // OAR_PLUGINS_GPU_COMMON_KERNELS_H_
