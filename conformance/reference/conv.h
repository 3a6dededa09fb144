// Convolution and pooling of the reference, NCHW, with their gradients.
//
// Output extent of every windowed op (conv2d, max_pool2d, avg_pool2d), per spatial dimension:
//   out = floor((in + 2·padding − dilation·(kernel − 1) − 1) / stride) + 1   (no ceil mode)
// which must be >= 1, else INVALID_ARGUMENT. Input position of window element k at output o:
//   o·stride − padding + k·dilation; positions outside [0, in) are padding (zero for conv).
#ifndef OAR_CONFORMANCE_REFERENCE_CONV_H_
#define OAR_CONFORMANCE_REFERENCE_CONV_H_

#include <array>
#include <cstdint>
#include <optional>

#include "conformance/reference/array.h"

namespace oar::reference {

/// (height, width) pair of a 2-D attribute.
using Pair2 = std::array<int64_t, 2>;

/// torch.nn.functional.conv2d: x [N, C, H, W], weight [O, C/groups, kH, kW], bias [O] ->
/// [N, O, Ho, Wo]; output channel o sees input channels of group o / (O/groups). Cross-correlation (no
/// kernel flip). Throws when C or O is not divisible by groups, or shapes disagree.
Array conv2d(const Array& x, const Array& weight, const std::optional<Array>& bias = std::nullopt,
             Pair2 stride = {1, 1}, Pair2 padding = {0, 0}, Pair2 dilation = {1, 1}, int64_t groups = 1);

/// Values and argmax indices of max_pool2d.
struct MaxPoolResult {
  Array values;   // [N, C, Ho, Wo]
  Array indices;  // [N, C, Ho, Wo]: flat h * W + w of the chosen element within its input plane
};

/// torch.nn.functional.max_pool2d (return_indices=True, ceil_mode=False): padding never wins; the first
/// maximum in row-major window order wins ties; a NaN wins (the first NaN), as in torch. `stride`
/// defaults to `kernel`; padding must be at most half the effective kernel ((k−1)·d + 1) / 2.
MaxPoolResult max_pool2d(const Array& x, Pair2 kernel, std::optional<Pair2> stride = std::nullopt,
                         Pair2 padding = {0, 0}, Pair2 dilation = {1, 1});

/// torch.nn.functional.avg_pool2d (ceil_mode=False, no divisor override): the mean of the window, divided
/// by kH·kW when `count_include_pad`, else by the number of in-bounds elements. Padding <= kernel / 2.
Array avg_pool2d(const Array& x, Pair2 kernel, std::optional<Pair2> stride = std::nullopt, Pair2 padding = {0, 0},
                 bool count_include_pad = true);

/// torch.nn.functional.adaptive_avg_pool2d: x [N, C, H, W] -> [N, C, Ho, Wo]; output row i averages input
/// rows [floor(i·H/Ho), ceil((i+1)·H/Ho)), and likewise for columns. Ho, Wo, H, W >= 1.
Array adaptive_avg_pool2d(const Array& x, Pair2 output_size);

// ---------------------------------------------------------------------------------------------------
// Gradients (VJPs): required inputs, grad_y, then the other arguments (the convention of grad.h).
// ---------------------------------------------------------------------------------------------------

/// Gradients of conv2d with respect to x, weight and bias (db = sum of grad_y over N, Ho, Wo; returned
/// whether or not the forward had a bias, which does not change dx or dw).
struct Conv2dGrads {
  Array dx;
  Array dweight;
  Array dbias;
};
Conv2dGrads conv2d_grad(const Array& x, const Array& weight, const Array& grad_y, Pair2 stride = {1, 1},
                        Pair2 padding = {0, 0}, Pair2 dilation = {1, 1}, int64_t groups = 1);

/// Each grad_y element is added to the input element its window chose (the forward's index).
Array max_pool2d_grad(const Array& x, const Array& grad_y, Pair2 kernel, std::optional<Pair2> stride = std::nullopt,
                      Pair2 padding = {0, 0}, Pair2 dilation = {1, 1});
/// Each grad_y element is spread over its window's in-bounds elements, divided by the forward divisor.
Array avg_pool2d_grad(const Array& x, const Array& grad_y, Pair2 kernel, std::optional<Pair2> stride = std::nullopt,
                      Pair2 padding = {0, 0}, bool count_include_pad = true);
/// The output size is grad_y's spatial shape.
Array adaptive_avg_pool2d_grad(const Array& x, const Array& grad_y);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_CONV_H_
