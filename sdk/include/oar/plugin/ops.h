/* Generated from the op schemas (core/ops/schema*.cc) by oar_gen_op_header: do not edit.
 * The test sdk.op_header_in_sync fails when this file and the schema table differ; regenerate with
 *   build/bin/oar_gen_op_header sdk/include/oar/plugin/ops.h
 *
 * The name of every op the core dispatches (the `op` of oar_kernel_def_t and oar_kernel_call_t) and of
 * each of its attributes, so a plugin never spells them by hand. Pure C99, no includes. */
#ifndef OAR_PLUGIN_OPS_H_
#define OAR_PLUGIN_OPS_H_

/* add(a, b) -> out: a + b, broadcasting */
#define OAR_OP_ADD "add"
/* sub(a, b) -> out: a - b, broadcasting */
#define OAR_OP_SUB "sub"
/* mul(a, b) -> out: a * b, broadcasting */
#define OAR_OP_MUL "mul"
/* div(a, b) -> out: a / b, broadcasting (floating dtypes) */
#define OAR_OP_DIV "div"
/* maximum(a, b) -> out: elementwise max, broadcasting (NaN propagates) */
#define OAR_OP_MAXIMUM "maximum"
/* minimum(a, b) -> out: elementwise min, broadcasting (NaN propagates) */
#define OAR_OP_MINIMUM "minimum"
/* pow(a, b) -> out: a ** b, broadcasting */
#define OAR_OP_POW "pow"
/* eq(a, b) -> out: a == b */
#define OAR_OP_EQ "eq"
/* ne(a, b) -> out: a != b */
#define OAR_OP_NE "ne"
/* lt(a, b) -> out: a < b */
#define OAR_OP_LT "lt"
/* le(a, b) -> out: a <= b */
#define OAR_OP_LE "le"
/* gt(a, b) -> out: a > b */
#define OAR_OP_GT "gt"
/* ge(a, b) -> out: a >= b */
#define OAR_OP_GE "ge"
/* logical_and(a, b) -> out: a && b */
#define OAR_OP_LOGICAL_AND "logical_and"
/* logical_or(a, b) -> out: a || b */
#define OAR_OP_LOGICAL_OR "logical_or"
/* logical_not(x) -> out: !x */
#define OAR_OP_LOGICAL_NOT "logical_not"
/* isnan(x) -> out: x is NaN */
#define OAR_OP_ISNAN "isnan"
/* isinf(x) -> out: x is +-inf */
#define OAR_OP_ISINF "isinf"
/* where(cond, a, b) -> out: cond ? a : b, broadcasting */
#define OAR_OP_WHERE "where"
/* neg(x) -> out: -x */
#define OAR_OP_NEG "neg"
/* exp(x) -> out: e^x */
#define OAR_OP_EXP "exp"
/* relu(x) -> out: max(x, 0) */
#define OAR_OP_RELU "relu"
/* abs(x) -> out: |x| */
#define OAR_OP_ABS "abs"
/* sign(x) -> out: -1, 0 or 1 (NaN stays NaN) */
#define OAR_OP_SIGN "sign"
/* log(x) -> out: natural logarithm */
#define OAR_OP_LOG "log"
/* log1p(x) -> out: log(1 + x), accurate near 0 */
#define OAR_OP_LOG1P "log1p"
/* expm1(x) -> out: e^x - 1, accurate near 0 */
#define OAR_OP_EXPM1 "expm1"
/* sqrt(x) -> out: square root */
#define OAR_OP_SQRT "sqrt"
/* rsqrt(x) -> out: 1 / sqrt(x) */
#define OAR_OP_RSQRT "rsqrt"
/* sin(x) -> out: sine */
#define OAR_OP_SIN "sin"
/* cos(x) -> out: cosine */
#define OAR_OP_COS "cos"
/* tanh(x) -> out: hyperbolic tangent */
#define OAR_OP_TANH "tanh"
/* sigmoid(x) -> out: 1 / (1 + e^-x) */
#define OAR_OP_SIGMOID "sigmoid"
/* erf(x) -> out: error function */
#define OAR_OP_ERF "erf"
/* reciprocal(x) -> out: 1 / x */
#define OAR_OP_RECIPROCAL "reciprocal"
/* matmul(a, b) -> out: matrix product with NumPy semantics: batched, broadcast batch dims, 1-D operands promoted */
#define OAR_OP_MATMUL "matmul"
/* sum(x) -> out: sum over axes (16-bit floats accumulate in float32) */
#define OAR_OP_SUM "sum"
#define OAR_OP_SUM_ATTR_AXES "axes"
#define OAR_OP_SUM_ATTR_KEEPDIM "keepdim"
/* mean(x) -> out: mean over axes */
#define OAR_OP_MEAN "mean"
#define OAR_OP_MEAN_ATTR_AXES "axes"
#define OAR_OP_MEAN_ATTR_KEEPDIM "keepdim"
/* max(x) -> out: maximum over axes (NaN propagates) */
#define OAR_OP_MAX "max"
#define OAR_OP_MAX_ATTR_AXES "axes"
#define OAR_OP_MAX_ATTR_KEEPDIM "keepdim"
/* min(x) -> out: minimum over axes (NaN propagates) */
#define OAR_OP_MIN "min"
#define OAR_OP_MIN_ATTR_AXES "axes"
#define OAR_OP_MIN_ATTR_KEEPDIM "keepdim"
/* prod(x) -> out: product over axes */
#define OAR_OP_PROD "prod"
#define OAR_OP_PROD_ATTR_AXES "axes"
#define OAR_OP_PROD_ATTR_KEEPDIM "keepdim"
/* argmax(x) -> out: index of the maximum along an axis (first on ties) */
#define OAR_OP_ARGMAX "argmax"
#define OAR_OP_ARGMAX_ATTR_AXIS "axis"
#define OAR_OP_ARGMAX_ATTR_KEEPDIM "keepdim"
/* argmin(x) -> out: index of the minimum along an axis (first on ties) */
#define OAR_OP_ARGMIN "argmin"
#define OAR_OP_ARGMIN_ATTR_AXIS "axis"
#define OAR_OP_ARGMIN_ATTR_KEEPDIM "keepdim"
/* softmax(x) -> out: exp(x) / sum(exp(x)) along an axis, max-subtracted */
#define OAR_OP_SOFTMAX "softmax"
#define OAR_OP_SOFTMAX_ATTR_AXIS "axis"
/* log_softmax(x) -> out: x - logsumexp(x) along an axis */
#define OAR_OP_LOG_SOFTMAX "log_softmax"
#define OAR_OP_LOG_SOFTMAX_ATTR_AXIS "axis"
/* cast(x) -> out: convert dtype (float->int truncates toward zero and saturates; NaN->0; nonzero->true) */
#define OAR_OP_CAST "cast"
#define OAR_OP_CAST_ATTR_DTYPE "dtype"
/* fill() -> out: a tensor filled with one value */
#define OAR_OP_FILL "fill"
#define OAR_OP_FILL_ATTR_VALUE "value"
#define OAR_OP_FILL_ATTR_SHAPE "shape"
#define OAR_OP_FILL_ATTR_DTYPE "dtype"
/* copy(src) -> dst: copy elements into a (possibly strided) destination of the same shape and dtype */
#define OAR_OP_COPY "copy"
/* view(x) -> out: the same elements with another shape */
#define OAR_OP_VIEW "view"
#define OAR_OP_VIEW_ATTR_SHAPE "shape"
/* permute(x) -> out: reorder dimensions */
#define OAR_OP_PERMUTE "permute"
#define OAR_OP_PERMUTE_ATTR_DIMS "dims"
/* slice(x) -> out: every step-th element of [start, end) along dim */
#define OAR_OP_SLICE "slice"
#define OAR_OP_SLICE_ATTR_DIM "dim"
#define OAR_OP_SLICE_ATTR_START "start"
#define OAR_OP_SLICE_ATTR_END "end"
#define OAR_OP_SLICE_ATTR_STEP "step"
/* expand(x) -> out: broadcast to a shape (stride 0) */
#define OAR_OP_EXPAND "expand"
#define OAR_OP_EXPAND_ATTR_SHAPE "shape"
/* squeeze(x) -> out: drop a dimension of extent 1 */
#define OAR_OP_SQUEEZE "squeeze"
#define OAR_OP_SQUEEZE_ATTR_DIM "dim"
/* unsqueeze(x) -> out: insert a dimension of extent 1 */
#define OAR_OP_UNSQUEEZE "unsqueeze"
#define OAR_OP_UNSQUEEZE_ATTR_DIM "dim"
/* slice_scatter(src) -> out: zeros of `shape` with src written into the slice (the VJP of slice) */
#define OAR_OP_SLICE_SCATTER "slice_scatter"
#define OAR_OP_SLICE_SCATTER_ATTR_SHAPE "shape"
#define OAR_OP_SLICE_SCATTER_ATTR_DIM "dim"
#define OAR_OP_SLICE_SCATTER_ATTR_START "start"
#define OAR_OP_SLICE_SCATTER_ATTR_END "end"
#define OAR_OP_SLICE_SCATTER_ATTR_STEP "step"
/* clone(x) -> out: a contiguous copy (runs the copy kernel; recorded so gradients flow through contiguous()) */
#define OAR_OP_CLONE "clone"
/* conv2d(x, w) -> out: 2-D convolution (NCHW, no bias) */
#define OAR_OP_CONV2D "conv2d"
#define OAR_OP_CONV2D_ATTR_STRIDE "stride"
#define OAR_OP_CONV2D_ATTR_PADDING "padding"
#define OAR_OP_CONV2D_ATTR_DILATION "dilation"
#define OAR_OP_CONV2D_ATTR_GROUPS "groups"
/* conv2d_grad_input(grad_out, w) -> grad_x: gradient of conv2d with respect to its input */
#define OAR_OP_CONV2D_GRAD_INPUT "conv2d_grad_input"
#define OAR_OP_CONV2D_GRAD_INPUT_ATTR_STRIDE "stride"
#define OAR_OP_CONV2D_GRAD_INPUT_ATTR_PADDING "padding"
#define OAR_OP_CONV2D_GRAD_INPUT_ATTR_DILATION "dilation"
#define OAR_OP_CONV2D_GRAD_INPUT_ATTR_GROUPS "groups"
#define OAR_OP_CONV2D_GRAD_INPUT_ATTR_INPUT_SHAPE "input_shape"
/* conv2d_grad_weight(grad_out, x) -> grad_w: gradient of conv2d with respect to its weight */
#define OAR_OP_CONV2D_GRAD_WEIGHT "conv2d_grad_weight"
#define OAR_OP_CONV2D_GRAD_WEIGHT_ATTR_STRIDE "stride"
#define OAR_OP_CONV2D_GRAD_WEIGHT_ATTR_PADDING "padding"
#define OAR_OP_CONV2D_GRAD_WEIGHT_ATTR_DILATION "dilation"
#define OAR_OP_CONV2D_GRAD_WEIGHT_ATTR_GROUPS "groups"
#define OAR_OP_CONV2D_GRAD_WEIGHT_ATTR_WEIGHT_SHAPE "weight_shape"
/* max_pool2d(x) -> y, indices: max pooling with the flat index of each maximum */
#define OAR_OP_MAX_POOL2D "max_pool2d"
#define OAR_OP_MAX_POOL2D_ATTR_KERNEL "kernel"
#define OAR_OP_MAX_POOL2D_ATTR_STRIDE "stride"
#define OAR_OP_MAX_POOL2D_ATTR_PADDING "padding"
#define OAR_OP_MAX_POOL2D_ATTR_DILATION "dilation"
/* avg_pool2d(x) -> y: average pooling */
#define OAR_OP_AVG_POOL2D "avg_pool2d"
#define OAR_OP_AVG_POOL2D_ATTR_KERNEL "kernel"
#define OAR_OP_AVG_POOL2D_ATTR_STRIDE "stride"
#define OAR_OP_AVG_POOL2D_ATTR_PADDING "padding"
#define OAR_OP_AVG_POOL2D_ATTR_COUNT_INCLUDE_PAD "count_include_pad"
/* avg_pool2d_grad(grad_y) -> grad_x: gradient of avg_pool2d */
#define OAR_OP_AVG_POOL2D_GRAD "avg_pool2d_grad"
#define OAR_OP_AVG_POOL2D_GRAD_ATTR_KERNEL "kernel"
#define OAR_OP_AVG_POOL2D_GRAD_ATTR_STRIDE "stride"
#define OAR_OP_AVG_POOL2D_GRAD_ATTR_PADDING "padding"
#define OAR_OP_AVG_POOL2D_GRAD_ATTR_COUNT_INCLUDE_PAD "count_include_pad"
#define OAR_OP_AVG_POOL2D_GRAD_ATTR_INPUT_SHAPE "input_shape"
/* adaptive_avg_pool2d(x) -> y: average pooling to a fixed output size */
#define OAR_OP_ADAPTIVE_AVG_POOL2D "adaptive_avg_pool2d"
#define OAR_OP_ADAPTIVE_AVG_POOL2D_ATTR_OUTPUT_SIZE "output_size"
/* adaptive_avg_pool2d_grad(grad_y) -> grad_x: gradient of adaptive_avg_pool2d */
#define OAR_OP_ADAPTIVE_AVG_POOL2D_GRAD "adaptive_avg_pool2d_grad"
#define OAR_OP_ADAPTIVE_AVG_POOL2D_GRAD_ATTR_OUTPUT_SIZE "output_size"
#define OAR_OP_ADAPTIVE_AVG_POOL2D_GRAD_ATTR_INPUT_SHAPE "input_shape"
/* layer_norm(x, weight, bias) -> y, mean, rstd: normalise over the trailing dims from axis, then scale and shift */
#define OAR_OP_LAYER_NORM "layer_norm"
#define OAR_OP_LAYER_NORM_ATTR_AXIS "axis"
#define OAR_OP_LAYER_NORM_ATTR_EPS "eps"
/* concat(tensors...) -> out: join tensors along an axis */
#define OAR_OP_CONCAT "concat"
#define OAR_OP_CONCAT_ATTR_AXIS "axis"
/* gather(x, index) -> out: out[..i..] = x[..index[..i..]..] along axis */
#define OAR_OP_GATHER "gather"
#define OAR_OP_GATHER_ATTR_AXIS "axis"
/* index_select(x, index) -> out: the entries of x at a 1-D list of indices along axis */
#define OAR_OP_INDEX_SELECT "index_select"
#define OAR_OP_INDEX_SELECT_ATTR_AXIS "axis"
/* scatter_add(x, index, src) -> out: x with src added at index along axis (deterministic order) */
#define OAR_OP_SCATTER_ADD "scatter_add"
#define OAR_OP_SCATTER_ADD_ATTR_AXIS "axis"
/* topk(x) -> values, indices: the k largest (or smallest) values along an axis, sorted, with their indices */
#define OAR_OP_TOPK "topk"
#define OAR_OP_TOPK_ATTR_K "k"
#define OAR_OP_TOPK_ATTR_AXIS "axis"
#define OAR_OP_TOPK_ATTR_LARGEST "largest"
/* pad(x) -> out: constant padding before and after each dimension */
#define OAR_OP_PAD "pad"
#define OAR_OP_PAD_ATTR_PADS "pads"
#define OAR_OP_PAD_ATTR_VALUE "value"
/* fused_linear(x, w, bias) -> out: act(x @ w + bias): x [..., K], w [K, N], bias [N]; activation 0 none, 1 relu, 2 gelu (erf), 3 tanh */
#define OAR_OP_FUSED_LINEAR "fused_linear"
#define OAR_OP_FUSED_LINEAR_ATTR_ACTIVATION "activation"
/* fused_rotary(x, cos, sin) -> out: rotary position embedding with the rows given: x [..., 2h], cos and sin broadcasting against [..., h]; out = concat(x1 * cos - x2 * sin, x2 * cos + x1 * sin) (x1, x2 the halves of x), each operation rounded to the dtype */
#define OAR_OP_FUSED_ROTARY "fused_rotary"
/* fused_rms_scale(x, mean_square, eps, weight) -> out: the end of rms_norm: x * rsqrt(mean_square + eps) * weight, mean_square, eps and weight broadcasting against x, each operation rounded to the dtype (rsqrt as 1 / sqrt) */
#define OAR_OP_FUSED_RMS_SCALE "fused_rms_scale"
/* relu_grad(grad, x) -> grad_x: relu's gradient: grad * (x > 0 ? 1 : 0) per element (grad * cast(gt(x, 0))), grad and x of one shape */
#define OAR_OP_RELU_GRAD "relu_grad"
/* batch_norm_train(x, weight, bias) -> y, mean, var: batch normalisation with batch statistics over every dim but 1 of x [N, C] or [N, C, H, W]: mean = mean(x), var = mean((x - mean)^2) (population), y = ((x - mean) * (rsqrt(var + eps) * weight)) + bias, each operation rounded to the dtype and summed as `mean` sums; mean and var in the keepdim shape carry no gradient */
#define OAR_OP_BATCH_NORM_TRAIN "batch_norm_train"
#define OAR_OP_BATCH_NORM_TRAIN_ATTR_EPS "eps"
/* batch_norm_train_grad(grad, x, weight) -> grad_x, grad_weight, grad_bias: the gradients of batch_norm_train's y (grad) with respect to x, weight and bias, the statistics recomputed from x: the VJP chain of the composed ops, each operation rounded to the dtype, the contributions added in the order autograd adds them */
#define OAR_OP_BATCH_NORM_TRAIN_GRAD "batch_norm_train_grad"
#define OAR_OP_BATCH_NORM_TRAIN_GRAD_ATTR_EPS "eps"
/* fused_adam(param, grad, m, v, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction1, bias_correction2, eps, lr) -> param_out, m_out, v_out: Adam's update of one parameter, elementwise: m_out = m * beta1 + grad * one_minus_beta1, v_out = v * beta2 + (grad * grad) * one_minus_beta2, param_out = value - ((m_out / bias_correction1) / (sqrt(v_out / bias_correction2) + eps)) * lr with value = param * decay (with_decay 1, AdamW) or param (with_decay 0, Adam: decay is not read), each operation rounded to the dtype; the scalars are 0-d */
#define OAR_OP_FUSED_ADAM "fused_adam"
#define OAR_OP_FUSED_ADAM_ATTR_WITH_DECAY "with_decay"
/* fused_tanh_grad(grad, y, one) -> grad_x: tanh's backward with y = tanh(x): grad * (-(y * y) + one), one a 0-d 1, each operation rounded to the dtype (the ops tanh's VJP records: mul, neg, add, mul) */
#define OAR_OP_FUSED_TANH_GRAD "fused_tanh_grad"
/* fused_sigmoid_grad(grad, s, one) -> grad_x: sigmoid's backward with s = sigmoid(x): (grad * s) * (-s + one), one a 0-d 1, each operation rounded to the dtype (the ops sigmoid's VJP records: mul, neg, add, mul) */
#define OAR_OP_FUSED_SIGMOID_GRAD "fused_sigmoid_grad"
/* fused_log_softmax(x) -> log_softmax, softmax: log_softmax(x, axis) and softmax(x, axis), bitwise those two ops' results: the maximum, the exponentials of the differences and their sum computed once where the two kernels compute them alike */
#define OAR_OP_FUSED_LOG_SOFTMAX "fused_log_softmax"
#define OAR_OP_FUSED_LOG_SOFTMAX_ATTR_AXIS "axis"
/* fused_masked_softmax(x, scale, mask, fill) -> out: softmax(where(mask, x * scale, fill)) over x's last axis, mask (bool) broadcasting against x, scale and fill 0-d: bitwise the mul, where and softmax kernels */
#define OAR_OP_FUSED_MASKED_SOFTMAX "fused_masked_softmax"
/* fused_masked_softmax_grad(grad, y, mask, zero, scale) -> grad_x: fused_masked_softmax's backward as the VJPs record it, y its result: where(mask, y * (grad - sum(grad * y, last axis, keepdim)), zero) * scale; bitwise the mul, sum, sub, mul, where and mul kernels */
#define OAR_OP_FUSED_MASKED_SOFTMAX_GRAD "fused_masked_softmax_grad"
/* fused_rotary_grad(grad, cos, sin) -> grad_x: the rotary rotation's backward: grad [..., 2h], cos and sin broadcasting against [..., h]; grad_x = concat(0 + (g2 * sin + g1 * cos), (g2 * cos + (-g1) * sin) + 0) (g1, g2 the halves of grad), each operation rounded to the dtype in this order (the ops the VJP records: slice, mul, neg, add, slice_scatter, add) */
#define OAR_OP_FUSED_ROTARY_GRAD "fused_rotary_grad"

/* Number of ops above. */
#define OAR_OP_COUNT 84

#endif /* OAR_PLUGIN_OPS_H_ */
