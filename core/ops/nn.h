// Neural-network, loss, attention and indexing ops. Ops backed by a kernel run through their schema
// (schema_nn.cc); the others are compositions of primitives and differentiate through them.
#ifndef OAR_CORE_OPS_NN_H_
#define OAR_CORE_OPS_NN_H_

#include <array>
#include <span>
#include <utility>
#include <vector>

#include "core/ops/ops.h"

namespace oar {

// ---- convolution and pooling (NCHW) -----------------------------------------------------------------
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(), std::array<int64_t, 2> stride = {1, 1},
              std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1});
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding = {0, 0}, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

// ---- normalisation ------------------------------------------------------------------------------------
/// Normalise over the last `normalized_ndim` dims; weight/bias optional (shape of those dims).
Tensor layer_norm(const Tensor& x, int normalized_ndim, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
Tensor rms_norm(const Tensor& x, int normalized_ndim, const Tensor& weight = Tensor(), double eps = 1e-6);
/// Training: batch statistics (running statistics updated in place when given); inference: running ones.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

/// batch_norm's training forward with weight and bias as one op: {y, mean, var}, bit for bit the composed
/// ops batch_norm runs without it (mean and var in the keepdim shape [1, C(, 1, 1)], population variance;
/// they carry no gradient). x [N, C] or [N, C, H, W], weight and bias [C], float32 or float64.
std::vector<Tensor> batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
/// The gradients {grad_x, grad_weight, grad_bias} of batch_norm_train's y given its gradient `grad`, bit for
/// bit what autograd gives through the composed ops.
std::vector<Tensor> batch_norm_train_grad(const Tensor& grad, const Tensor& x, const Tensor& weight, double eps = 1e-5);

// ---- activations ----------------------------------------------------------------------------------------
Tensor gelu(const Tensor& x, bool approximate_tanh = false);
Tensor silu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double slope = 0.01);
Tensor clip(const Tensor& x, double lo, double hi);
/// relu's gradient in one pass: grad * (x > 0 ? 1 : 0) per element, grad and x of one floating dtype and one
/// shape — bit for bit `grad * cast(gt(x, 0), dtype)` (a NaN x gives grad * 0; a negative grad where x <= 0
/// gives -0). What relu's VJP runs where the device has its kernel (elsewhere the VJP runs the composed form).
Tensor relu_grad(const Tensor& grad, const Tensor& x);

// ---- reductions ---------------------------------------------------------------------------------------
Tensor var(const Tensor& x, std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false);
Tensor stddev(const Tensor& x, std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);

// ---- linear, losses, embedding, dropout -------------------------------------------------------------------
/// x wᵀ + bias, with w [out, in].
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());
/// The epilogue of fused_linear (its `activation` attribute, docs/ops.md): gelu is the exact (erf) form.
enum class FusedActivation : int64_t { kNone = 0, kRelu = 1, kGelu = 2, kTanh = 3 };
/// act(x @ w + bias) as one op, x [..., K] (rank >= 2), w [K, N], bias [N] -> [..., N] (float32, float64): one
/// kernel (oneDNN matmul with a bias and an eltwise post-op on the host plugins) where the device has it.
/// Note w is [K, N], not linear()'s [out, in]: pass w.transpose(0, 1) (a view, no copy) for that layout.
Tensor fused_linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                    FusedActivation activation = FusedActivation::kNone);
/// Mean negative log-likelihood over targets != ignore_index; log_probs [N, C], target int64 [N].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
Tensor mse_loss(const Tensor& a, const Tensor& b);
/// Rows of weight [num, dim] at int64 indices of any shape -> indices.shape + [dim].
Tensor embedding(const Tensor& weight, const Tensor& indices);
/// Zero each element with probability p (mask drawn from `gen`), scale the rest by 1/(1-p).
Tensor dropout(const Tensor& x, double p, Generator& gen, bool training = true);

// ---- attention ------------------------------------------------------------------------------------------
/// Rotary position embedding over x [..., T, D] (rotate-half pairs (i, i + D/2)), positions offset..offset+T-1.
Tensor rotary_embedding(const Tensor& x, int64_t position_offset = 0, double base = 10000.0);
/// softmax(q kᵀ / sqrt(d) [+ causal mask] [+ mask]) v; with a KV cache (more keys than queries) the
/// queries are the last positions.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false,
                                    const Tensor& mask = Tensor());

// ---- shape and indexing -----------------------------------------------------------------------------------
Tensor concat(std::span<const Tensor> tensors, int64_t axis);
Tensor stack(std::span<const Tensor> tensors, int64_t axis);
std::vector<Tensor> split(const Tensor& x, std::span<const int64_t> sizes, int64_t axis);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis);
Tensor flatten(const Tensor& x, int64_t start = 0, int64_t end = -1);
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);
/// (values, int64 indices) of the k largest (or smallest) along axis, sorted.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis = -1, bool largest = true);
/// Constant padding; pads = {before0, after0, before1, after1, ...} for every dim.
Tensor pad(const Tensor& x, std::span<const int64_t> pads, double value = 0.0);
Tensor one_hot(const Tensor& x, int64_t classes);
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);
Tensor full_like(const Tensor& x, double value);

}  // namespace oar

#endif  // OAR_CORE_OPS_NN_H_
