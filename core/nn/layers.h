// Standard layers. Every layer takes the device, dtype and a seeded Generator for its initial weights, so
// the same seed gives the same model on every device.
#ifndef OAR_CORE_NN_LAYERS_H_
#define OAR_CORE_NN_LAYERS_H_

#include <array>
#include <functional>
#include <memory>
#include <vector>

#include "core/nn/module.h"
#include "core/ops/nn.h"

namespace oar::nn {

/// Where new parameters go.
struct Options {
  Device device = Device("cpu", 0);
  DType dtype = DType::kFloat32;
};

// ---- initialisers --------------------------------------------------------------------------------------
/// U(-b, b) with b = gain * sqrt(3 / fan_in) (Kaiming uniform; gain sqrt(2) for ReLU, 1 for linear).
Tensor KaimingUniform(const Dims& shape, int64_t fan_in, double gain, Generator& gen, const Options& o);
/// U(-b, b) with b = sqrt(6 / (fan_in + fan_out)).
Tensor XavierUniform(const Dims& shape, int64_t fan_in, int64_t fan_out, Generator& gen, const Options& o);
/// N(0, std).
Tensor Normal(const Dims& shape, double stddev, Generator& gen, const Options& o);

// ---- layers --------------------------------------------------------------------------------------------
/// y = x Wᵀ + b, W [out, in] Kaiming-uniform (gain 1), b U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public UnaryModule {
 public:
  Linear(int64_t in, int64_t out, bool bias, Generator& gen, const Options& o = {});
  Tensor Forward(const Tensor& x) override;
  Tensor& weight;
  Tensor* bias = nullptr;
};

class Conv2d : public UnaryModule {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Generator& gen, const Options& o = {},
         int64_t stride = 1, int64_t padding = 0, int64_t groups = 1, bool bias = true);
  Tensor Forward(const Tensor& x) override;
  Tensor& weight;
  Tensor* bias = nullptr;

 private:
  int64_t stride_, padding_, groups_;
};

/// Batch normalisation over N, H, W with running statistics (buffers) used in eval mode.
class BatchNorm2d : public UnaryModule {
 public:
  BatchNorm2d(int64_t channels, const Options& o = {}, double momentum = 0.1, double eps = 1e-5);
  Tensor Forward(const Tensor& x) override;
  Tensor &weight, &bias, &running_mean, &running_var;

 private:
  double momentum_, eps_;
};

class LayerNorm : public UnaryModule {
 public:
  LayerNorm(int64_t dim, const Options& o = {}, double eps = 1e-5);
  Tensor Forward(const Tensor& x) override;
  Tensor &weight, &bias;

 private:
  double eps_;
};

class RMSNorm : public UnaryModule {
 public:
  RMSNorm(int64_t dim, const Options& o = {}, double eps = 1e-6);
  Tensor Forward(const Tensor& x) override;
  Tensor& weight;

 private:
  double eps_;
};

/// Rows of a [num, dim] table N(0, 1) at int64 indices.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num, int64_t dim, Generator& gen, const Options& o = {}, double init_std = 1.0);
  Tensor Forward(const Tensor& indices) override;
  Tensor& weight;
};

/// Active in training mode only; draws its masks from its own seeded generator.
class Dropout : public UnaryModule {
 public:
  Dropout(double p, uint64_t seed);
  Tensor Forward(const Tensor& x) override;

 private:
  double p_;
  Generator gen_;
};

/// Applies its modules (or functions) in order.
class Sequential : public UnaryModule {
 public:
  Sequential& Add(std::shared_ptr<UnaryModule> module);
  /// A parameter-free step (an activation, a reshape).
  Sequential& Add(std::function<Tensor(const Tensor&)> fn);
  Tensor Forward(const Tensor& x) override;
  size_t size() const { return steps_.size(); }

 private:
  std::vector<std::function<Tensor(const Tensor&)>> steps_;
};

/// Multi-head causal self-attention with rotary position embedding and an optional KV cache for
/// generation. Input [B, T, D]; heads of D / num_heads.
class CausalSelfAttention : public Module {
 public:
  struct KvCache {
    Tensor k, v;  // [B, heads, T_so_far, head_dim]
    int64_t length() const { return k.defined() ? k.dim(2) : 0; }
  };
  CausalSelfAttention(int64_t dim, int64_t num_heads, Generator& gen, const Options& o = {});
  /// With `cache`, x holds the new positions only; their keys and values are appended to it.
  Tensor Forward(const Tensor& x, KvCache* cache = nullptr);

 private:
  int64_t dim_, heads_;
  std::shared_ptr<Linear> qkv_, out_;
};

}  // namespace oar::nn

#endif  // OAR_CORE_NN_LAYERS_H_
