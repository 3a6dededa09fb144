#include "core/nn/layers.h"

#include <cmath>

namespace oar::nn {

Tensor KaimingUniform(const Dims& shape, int64_t fan_in, double gain, Generator& gen, const Options& o) {
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(std::max<int64_t>(fan_in, 1)));
  return rand(shape, gen, -bound, bound, o.dtype, o.device);
}

Tensor XavierUniform(const Dims& shape, int64_t fan_in, int64_t fan_out, Generator& gen, const Options& o) {
  const double bound = std::sqrt(6.0 / static_cast<double>(std::max<int64_t>(fan_in + fan_out, 1)));
  return rand(shape, gen, -bound, bound, o.dtype, o.device);
}

Tensor Normal(const Dims& shape, double stddev, Generator& gen, const Options& o) {
  return randn(shape, gen, 0, stddev, o.dtype, o.device);
}

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator& gen, const Options& o)
    : weight(RegisterParameter("weight", KaimingUniform({out, in}, in, 1.0, gen, o))) {
  if (with_bias) {
    const double b = 1.0 / std::sqrt(static_cast<double>(in));
    bias = &RegisterParameter("bias", rand({out}, gen, -b, b, o.dtype, o.device));
  }
}

Tensor Linear::Forward(const Tensor& x) { return linear(x, weight, bias ? *bias : Tensor()); }

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Generator& gen, const Options& o,
               int64_t stride, int64_t padding, int64_t groups, bool with_bias)
    : weight(RegisterParameter("weight", KaimingUniform({out_channels, in_channels / groups, kernel, kernel},
                                                        in_channels / groups * kernel * kernel, std::sqrt(2.0), gen, o))),
      stride_(stride),
      padding_(padding),
      groups_(groups) {
  OAR_CHECK_ARG(in_channels % groups == 0 && out_channels % groups == 0,
                "Conv2d: channels {} -> {} are not divisible by groups {}", in_channels, out_channels, groups);
  if (with_bias) bias = &RegisterParameter("bias", zeros({out_channels}, o.dtype, o.device));
}

Tensor Conv2d::Forward(const Tensor& x) {
  return conv2d(x, weight, bias ? *bias : Tensor(), {stride_, stride_}, {padding_, padding_}, {1, 1}, groups_);
}

BatchNorm2d::BatchNorm2d(int64_t channels, const Options& o, double momentum, double eps)
    : weight(RegisterParameter("weight", ones({channels}, o.dtype, o.device))),
      bias(RegisterParameter("bias", zeros({channels}, o.dtype, o.device))),
      running_mean(RegisterBuffer("running_mean", zeros({channels}, o.dtype, o.device))),
      running_var(RegisterBuffer("running_var", ones({channels}, o.dtype, o.device))),
      momentum_(momentum),
      eps_(eps) {}

Tensor BatchNorm2d::Forward(const Tensor& x) {
  return batch_norm(x, running_mean, running_var, weight, bias, training(), momentum_, eps_);
}

LayerNorm::LayerNorm(int64_t dim, const Options& o, double eps)
    : weight(RegisterParameter("weight", ones({dim}, o.dtype, o.device))),
      bias(RegisterParameter("bias", zeros({dim}, o.dtype, o.device))),
      eps_(eps) {}

Tensor LayerNorm::Forward(const Tensor& x) { return layer_norm(x, 1, weight, bias, eps_); }

RMSNorm::RMSNorm(int64_t dim, const Options& o, double eps)
    : weight(RegisterParameter("weight", ones({dim}, o.dtype, o.device))), eps_(eps) {}

Tensor RMSNorm::Forward(const Tensor& x) { return rms_norm(x, 1, weight, eps_); }

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen, const Options& o, double init_std)
    : weight(RegisterParameter("weight", Normal({num, dim}, init_std, gen, o))) {}

Tensor Embedding::Forward(const Tensor& indices) { return embedding(weight, indices); }

Dropout::Dropout(double p, uint64_t seed) : p_(p), gen_(seed) {
  OAR_CHECK_ARG(p >= 0 && p < 1, "Dropout: p={} is outside [0, 1)", p);
}

Tensor Dropout::Forward(const Tensor& x) { return dropout(x, p_, gen_, training()); }

Sequential& Sequential::Add(std::shared_ptr<UnaryModule> module) {
  RegisterModule(std::to_string(steps_.size()), module);
  steps_.push_back([module](const Tensor& x) { return module->Forward(x); });
  return *this;
}

Sequential& Sequential::Add(std::function<Tensor(const Tensor&)> fn) {
  steps_.push_back(std::move(fn));
  return *this;
}

Tensor Sequential::Forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& step : steps_) y = step(y);
  return y;
}

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t num_heads, Generator& gen, const Options& o)
    : dim_(dim), heads_(num_heads) {
  OAR_CHECK_ARG(num_heads > 0 && dim % num_heads == 0 && (dim / num_heads) % 2 == 0,
                "CausalSelfAttention: dim {} must split into {} heads of even size", dim, num_heads);
  qkv_ = RegisterModule("qkv", std::make_shared<Linear>(dim, 3 * dim, false, gen, o));
  out_ = RegisterModule("out", std::make_shared<Linear>(dim, dim, false, gen, o));
}

Tensor CausalSelfAttention::Forward(const Tensor& x, KvCache* cache) {
  OAR_CHECK_ARG(x.rank() == 3 && x.dim(2) == dim_, "CausalSelfAttention: expected [B, T, {}], got {}", dim_,
                x.shape().ToString());
  const int64_t b = x.dim(0), t = x.dim(1), hd = dim_ / heads_;
  const int64_t offset = cache ? cache->length() : 0;
  // [B, T, 3D] -> three [B, H, T, hd]
  const Tensor qkv = qkv_->Forward(x).reshape({b, t, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
  Tensor q = rotary_embedding(qkv.slice(0, 0, 1).squeeze(0), offset);
  Tensor k = rotary_embedding(qkv.slice(0, 1, 2).squeeze(0), offset);
  Tensor v = qkv.slice(0, 2, 3).squeeze(0);
  if (cache != nullptr) {
    if (cache->k.defined()) {
      const Tensor ks[] = {cache->k, k};
      const Tensor vs[] = {cache->v, v};
      k = concat(ks, 2);
      v = concat(vs, 2);
    }
    cache->k = k;
    cache->v = v;
  }
  const Tensor y = scaled_dot_product_attention(q, k, v, /*causal=*/true);  // [B, H, T, hd]
  return out_->Forward(y.permute({0, 2, 1, 3}).reshape({b, t, dim_}));
}

}  // namespace oar::nn
