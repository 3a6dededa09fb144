// Neural-network ops of the reference: softmax, normalisation, losses, embedding, rotary embedding and
// attention, with the gradients of the differentiable ones. Shapes follow torch.nn.functional.
#ifndef OAR_CONFORMANCE_REFERENCE_NN_H_
#define OAR_CONFORMANCE_REFERENCE_NN_H_

#include <cstdint>
#include <optional>

#include "conformance/reference/array.h"

namespace oar::reference {

// ---------------------------------------------------------------------------------------------------
// Softmax and normalisation
// ---------------------------------------------------------------------------------------------------

/// exp(x - max) / sum(exp(x - max)) along `axis` (rank >= 1). A lane of all -inf, or holding +inf or NaN,
/// gives NaN (as torch).
Array softmax(const Array& x, int64_t axis = -1);
/// (x - max) - log(sum(exp(x - max))) along `axis`.
Array log_softmax(const Array& x, int64_t axis = -1);

/// torch.nn.functional.layer_norm over the last `normalized_ndim` (>= 1) dimensions:
/// (x - mean) / sqrt(var + eps) * weight + bias with the biased variance; weight and bias (optional,
/// default ones/zeros) have the normalised shape x.shape[-normalized_ndim:].
Array layer_norm(const Array& x, int64_t normalized_ndim, const std::optional<Array>& weight = std::nullopt,
                 const std::optional<Array>& bias = std::nullopt, double eps = 1e-5);
/// The statistics oar's layer_norm kernel also returns, keepdim shape (normalised dims of extent 1).
struct LayerNormStats {
  Array mean;
  Array rstd;  // 1 / sqrt(biased var + eps)
};
LayerNormStats layer_norm_stats(const Array& x, int64_t normalized_ndim, double eps = 1e-5);

/// x / sqrt(mean(x^2) + eps) * weight over the last `normalized_ndim` dimensions (weight optional).
Array rms_norm(const Array& x, int64_t normalized_ndim, const std::optional<Array>& weight = std::nullopt,
               double eps = 1e-6);

/// Inference batch norm: x [N, C, ...] (rank >= 2), per-channel (x - mean) / sqrt(var + eps) * weight +
/// bias with the given running statistics, all [C]; weight/bias optional (ones/zeros).
Array batch_norm(const Array& x, const Array& running_mean, const Array& running_var,
                 const std::optional<Array>& weight = std::nullopt, const std::optional<Array>& bias = std::nullopt,
                 double eps = 1e-5);
/// Training batch norm: normalises with the batch's per-channel mean and *biased* variance and returns
/// them too, the variance *unbiased* (what updates the running statistics). Needs more than one value
/// per channel (torch's rule), else INVALID_ARGUMENT.
struct BatchNormTrainResult {
  Array y;
  Array batch_mean;          // [C]
  Array batch_var_unbiased;  // [C]
};
BatchNormTrainResult batch_norm_train(const Array& x, const std::optional<Array>& weight = std::nullopt,
                                      const std::optional<Array>& bias = std::nullopt, double eps = 1e-5);

// ---------------------------------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------------------------------

enum class Reduction { kNone, kMean, kSum };

/// torch.nn.functional.cross_entropy with class-index targets: logits [N, C, d...] (class dimension 1)
/// or [C] (unbatched), target of the logits' shape without the class dimension, integers in [0, C) or
/// ignore_index (else OUT_OF_RANGE). Per element:
///   loss = (1 - s)·(-log p[target]) + (s / C)·sum_c(-log p[c]),  p = softmax over classes, s = smoothing,
/// 0 for ignored elements. kMean divides by the number of non-ignored elements (NaN when there are none);
/// kNone returns the target-shaped losses.
Array cross_entropy(const Array& logits, const Array& target, int64_t ignore_index = -100, double label_smoothing = 0.0,
                    Reduction reduction = Reduction::kMean);
/// torch.nn.functional.nll_loss: -log_probs[target] with cross_entropy's shapes, ignore and reductions.
Array nll_loss(const Array& log_probs, const Array& target, int64_t ignore_index = -100,
               Reduction reduction = Reduction::kMean);
/// (a - b)^2, reduced; a and b must have the same shape (no broadcasting: torch warns that it is
/// usually a bug).
Array mse_loss(const Array& a, const Array& b, Reduction reduction = Reduction::kMean);

// ---------------------------------------------------------------------------------------------------
// Embedding and attention
// ---------------------------------------------------------------------------------------------------

/// weight [V, D], indices of any shape with integers in [0, V) -> indices.shape + [D].
Array embedding(const Array& weight, const Array& indices);

/// Rotary position embedding, rotate-half convention: x [..., T, D] with D even, positions broadcastable
/// to x.shape[:-1] (typically [T]). With h = D/2 and theta_i = position · base^(-2i/D), for i < h:
///   out_i     = x_i cos(theta_i) - x_{i+h} sin(theta_i)
///   out_{i+h} = x_{i+h} cos(theta_i) + x_i sin(theta_i)
Array rotary_embedding(const Array& x, const Array& positions, double base = 10000.0);

/// softmax(q kᵀ · scale + mask) v with q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] (batch dimensions
/// broadcast), scale = 1/sqrt(D) by default. `mask` is additive (use -inf to hide), broadcastable to
/// [..., Tq, Tk]. `causal` hides key j from query i when j > i (top-left aligned, as torch's is_causal);
/// it cannot be combined with a mask. A fully hidden query row gives NaN.
Array scaled_dot_product_attention(const Array& q, const Array& k, const Array& v, bool causal = false,
                                   const std::optional<Array>& mask = std::nullopt,
                                   std::optional<double> scale = std::nullopt);

// ---------------------------------------------------------------------------------------------------
// Gradients (VJPs): required inputs, grad_y, then the other arguments (the convention of grad.h).
// ---------------------------------------------------------------------------------------------------

Array softmax_grad(const Array& x, const Array& grad_y, int64_t axis = -1);
Array log_softmax_grad(const Array& x, const Array& grad_y, int64_t axis = -1);

/// dweight and dbias have the normalised shape; they are returned whether or not the forward had them.
struct LayerNormGrads {
  Array dx;
  Array dweight;
  Array dbias;
};
LayerNormGrads layer_norm_grad(const Array& x, const Array& grad_y, int64_t normalized_ndim,
                               const std::optional<Array>& weight = std::nullopt, double eps = 1e-5);

struct RmsNormGrads {
  Array dx;
  Array dweight;
};
RmsNormGrads rms_norm_grad(const Array& x, const Array& grad_y, int64_t normalized_ndim,
                           const std::optional<Array>& weight = std::nullopt, double eps = 1e-6);

/// d loss / d logits; grad_loss has the loss's shape (a scalar for kMean/kSum, target's shape for kNone).
Array cross_entropy_grad(const Array& logits, const Array& target, const Array& grad_loss, int64_t ignore_index = -100,
                         double label_smoothing = 0.0, Reduction reduction = Reduction::kMean);
Array nll_loss_grad(const Array& log_probs, const Array& target, const Array& grad_loss, int64_t ignore_index = -100,
                    Reduction reduction = Reduction::kMean);
/// (d/da, d/db).
struct MseLossGrads {
  Array da;
  Array db;
};
MseLossGrads mse_loss_grad(const Array& a, const Array& b, const Array& grad_loss,
                           Reduction reduction = Reduction::kMean);
/// d/dweight: rows of grad_y added to the rows their indices name (repeats accumulate).
Array embedding_grad(const Array& weight, const Array& indices, const Array& grad_y);

/// Gradients of batch_norm_train's y, through the batch statistics: dx of x's shape, dweight and dbias
/// of [C] (returned whether or not the forward had them).
struct BatchNormGrads {
  Array dx;
  Array dweight;
  Array dbias;
};
BatchNormGrads batch_norm_train_grad(const Array& x, const Array& grad_y,
                                     const std::optional<Array>& weight = std::nullopt, double eps = 1e-5);

/// dx of rotary_embedding: each pair rotated back (the rotation is orthogonal, so its VJP is the
/// embedding at -position).
Array rotary_embedding_grad(const Array& x, const Array& positions, const Array& grad_y, double base = 10000.0);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_NN_H_
