// The three example models, their generated datasets and checkpoints (see models.h).
#include "examples/models.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numbers>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/base/error.h"
#include "core/distributed/eager.h"
#include "core/distributed/group.h"
#include "core/distributed/pipeline.h"
#include "core/distributed/process_group.h"
#include "core/nn/layers.h"
#include "core/ops/trace.h"
#include "core/optim/optim.h"
#include "examples/corpus.h"

namespace oar::examples {
namespace {

using nn::Options;

Tensor Labels(const std::vector<int64_t>& y, Device d) {
  return FromVector<int64_t>(y, {static_cast<int64_t>(y.size())}, d);
}

double Accuracy(const Tensor& logits, const std::vector<int64_t>& y) {
  const std::vector<int64_t> pred = argmax(logits, 1).to(Device("cpu")).ToVector<int64_t>();
  int64_t right = 0;
  for (size_t i = 0; i < y.size(); ++i) right += pred[i] == y[i];
  return static_cast<double>(right) / static_cast<double>(y.size());
}

jit::DimSpec BatchDim(int64_t batch) { return batch > 0 ? jit::DimSpec::Static(batch) : jit::DimSpec::Symbol("B"); }

// Parameters and buffers, by their state-dict names.
std::vector<jit::StateSlot> StateOf(nn::Module& m) {
  std::vector<jit::StateSlot> slots;
  for (auto& [name, t] : m.NamedParameters()) slots.push_back({name, t});
  for (auto& [name, t] : m.NamedBuffers()) slots.push_back({name, t});
  return slots;
}

// The eval-mode, no-grad forward of a one-input module.
jit::Function EvalForward(nn::Module& m, std::function<Tensor(const Tensor&)> forward) {
  return [&m, forward = std::move(forward)](std::span<const Tensor> in) {
    m.Eval();
    NoGradGuard no_grad;
    return std::vector<Tensor>{forward(in[0])};
  };
}

// ---- MLP on two spirals ---------------------------------------------------------------------------------
class SpiralMlp : public nn::UnaryModule {
 public:
  SpiralMlp(int64_t hidden, Generator& gen, const Options& o) {
    fc1_ = RegisterModule("fc1", std::make_shared<nn::Linear>(2, hidden, true, gen, o));
    fc2_ = RegisterModule("fc2", std::make_shared<nn::Linear>(hidden, hidden, true, gen, o));
    fc3_ = RegisterModule("fc3", std::make_shared<nn::Linear>(hidden, hidden, true, gen, o));
    out_ = RegisterModule("out", std::make_shared<nn::Linear>(hidden, 2, true, gen, o));
  }
  Tensor Forward(const Tensor& x) override {
    Tensor h = tanh(fc1_->Forward(x));
    h = tanh(fc2_->Forward(h));
    h = tanh(fc3_->Forward(h));
    return out_->Forward(h);
  }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_, fc3_, out_;
};

class MlpExample : public Example {
 public:
  static constexpr int64_t kHidden = 64, kTrain = 1000, kTest = 500;
  static constexpr double kLr = 1e-2, kTurns = 1.5, kNoise = 0.03;

  MlpExample(Device d, uint64_t seed) : Example(d, seed) {
    Generator gen(seed);
    model_ = std::make_unique<SpiralMlp>(kHidden, gen, Options{d, DType::kFloat32});
    Generator data(seed ^ 0x5eed0001ull);
    MakeSpirals(data, kTrain, train_x_, train_y_);
    MakeSpirals(data, kTest, test_x_, test_y_);
    opt_ = std::make_unique<optim::Adam>(model_->Parameters(), kLr);
  }
  std::string kind() const override { return "mlp"; }
  int64_t default_steps() const override { return 300; }
  std::string metric_name() const override { return "accuracy"; }
  nn::Module& module() override { return *model_; }
  std::vector<Tensor> Batch(int64_t step, int64_t total) override {
    opt_->set_lr(optim::WarmupCosine(step, kLr, 0, total, kLr * 0.05));
    return {train_x_, train_yt_};  // full batch
  }
  std::vector<Tensor> TrainOn(std::span<const Tensor> batch, const optim::Optimizer::ScalarFn& scalar) override {
    model_->Train();
    const Tensor loss = cross_entropy(model_->Forward(batch[0]), batch[1]);
    opt_->ZeroGrad();
    loss.backward();
    opt_->ApplyStep(scalar);
    return {loss};
  }
  optim::Optimizer& optimizer() override { return *opt_; }
  double Evaluate() override {
    model_->Eval();
    NoGradGuard no_grad;
    return Accuracy(model_->Forward(test_x_), test_y_);
  }
  InferenceForward ExportForward(int64_t batch, int64_t) override {
    return {{{"x", DType::kFloat32, {BatchDim(batch), jit::DimSpec::Static(2)}}}, {"logits"},
            EvalForward(*model_, [this](const Tensor& x) { return model_->Forward(x); }), StateOf(*model_)};
  }
  std::string ConfigJson() const override {
    return nlohmann::json{{"hidden", kHidden}, {"layers", 3}, {"activation", "tanh"}, {"train", kTrain},
                          {"test", kTest}, {"lr", kLr}, {"turns", kTurns}, {"noise", kNoise}}
        .dump();
  }

 private:
  void MakeSpirals(Generator& gen, int64_t n, Tensor& x, std::vector<int64_t>& y) {
    std::vector<float> xs;
    y.clear();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = i % 2;
      const double t = std::sqrt(gen.NextDouble());  // uniform density along the arm's area
      const double a = t * kTurns * 2 * std::numbers::pi + static_cast<double>(c) * std::numbers::pi;
      xs.push_back(static_cast<float>(t * std::cos(a) + kNoise * gen.NextNormal()));
      xs.push_back(static_cast<float>(t * std::sin(a) + kNoise * gen.NextNormal()));
      y.push_back(c);
    }
    x = FromVector<float>(xs, {n, 2}, device_);
    if (&y == &train_y_) train_yt_ = Labels(y, device_);
  }

  std::unique_ptr<SpiralMlp> model_;
  std::unique_ptr<optim::Adam> opt_;
  Tensor train_x_, test_x_, train_yt_;
  std::vector<int64_t> train_y_, test_y_;
};

// ---- CNN on generated shapes ----------------------------------------------------------------------------
class LeNet : public nn::UnaryModule {
 public:
  LeNet(Generator& gen, const Options& o) {
    c1_ = RegisterModule("conv1", std::make_shared<nn::Conv2d>(1, 8, 5, gen, o, 1, 2));
    b1_ = RegisterModule("bn1", std::make_shared<nn::BatchNorm2d>(8, o));
    c2_ = RegisterModule("conv2", std::make_shared<nn::Conv2d>(8, 16, 3, gen, o, 1, 1));
    b2_ = RegisterModule("bn2", std::make_shared<nn::BatchNorm2d>(16, o));
    c3_ = RegisterModule("conv3", std::make_shared<nn::Conv2d>(16, 16, 3, gen, o, 1, 1));
    b3_ = RegisterModule("bn3", std::make_shared<nn::BatchNorm2d>(16, o));
    fc_ = RegisterModule("fc", std::make_shared<nn::Linear>(16 * 4 * 4, 3, true, gen, o));
  }
  Tensor Forward(const Tensor& x) override {
    Tensor h = max_pool2d(relu(b1_->Forward(c1_->Forward(x))), {2, 2}, {2, 2});   // 16x16
    h = max_pool2d(relu(b2_->Forward(c2_->Forward(h))), {2, 2}, {2, 2});          // 8x8
    h = max_pool2d(relu(b3_->Forward(c3_->Forward(h))), {2, 2}, {2, 2});          // 4x4
    return fc_->Forward(flatten(h, 1));
  }

 private:
  std::shared_ptr<nn::Conv2d> c1_, c2_, c3_;
  std::shared_ptr<nn::BatchNorm2d> b1_, b2_, b3_;
  std::shared_ptr<nn::Linear> fc_;
};

class CnnExample : public Example {
 public:
  static constexpr int64_t kSize = 32, kTrain = 1200, kTest = 300, kBatch = 32;
  static constexpr double kLr = 3e-3, kNoise = 0.2;

  CnnExample(Device d, uint64_t seed) : Example(d, seed), batch_gen_(seed ^ 0xba7c4ull) {
    Generator gen(seed);
    model_ = std::make_unique<LeNet>(gen, Options{d, DType::kFloat32});
    Generator data(seed ^ 0x5eed0002ull);
    MakeShapes(data, kTrain, train_x_, train_y_);
    MakeShapes(data, kTest, test_x_, test_y_);
    opt_ = std::make_unique<optim::Adam>(model_->Parameters(), kLr);
  }
  std::string kind() const override { return "cnn"; }
  int64_t default_steps() const override { return 400; }
  std::string metric_name() const override { return "accuracy"; }
  nn::Module& module() override { return *model_; }
  std::vector<Tensor> Batch(int64_t step, int64_t total) override {
    opt_->set_lr(optim::WarmupCosine(step, kLr, std::min<int64_t>(10, total / 10), total, kLr * 0.05));
    constexpr int64_t px = kSize * kSize;
    std::vector<float> xb(kBatch * px);
    std::vector<int64_t> yb(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) {
      const int64_t j = static_cast<int64_t>(batch_gen_.NextU64() % kTrain);
      std::copy_n(train_x_.begin() + j * px, px, xb.begin() + i * px);
      yb[i] = train_y_[j];
    }
    return {FromVector<float>(xb, {kBatch, 1, kSize, kSize}, device_), Labels(yb, device_)};
  }
  std::vector<Tensor> TrainOn(std::span<const Tensor> batch, const optim::Optimizer::ScalarFn& scalar) override {
    model_->Train();
    const Tensor loss = cross_entropy(model_->Forward(batch[0]), batch[1]);
    opt_->ZeroGrad();
    loss.backward();
    opt_->ApplyStep(scalar);
    return {loss};
  }
  optim::Optimizer& optimizer() override { return *opt_; }
  double Evaluate() override {
    model_->Eval();
    NoGradGuard no_grad;
    const Tensor x = FromVector<float>(test_x_, {kTest, 1, kSize, kSize}, device_);
    return Accuracy(model_->Forward(x), test_y_);
  }
  InferenceForward ExportForward(int64_t batch, int64_t) override {
    const jit::DimSpec size = jit::DimSpec::Static(kSize);
    return {{{"x", DType::kFloat32, {BatchDim(batch), jit::DimSpec::Static(1), size, size}}}, {"logits"},
            EvalForward(*model_, [this](const Tensor& x) { return model_->Forward(x); }), StateOf(*model_)};
  }
  std::string ConfigJson() const override {
    return nlohmann::json{{"image", kSize}, {"classes", {"circle", "square", "triangle"}}, {"channels", {8, 16, 16}},
                          {"train", kTrain}, {"test", kTest}, {"batch", kBatch}, {"lr", kLr}, {"noise", kNoise}}
        .dump();
  }

 private:
  static void MakeShapes(Generator& gen, int64_t n, std::vector<float>& x, std::vector<int64_t>& y) {
    x.assign(n * kSize * kSize, 0.0f);
    y.clear();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = i % 3;
      const double s = 5 + 5 * gen.NextDouble();  // half-size 5..10 pixels
      const double cx = s + 1 + (kSize - 2 * s - 3) * gen.NextDouble();
      const double cy = s + 1 + (kSize - 2 * s - 3) * gen.NextDouble();
      const double ink = 0.7 + 0.3 * gen.NextDouble();
      float* img = x.data() + i * kSize * kSize;
      for (int64_t r = 0; r < kSize; ++r) {
        for (int64_t q = 0; q < kSize; ++q) {
          const double dx = static_cast<double>(q) + 0.5 - cx, dy = static_cast<double>(r) + 0.5 - cy;
          bool inside = false;
          if (c == 0) inside = dx * dx + dy * dy <= s * s;
          if (c == 1) inside = std::abs(dx) <= 0.85 * s && std::abs(dy) <= 0.85 * s;
          if (c == 2) inside = dy >= -s && dy <= s && std::abs(dx) <= (dy + s) / 2;
          img[r * kSize + q] = static_cast<float>((inside ? ink : 0.0) + kNoise * gen.NextNormal());
        }
      }
      y.push_back(c);
    }
  }

  std::unique_ptr<LeNet> model_;
  std::unique_ptr<optim::Adam> opt_;
  Generator batch_gen_;
  std::vector<float> train_x_, test_x_;
  std::vector<int64_t> train_y_, test_y_;
};

// ---- tiny Llama ----------------------------------------------------------------------------------------
struct LlamaConfig {
  int64_t vocab = 0, dim = 64, heads = 4, layers = 2, hidden = 128, context = 64, batch = 16;
  double lr = 3e-3;
};

class SwiGlu : public nn::UnaryModule {
 public:
  SwiGlu(int64_t dim, int64_t hidden, Generator& gen, const Options& o) {
    gate_ = RegisterModule("gate", std::make_shared<nn::Linear>(dim, hidden, false, gen, o));
    up_ = RegisterModule("up", std::make_shared<nn::Linear>(dim, hidden, false, gen, o));
    down_ = RegisterModule("down", std::make_shared<nn::Linear>(hidden, dim, false, gen, o));
  }
  Tensor Forward(const Tensor& x) override { return down_->Forward(silu(gate_->Forward(x)) * up_->Forward(x)); }

 private:
  std::shared_ptr<nn::Linear> gate_, up_, down_;
};

// ---- one decoding step with the KV cache as tensors (oar export llama --decode) ---------------------------
// CausalSelfAttention::Forward with a cache, op for op, but with nothing taken from the host: the cache is
// the tensors past k / v [B, H, L, hd] and the rotary rows are looked up in tables by a position tensor, so
// the step captures with the cache length L (and the batch) symbolic. The tables hold exactly what
// rotary_embedding computes on the host (double, rounded to the dtype), and a single query needs no causal
// mask (it may see every key), so a step's results are bitwise those of the eager cached forward.
struct RotaryTables {
  Tensor cos, sin;  // [positions, head_dim / 2]
};

RotaryTables MakeRotaryTables(int64_t positions, int64_t hd, Device device) {
  std::vector<double> c(static_cast<size_t>(positions * hd / 2)), s(c.size());
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * i / static_cast<double>(hd));
      c[static_cast<size_t>(p * (hd / 2) + i)] = std::cos(angle);
      s[static_cast<size_t>(p * (hd / 2) + i)] = std::sin(angle);
    }
  }
  const Device host("cpu");  // rounded on the host, as rotary_embedding does
  return {cast(FromVector<double>(c, {positions, hd / 2}, host), DType::kFloat32).to(device),
          cast(FromVector<double>(s, {positions, hd / 2}, host), DType::kFloat32).to(device)};
}

// rotary_embedding's rotation with its rows given: cs, sn [T, hd / 2].
Tensor RotateWith(const Tensor& x, const Tensor& cs, const Tensor& sn) {
  const int64_t d = x.dim(-1);
  const Tensor x1 = x.slice(-1, 0, d / 2), x2 = x.slice(-1, d / 2, d);
  const Tensor parts[] = {x1 * cs - x2 * sn, x2 * cs + x1 * sn};
  return concat(parts, -1);
}

Tensor& ParameterOf(nn::Module& m, const std::string& name) {
  for (auto& [n, t] : m.NamedParameters()) {
    if (n == name) return *t;
  }
  Throw(ErrorCode::kInternal, "llama: no parameter '{}'", name);
}

// x [B, T, dim] through `attn` at the positions whose rotary rows are cs, sn: with a cache past_k / past_v
// (defined) one query position that sees every key; without one, T positions masked by `mask` (additive
// [T, T]: 0 where a query may see a key, -inf elsewhere; a causal mask gives bitwise the eager where). k, v
// receive the keys and values (the cache with these positions appended).
Tensor AttentionAt(nn::CausalSelfAttention& attn, int64_t heads, const Tensor& x, const Tensor& cs, const Tensor& sn,
                   const Tensor& past_k, const Tensor& past_v, const Tensor& mask, Tensor& k, Tensor& v) {
  const int64_t b = x.dim(0), t = x.dim(1), dim = x.dim(2), hd = dim / heads;
  const Tensor qkv = linear(x, ParameterOf(attn, "qkv.weight")).reshape({b, t, 3, heads, hd}).permute({2, 0, 3, 1, 4});
  const Tensor q = RotateWith(qkv.slice(0, 0, 1).squeeze(0), cs, sn);
  k = RotateWith(qkv.slice(0, 1, 2).squeeze(0), cs, sn);
  v = qkv.slice(0, 2, 3).squeeze(0);
  if (past_k.defined()) {
    const Tensor ks[] = {past_k, k};
    const Tensor vs[] = {past_v, v};
    k = concat(ks, 2);
    v = concat(vs, 2);
  }
  const Tensor y = scaled_dot_product_attention(q, k, v, /*causal=*/false, mask);
  return linear(y.permute({0, 2, 1, 3}).reshape({b, t, dim}), ParameterOf(attn, "out.weight"));
}

class Block : public nn::Module {
 public:
  Block(const LlamaConfig& c, Generator& gen, const Options& o) {
    n1_ = RegisterModule("attn_norm", std::make_shared<nn::RMSNorm>(c.dim, o));
    attn_ = RegisterModule("attn", std::make_shared<nn::CausalSelfAttention>(c.dim, c.heads, gen, o));
    n2_ = RegisterModule("mlp_norm", std::make_shared<nn::RMSNorm>(c.dim, o));
    mlp_ = RegisterModule("mlp", std::make_shared<SwiGlu>(c.dim, c.hidden, gen, o));
  }
  Tensor Forward(const Tensor& x, nn::CausalSelfAttention::KvCache* cache) {
    const Tensor h = x + attn_->Forward(n1_->Forward(x), cache);
    return h + mlp_->Forward(n2_->Forward(h));
  }
  /// Forward with the positions' rotary rows and the cache as tensors (AttentionAt).
  Tensor ForwardAt(const Tensor& x, int64_t heads, const Tensor& cs, const Tensor& sn, const Tensor& past_k,
                   const Tensor& past_v, const Tensor& mask, Tensor& k, Tensor& v) {
    const Tensor h = x + AttentionAt(*attn_, heads, n1_->Forward(x), cs, sn, past_k, past_v, mask, k, v);
    return h + mlp_->Forward(n2_->Forward(h));
  }

 private:
  std::shared_ptr<nn::RMSNorm> n1_, n2_;
  std::shared_ptr<nn::CausalSelfAttention> attn_;
  std::shared_ptr<SwiGlu> mlp_;
};

class Llama : public nn::Module {
 public:
  Llama(const LlamaConfig& c, Generator& gen, const Options& o) {
    emb_ = RegisterModule("tok_emb", std::make_shared<nn::Embedding>(c.vocab, c.dim, gen, o, 0.1));
    for (int64_t i = 0; i < c.layers; ++i) {
      blocks_.push_back(RegisterModule("layers." + std::to_string(i), std::make_shared<Block>(c, gen, o)));
    }
    norm_ = RegisterModule("norm", std::make_shared<nn::RMSNorm>(c.dim, o));
  }
  /// tokens int64 [B, T] -> logits [B, T, vocab]; with caches (one per layer) tokens are the new positions.
  Tensor Forward(const Tensor& tokens, std::vector<nn::CausalSelfAttention::KvCache>* caches = nullptr) {
    Tensor h = emb_->Forward(tokens);
    for (size_t i = 0; i < blocks_.size(); ++i) h = blocks_[i]->Forward(h, caches ? &(*caches)[i] : nullptr);
    return matmul(norm_->Forward(h), emb_->weight.transpose(0, 1));  // tied output head
  }
  size_t layers() const { return blocks_.size(); }
  /// One decoding step: ids int64 [B, 1] at `position` (int64 [1]), past = {k0, v0, k1, v1, ...} [B, H, L, hd]
  /// -> {logits [B, 1, vocab], the caches with this position appended, in past's order}.
  std::vector<Tensor> DecodeStep(const Tensor& ids, const Tensor& position, std::span<const Tensor> past,
                                 const RotaryTables& tables, int64_t heads) {
    OAR_CHECK_ARG(ids.rank() == 2 && ids.dim(1) == 1 && past.size() == 2 * blocks_.size(),
                  "llama decode step: expected ids [B, 1] and {} cache tensors, got ids {} and {}", 2 * blocks_.size(),
                  ids.shape().ToString(), past.size());
    const Tensor cs = index_select(tables.cos, 0, position), sn = index_select(tables.sin, 0, position);
    std::vector<Tensor> out(1 + past.size());
    Tensor h = emb_->Forward(ids);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      h = blocks_[i]->ForwardAt(h, heads, cs, sn, past[2 * i], past[2 * i + 1], Tensor(), out[1 + 2 * i],
                                out[2 + 2 * i]);
    }
    out[0] = matmul(norm_->Forward(h), emb_->weight.transpose(0, 1));
    return out;
  }
  /// Forward's logits with nothing made from the sequence extent on the host: ids [B, T] at `positions`
  /// (int64 [T], normally 0 .. T-1), the rotary rows looked up in `tables` and the causal mask computed from
  /// the positions (a key is visible to a query at the same or a later position). Bitwise Forward's.
  Tensor ForwardAt(const Tensor& ids, const Tensor& positions, const RotaryTables& tables, int64_t heads) {
    OAR_CHECK_ARG(positions.rank() == 1 && ids.rank() == 2 && positions.dim(0) == ids.dim(1),
                  "llama: positions must be int64 [T] for ids [B, T], got {} for {}", positions.shape().ToString(),
                  ids.shape().ToString());
    const Tensor cs = index_select(tables.cos, 0, positions), sn = index_select(tables.sin, 0, positions);
    const Tensor visible = le(positions.unsqueeze(0), positions.unsqueeze(1));  // [query, key]
    const Tensor mask = where(visible, full({}, 0.0, DType::kFloat32, ids.device()),
                              full({}, -std::numeric_limits<double>::infinity(), DType::kFloat32, ids.device()));
    Tensor h = emb_->Forward(ids);
    for (const auto& block : blocks_) {
      Tensor k, v;
      h = block->ForwardAt(h, heads, cs, sn, Tensor(), Tensor(), mask, k, v);
    }
    return matmul(norm_->Forward(h), emb_->weight.transpose(0, 1));
  }

 private:
  std::shared_ptr<nn::Embedding> emb_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<nn::RMSNorm> norm_;
};

class LlamaExample : public Example {
 public:
  LlamaExample(Device d, uint64_t seed) : Example(d, seed), batch_gen_(seed ^ 0x11a3aull) {
    const std::string text(reinterpret_cast<const char*>(kCorpus), sizeof(kCorpus));
    std::vector<bool> seen(256, false);
    for (unsigned char ch : text) seen[ch] = true;
    index_.assign(256, -1);
    for (int i = 0; i < 256; ++i) {
      if (seen[i]) {
        index_[i] = static_cast<int64_t>(vocab_.size());
        vocab_.push_back(static_cast<unsigned char>(i));
      }
    }
    std::vector<int64_t> ids;
    for (unsigned char ch : text) ids.push_back(index_[ch]);
    const size_t split = ids.size() * 9 / 10;
    train_.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(split));
    val_.assign(ids.begin() + static_cast<std::ptrdiff_t>(split), ids.end());
    c_.vocab = static_cast<int64_t>(vocab_.size());
    Generator gen(seed);
    model_ = std::make_unique<Llama>(c_, gen, Options{d, DType::kFloat32});
    opt_ = std::make_unique<optim::AdamW>(model_->Parameters(), c_.lr);
  }
  std::string kind() const override { return "llama"; }
  int64_t default_steps() const override { return 1000; }
  std::string metric_name() const override { return "loss"; }
  nn::Module& module() override { return *model_; }
  std::vector<Tensor> Batch(int64_t step, int64_t total) override {
    opt_->set_lr(LearningRate(step, total));
    std::vector<int64_t> xs, ys;
    DrawBatch(xs, ys);
    int64_t b = c_.batch;
    if (dp_size_ > 1) {  // this process's rows of the batch
      b /= dp_size_;
      const auto n = static_cast<std::ptrdiff_t>(b * c_.context), at = n * dp_rank_;
      xs = std::vector<int64_t>(xs.begin() + at, xs.begin() + at + n);
      ys = std::vector<int64_t>(ys.begin() + at, ys.begin() + at + n);
    }
    return {FromVector<int64_t>(xs, {b, c_.context}, device_), FromVector<int64_t>(ys, {b * c_.context}, device_)};
  }
  std::vector<Tensor> TrainOn(std::span<const Tensor> batch, const optim::Optimizer::ScalarFn& scalar) override {
    OAR_CHECK(dp_size_ <= 1 || ops::ActiveTracer() == nullptr, kUnimplemented,
              "llama: a step that averages gradients across processes (the MPI all_reduce runs on the host) cannot "
              "be captured yet; train data parallel eagerly");
    model_->Train();
    const Tensor loss = Loss(batch[0], batch[1]);
    opt_->ZeroGrad();
    loss.backward();
    if (dp_size_ > 1) {
      for (Tensor* p : model_->Parameters()) {
        Tensor g = p->grad();
        dp_mean_(g);
        p->mutable_autograd_meta().grad = g;
      }
    }
    optim::ClipGradNorm(model_->Parameters(), 1.0);
    opt_->ApplyStep(scalar);
    return {loss};
  }
  double TrainStep(int64_t step, int64_t total) override {
    Tensor value = EagerStep(step, total).detach().to(Device("cpu"));
    if (dp_size_ > 1) dp_mean_(value);
    return value.item<float>();
  }
  /// The schedule of TrainStep.
  double LearningRate(int64_t step, int64_t total) const {
    return optim::WarmupCosine(step, c_.lr, std::min<int64_t>(20, total / 10), total, c_.lr * 0.1);
  }
  /// The next training batch (tokens and targets, [batch * context] each), advancing the data order.
  void DrawBatch(std::vector<int64_t>& xs, std::vector<int64_t>& ys) {
    const int64_t b = c_.batch, t = c_.context;
    for (int64_t i = 0; i < b; ++i) {
      const size_t start = batch_gen_.NextU64() % (train_.size() - static_cast<size_t>(t) - 1);
      xs.insert(xs.end(), train_.begin() + static_cast<std::ptrdiff_t>(start),
                train_.begin() + static_cast<std::ptrdiff_t>(start + t));
      ys.insert(ys.end(), train_.begin() + static_cast<std::ptrdiff_t>(start + 1),
                train_.begin() + static_cast<std::ptrdiff_t>(start + t + 1));
    }
  }
  const LlamaConfig& config() const { return c_; }
  void SetDataParallel(int rank, int size, std::function<void(Tensor&)> mean) {
    OAR_CHECK_ARG(size >= 1 && rank >= 0 && rank < size && c_.batch % size == 0,
                  "data parallel: {} processes must divide the batch of {} (rank {})", size, c_.batch, rank);
    dp_rank_ = rank;
    dp_size_ = size;
    dp_mean_ = std::move(mean);
  }
  optim::Optimizer& optimizer() override { return *opt_; }
  double Evaluate() override {
    model_->Eval();
    NoGradGuard no_grad;
    const int64_t t = c_.context;
    std::vector<int64_t> xs, ys;
    int64_t b = 0;
    for (size_t start = 0; start + static_cast<size_t>(t) + 1 <= val_.size(); start += static_cast<size_t>(t)) {
      xs.insert(xs.end(), val_.begin() + static_cast<std::ptrdiff_t>(start),
                val_.begin() + static_cast<std::ptrdiff_t>(start + t));
      ys.insert(ys.end(), val_.begin() + static_cast<std::ptrdiff_t>(start + 1),
                val_.begin() + static_cast<std::ptrdiff_t>(start + t + 1));
      ++b;
    }
    return Loss(xs, ys, b).to(Device("cpu")).item<float>();
  }
  InferenceForward ExportForward(int64_t batch, int64_t seq) override {
    if (seq < 0) return SymbolicSeqForward(batch);
    OAR_CHECK_ARG(seq <= c_.context, "llama: the sequence length must be 1 to {} (the context), got {}", c_.context,
                  seq);
    return {{{"ids", DType::kInt64, {BatchDim(batch), jit::DimSpec::Static(seq > 0 ? seq : c_.context)}}},
            {"logits"},
            EvalForward(*model_, [this](const Tensor& ids) { return model_->Forward(ids); }), StateOf(*model_)};
  }
  // ExportForward with the sequence extent the symbol T: inputs ids [batch, T] and positions [T] (Llama::ForwardAt;
  // rotary rows for up to the context's positions). The batch must be static: the attention reshapes
  // [B, T, 3, H, hd] carry both extents, and a view may depend on one symbol only.
  InferenceForward SymbolicSeqForward(int64_t batch) {
    OAR_CHECK_ARG(batch > 0, "llama: a symbolic sequence length needs a static batch (--batch N): the attention "
                  "reshapes [B, T, 3, heads, head_dim] would depend on two symbols");
    auto tables = std::make_shared<RotaryTables>(MakeRotaryTables(c_.context, c_.dim / c_.heads, device_));
    InferenceForward f;
    f.inputs = {{"ids", DType::kInt64, {jit::DimSpec::Static(batch), jit::DimSpec::Symbol("T")}},
                {"positions", DType::kInt64, {jit::DimSpec::Symbol("T")}}};
    f.outputs = {"logits"};
    f.fn = [this, tables](std::span<const Tensor> in) {
      model_->Eval();
      NoGradGuard no_grad;
      return std::vector<Tensor>{model_->ForwardAt(in[0], in[1], *tables, c_.heads)};
    };
    f.state = StateOf(*model_);
    f.attributes = {{"tokenizer.vocab_bytes", std::vector<int64_t>(vocab_.begin(), vocab_.end())}};
    return f;
  }
  InferenceForward DecodeForward(int64_t batch, int64_t max_positions) {
    OAR_CHECK_ARG(max_positions >= 1, "llama --decode: --max-positions must be >= 1, got {}", max_positions);
    const int64_t hd = c_.dim / c_.heads;
    InferenceForward f;
    f.inputs = {{"ids", DType::kInt64, {BatchDim(batch), jit::DimSpec::Static(1)}},
                {"position", DType::kInt64, {jit::DimSpec::Static(1)}}};
    f.outputs = {"logits"};
    for (int64_t i = 0; i < c_.layers; ++i) {
      for (const char* kv : {"k", "v"}) {
        f.inputs.push_back({fmt::format("past.{}.{}", i, kv), DType::kFloat32,
                            {BatchDim(batch), jit::DimSpec::Static(c_.heads), jit::DimSpec::Symbol("L"),
                             jit::DimSpec::Static(hd)}});
        f.outputs.push_back(fmt::format("present.{}.{}", i, kv));
      }
    }
    auto tables = std::make_shared<RotaryTables>(MakeRotaryTables(max_positions, hd, device_));
    f.fn = [this, tables](std::span<const Tensor> in) {
      model_->Eval();
      NoGradGuard no_grad;
      return model_->DecodeStep(in[0], in[1], in.subspan(2), *tables, c_.heads);
    };
    f.state = StateOf(*model_);
    f.attributes = {{"decode.max_positions", {max_positions}},
                    {"tokenizer.vocab_bytes", std::vector<int64_t>(vocab_.begin(), vocab_.end())}};
    return f;
  }
  std::string ConfigJson() const override {
    std::vector<int> vocab(vocab_.begin(), vocab_.end());
    return nlohmann::json{{"vocab_size", c_.vocab}, {"dim", c_.dim}, {"heads", c_.heads}, {"layers", c_.layers},
                          {"hidden", c_.hidden}, {"context", c_.context}, {"batch", c_.batch}, {"lr", c_.lr},
                          {"vocab_bytes", vocab}, {"corpus", kCorpusName}}
        .dump();
  }

  double Unigram() const {
    std::vector<double> count(vocab_.size(), 0);
    for (int64_t id : train_) count[static_cast<size_t>(id)] += 1;
    double h = 0;
    for (double n : count) {
      if (n > 0) h -= n / static_cast<double>(train_.size()) * std::log(n / static_cast<double>(train_.size()));
    }
    return h;
  }

  std::string Generate(const std::string& prompt, int64_t max_new, int64_t top_k, uint64_t sample_seed) {
    OAR_CHECK_ARG(!prompt.empty(), "generate: the prompt is empty");
    OAR_CHECK_ARG(max_new >= 0, "generate: --max-new-tokens must be >= 0, got {}", max_new);
    std::vector<int64_t> ids;
    for (unsigned char ch : prompt) {
      OAR_CHECK_ARG(index_[ch] >= 0,
                    "generate: the prompt's byte 0x{:02x} is not in the model's vocabulary (the {} distinct bytes "
                    "of its training text)",
                    static_cast<int>(ch), vocab_.size());
      ids.push_back(index_[ch]);
    }
    model_->Eval();
    NoGradGuard no_grad;
    std::vector<nn::CausalSelfAttention::KvCache> caches(model_->layers());
    Generator gen(sample_seed);
    std::string out = prompt;
    Tensor logits = model_->Forward(FromVector<int64_t>(ids, {1, static_cast<int64_t>(ids.size())}, device_), &caches);
    for (int64_t i = 0; i < max_new; ++i) {
      const Tensor last = logits.slice(1, logits.dim(1) - 1, logits.dim(1)).reshape({c_.vocab});
      int64_t next = 0;
      if (top_k <= 1) {
        next = argmax(last, 0).to(Device("cpu")).item<int64_t>();
      } else {
        auto [vals, idx] = topk(last, std::min(top_k, c_.vocab));
        const std::vector<float> p = softmax(vals).to(Device("cpu")).ToVector<float>();
        const std::vector<int64_t> ix = idx.to(Device("cpu")).ToVector<int64_t>();
        double u = gen.NextDouble();
        next = ix.back();
        for (size_t j = 0; j < p.size(); ++j) {
          u -= p[j];
          if (u < 0) {
            next = ix[j];
            break;
          }
        }
      }
      out.push_back(static_cast<char>(vocab_[static_cast<size_t>(next)]));
      const std::vector<int64_t> one{next};
      logits = model_->Forward(FromVector<int64_t>(one, {1, 1}, device_), &caches);
    }
    return out;
  }

 private:
  Tensor Loss(const std::vector<int64_t>& xs, const std::vector<int64_t>& ys, int64_t b) {
    return Loss(FromVector<int64_t>(xs, {b, c_.context}, device_), FromVector<int64_t>(ys, {b * c_.context}, device_));
  }
  // ids [B, T], targets [B * T].
  Tensor Loss(const Tensor& ids, const Tensor& targets) {
    const Tensor logits = model_->Forward(ids);
    return cross_entropy(logits.reshape({ids.dim(0) * ids.dim(1), c_.vocab}), targets);
  }

  LlamaConfig c_;
  std::vector<unsigned char> vocab_;
  std::vector<int64_t> index_, train_, val_;
  std::unique_ptr<Llama> model_;
  std::unique_ptr<optim::AdamW> opt_;
  Generator batch_gen_;
  int dp_rank_ = 0, dp_size_ = 1;
  std::function<void(Tensor&)> dp_mean_;
};

// ---- tiny Llama over a ProcessMesh (tensor parallel on "tp", data parallel on "dp") --------------------
// The same weights, data order and schedule as LlamaExample (which it wraps, on the mesh's first device,
// for the data and for evaluation), with every parameter a DistTensor: the fused qkv column-parallel by
// heads (Shard(0, 3)), gate and up column-parallel (Shard(0) of [out, in]), the attention output and down
// projections row-parallel (Shard(1)), norms and the tied embedding replicated; the batch is sharded on
// dp. Gradients are placed by DistTensor::grad() (the dp all_reduce), clipped by their global norm, and
// AdamW updates every rank's shard (it is elementwise).
}  // namespace

distributed::Placement LlamaTensorParallelPlacement(std::string_view name) {
  using distributed::Placement;
  if (name.ends_with("attn.qkv.weight")) return Placement::Shard(0, 3);
  if (name.ends_with("attn.out.weight") || name.ends_with("mlp.down.weight")) return Placement::Shard(1);
  if (name.ends_with("mlp.gate.weight") || name.ends_with("mlp.up.weight")) return Placement::Shard(0);
  return Placement::Replicate();
}

namespace {

// The llama's parameters as tensor parallel weights, placed on tp by LlamaTensorParallelPlacement.
struct TensorParallelParam {
  std::string name;
  Tensor whole;
  distributed::Placement tp;
};
std::vector<TensorParallelParam> TensorParallelParams(nn::Module& m) {
  std::vector<TensorParallelParam> out;
  for (auto& [name, p] : m.NamedParameters()) out.push_back({name, p->detach(), LlamaTensorParallelPlacement(name)});
  return out;
}

// Layers [first, last) of the llama on DistTensors, h [b, t, dim]; `P` gives a parameter by the names of
// TensorParallelParams. The same ops in the same order as Block::Forward, so the result is the one-device
// model's up to the reductions' order. With `sequence_parallel` (Megatron's sequence parallel) h is
// Shard(1) on tp, and so are the norms and residual adds: each block's normed input is all-gathered
// before the column-parallel projections and the row-parallel product reduce-scattered back onto the
// sequence (instead of all-reduced).
distributed::DistTensor TensorParallelLayers(const LlamaConfig& c, distributed::DistTensor h, int64_t first,
                                             int64_t last,
                                             const std::function<const distributed::DistTensor&(const std::string&)>& P,
                                             bool sequence_parallel = false) {
  namespace d = distributed;
  const int64_t b = h.shape()[0], t = h.shape()[1], hd = c.dim / c.heads;
  const int tp = sequence_parallel ? h.mesh().DimIndex("tp") : -1;
  auto enter = [&](const d::DistTensor& x) { return sequence_parallel ? d::GatherSequence(x, tp) : x; };
  auto leave = [&](const d::DistTensor& x) { return sequence_parallel ? d::ScatterSequence(x, tp, 1) : x; };
  for (int64_t i = first; i < last; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    const d::DistTensor a = enter(d::rms_norm(h, 1, P(l + "attn_norm.weight")));
    // The fused projection's output [b, t, 3 · dim] is S(2,3) on tp and its heads view S(3): each rank
    // computes its heads' q, k and v, with no collective before the row-parallel output projection.
    const d::DistTensor qkv = d::reshape(d::linear(a, P(l + "attn.qkv.weight")), {b, t, 3, c.heads, hd});
    auto heads = [&](int64_t i, bool rotary) {
      d::DistTensor x = d::transpose(d::reshape(d::slice(qkv, 2, i, i + 1), {b, t, c.heads, hd}), 1, 2);
      return rotary ? d::rotary_embedding(x) : x;
    };
    const d::DistTensor y = d::scaled_dot_product_attention(heads(0, true), heads(1, true), heads(2, false), true);
    h = d::add(h, leave(d::linear(d::reshape(d::transpose(y, 1, 2), {b, t, c.dim}), P(l + "attn.out.weight"))));
    const d::DistTensor m = enter(d::rms_norm(h, 1, P(l + "mlp_norm.weight")));
    const d::DistTensor g = d::mul(d::silu(d::linear(m, P(l + "mlp.gate.weight"))), d::linear(m, P(l + "mlp.up.weight")));
    h = d::add(h, leave(d::linear(g, P(l + "mlp.down.weight"))));
  }
  return h;
}

/// The extent of mesh dim `dim`, 1 when the mesh has no such dim.
int64_t MeshDimSize(const distributed::ProcessMesh& mesh, std::string_view dim) {
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (mesh.dim_names()[static_cast<size_t>(m)] == dim) return mesh.size(m);
  }
  return 1;
}

/// The rank at mesh coordinate pp = stage and `other` along the mesh's other dim (a two-dim pp mesh).
int64_t StageRank(const distributed::ProcessMesh& mesh, int64_t stage, int64_t other) {
  std::vector<int64_t> coord;
  for (const std::string& n : mesh.dim_names()) coord.push_back(n == "pp" ? stage : other);
  return mesh.Rank(coord);
}

class ParallelLlamaExample : public Example {
 public:
  ParallelLlamaExample(const distributed::ProcessMesh& mesh, uint64_t seed, bool sequence_parallel)
      : Example(mesh.devices()[0], seed),
        mesh_(mesh),
        base_(mesh.devices()[0], seed),
        sequence_parallel_(sequence_parallel) {
    for (int m = 0; m < mesh_.ndim(); ++m) {
      const std::string& n = mesh_.dim_names()[static_cast<size_t>(m)];
      OAR_CHECK_ARG(n == "dp" || n == "tp",
                    "--mesh: llama runs data parallel on 'dp', tensor parallel on 'tp' and "
                    "pipeline parallel on 'pp' (with dp, tp or both); got a dim named '{}'",
                    n);
    }
    const LlamaConfig& c = base_.config();
    tp_ = Size("tp");
    OAR_CHECK_ARG(c.heads % tp_ == 0 && c.hidden % tp_ == 0 && c.batch % Size("dp") == 0,
                  "--mesh {}: tp must divide the {} heads and the hidden size {}, dp the batch {}", mesh_.ToString(),
                  c.heads, c.hidden, c.batch);
    for (const TensorParallelParam& p : TensorParallelParams(base_.module())) Add(p.name, p.whole, p.tp);
    std::vector<Tensor*> locals;
    for (auto& [name, t] : params_) {
      for (Tensor& l : t->mutable_locals()) {
        if (l.defined()) locals.push_back(&l);  // one rank per process: this process's shards
      }
    }
    opt_ = std::make_unique<optim::AdamW>(locals, c.lr);
  }
  std::string kind() const override { return "llama"; }
  int64_t default_steps() const override { return base_.default_steps(); }
  std::string metric_name() const override { return base_.metric_name(); }
  nn::Module& module() override {
    SyncToBase();
    return base_.module();
  }
  double TrainStep(int64_t step, int64_t total) override {
    opt_->set_lr(base_.LearningRate(step, total));
    std::vector<int64_t> xs, ys;
    base_.DrawBatch(xs, ys);
    const LlamaConfig& c = base_.config();
    const int64_t b = c.batch, t = c.context;
    const distributed::DistTensor loss =
        distributed::cross_entropy(Logits(xs, b, t), Tokens(ys, {b * t}));
    opt_->ZeroGrad();
    distributed::Backward(loss);
    PlaceGradients();
    ClipGradients(1.0);
    opt_->Step();
    return distributed::FullTensor(loss).to(Device("cpu")).item<float>();
  }
  double Evaluate() override {
    SyncToBase();
    return base_.Evaluate();
  }
  std::string ConfigJson() const override { return base_.ConfigJson(); }
  LlamaExample& base() { return base_; }

 private:
  int64_t Size(std::string_view dim) const { return MeshDimSize(mesh_, dim); }
  // Placements with `tp` on tp and `dp` on dp.
  distributed::Placements On(distributed::Placement tp, distributed::Placement dp = distributed::Placement::Replicate()) const {
    distributed::Placements p;
    for (const std::string& n : mesh_.dim_names()) p.push_back(n == "tp" ? tp : dp);
    return p;
  }
  void Add(const std::string& name, const Tensor& w, distributed::Placement tp) {
    auto t = std::make_unique<distributed::DistTensor>(distributed::shard_tensor(w.contiguous(), mesh_, On(tp)));
    *t = t->detach();
    t->set_requires_grad(true);
    params_.emplace_back(name, std::move(t));
  }
  const distributed::DistTensor& P(const std::string& name) const {
    for (const auto& [n, t] : params_) {
      if (n == name) return *t;
    }
    Throw(ErrorCode::kInternal, "parallel llama: no parameter {}", name);
  }
  distributed::DistTensor Tokens(const std::vector<int64_t>& ids, const Dims& shape) const {
    return distributed::shard_tensor(FromVector<int64_t>(ids, shape, Device("cpu")), mesh_,
                                     On(distributed::Placement::Replicate(), distributed::Placement::Shard(0)));
  }
  distributed::DistTensor Logits(const std::vector<int64_t>& xs, int64_t b, int64_t t) {
    namespace d = distributed;
    const LlamaConfig& c = base_.config();
    const d::DistTensor& emb = P("tok_emb.weight");
    d::DistTensor h = d::embedding(emb, Tokens(xs, {b, t}));
    // Sequence parallel: the embedding's (replicated) output sliced on the sequence, the final norm on the
    // slices, its output gathered for the replicated head.
    const int tp = sequence_parallel_ ? mesh_.DimIndex("tp") : -1;
    if (sequence_parallel_) h = d::ScatterSequence(h, tp, 1);
    h = TensorParallelLayers(
        c, h, 0, c.layers, [this](const std::string& n) -> const d::DistTensor& { return P(n); }, sequence_parallel_);
    d::DistTensor normed = d::rms_norm(h, 1, P("norm.weight"));
    if (sequence_parallel_) normed = d::GatherSequence(normed, tp);
    const d::DistTensor logits = d::matmul(normed, d::transpose(emb, 0, 1));
    return d::reshape(logits, {b * t, c.vocab});
  }
  void PlaceGradients() {
    for (auto& [name, t] : params_) {
      const distributed::DistTensor g = t->grad();
      if (!g.defined()) continue;
      for (size_t r = 0; r < g.locals().size(); ++r) {
        if (g.locals()[r].defined()) t->mutable_locals()[r].mutable_autograd_meta().grad = g.locals()[r];
      }
    }
  }
  // optim::ClipGradNorm over the whole (global) parameters: each element counted once (with one rank per
  // process, each process sums what it owns and the sums are all-reduced over the job).
  void ClipGradients(double max_norm) {
    NoGradGuard no_grad;
    double total = 0;
    for (auto& [name, t] : params_) {
      for (int64_t r = 0; r < mesh_.numel(); ++r) {
        if (!mesh_.is_local(r)) continue;
        const std::vector<int64_t> coord = mesh_.Coord(r);
        bool owner = true;
        for (int m = 0; m < mesh_.ndim(); ++m) owner &= !t->placements()[static_cast<size_t>(m)].is_replicate() || coord[static_cast<size_t>(m)] == 0;
        const Tensor g = t->local(r).grad();
        if (owner && g.defined()) total += sum(g * g).to(Device("cpu")).item<double>();
      }
    }
    if (mesh_.multi_process()) {
      Tensor t = full({}, total, DType::kFloat64, Device("cpu"));
      distributed::ProcessGroup::World().AllReduce(t, runtime::ReduceOp::kSum);
      total = t.item<double>();
    }
    const double norm = std::sqrt(total);
    if (norm <= max_norm) return;
    const double scale = max_norm / (norm + 1e-6);
    for (auto& [name, t] : params_) {
      for (Tensor& l : t->mutable_locals()) {
        if (l.defined() && l.grad().defined()) l.mutable_autograd_meta().grad = l.grad() * scale;
      }
    }
  }
  // The trained weights back into the wrapped single-device model.
  void SyncToBase() {
    NoGradGuard no_grad;
    for (auto& [name, p] : base_.module().NamedParameters()) p->copy_(distributed::FullTensor(P(name)).to(p->device()));
  }

  distributed::ProcessMesh mesh_;
  LlamaExample base_;
  bool sequence_parallel_ = false;
  int64_t tp_ = 1;
  std::vector<std::pair<std::string, std::unique_ptr<distributed::DistTensor>>> params_;
  std::unique_ptr<optim::AdamW> opt_;
};

// ---- tiny Llama in pipeline stages over a ProcessMesh ("pp", optionally with "dp") ------------------------
// Stage s holds layers ShardOffset(layers, pp, s) .. + ShardSize(layers, pp, s); the first stage also the
// embedding, the last the final norm and the tied output head. The head's weight is a copy of the
// embedding on the last stage whose gradient is added to stage 0's before clipping (Megatron's embedding
// group), so both copies take the same update. Each stage runs on the devices at its pp coordinate, one
// replica (lane) per dp coordinate; a batch is cut into dp x micro-batches equal row blocks that flow
// through distributed::Pipeline under the chosen schedule. Gradients are averaged over the lanes, clipped
// by their global norm (the tied weight counted once, in the one-device model's parameter order) and
// AdamW steps every replica. The data, weights and schedule are LlamaExample's, which it wraps.
class LlamaStage : public nn::Module {
 public:
  LlamaStage(const LlamaConfig& c, int64_t first, int64_t last, bool head, Generator& gen, const Options& o)
      : first_(first) {
    if (first == 0 || head) {
      emb_ = RegisterModule("tok_emb", std::make_shared<nn::Embedding>(c.vocab, c.dim, gen, o, 0.1));
    }
    for (int64_t i = first; i < last; ++i) {
      blocks_.push_back(RegisterModule("layers." + std::to_string(i), std::make_shared<Block>(c, gen, o)));
    }
    if (head) norm_ = RegisterModule("norm", std::make_shared<nn::RMSNorm>(c.dim, o));
  }
  /// Stage 0: tokens [B, T]; later stages: the hidden state [B, T, dim]. The last stage returns logits.
  Tensor Forward(const Tensor& x) {
    Tensor h = first_ == 0 ? emb_->Forward(x) : x;
    for (const auto& b : blocks_) h = b->Forward(h, nullptr);
    return norm_ ? matmul(norm_->Forward(h), emb_->weight.transpose(0, 1)) : h;
  }
  Tensor* embedding() { return emb_ ? &emb_->weight : nullptr; }

 private:
  int64_t first_;
  std::shared_ptr<nn::Embedding> emb_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<nn::RMSNorm> norm_;
};

class PipelineLlamaExample : public Example {
 public:
  PipelineLlamaExample(const distributed::ProcessMesh& mesh, uint64_t seed, const ParallelOptions& po)
      : Example(mesh.devices()[0], seed), mesh_(mesh), base_(mesh.devices()[0], seed) {
    for (const std::string& n : mesh_.dim_names()) {
      OAR_CHECK_ARG(n == "pp" || n == "dp",
                    "--mesh {}: pipeline parallel (pp) combines with data parallel (dp) so far, not with '{}'",
                    mesh_.ToString(), n);
    }
    schedule_ = distributed::ParsePipelineSchedule(po.schedule);
    const LlamaConfig& c = base_.config();
    const int64_t pp = Size("pp");
    dp_ = Size("dp");
    micro_ = po.micro_batches > 0 ? po.micro_batches : pp;
    OAR_CHECK_ARG(pp <= c.layers, "--mesh {}: {} pipeline stages for {} layers; each stage needs at least one layer",
                  mesh_.ToString(), pp, c.layers);
    OAR_CHECK_ARG(c.batch % (dp_ * micro_) == 0,
                  "--mesh {} --micro-batches {}: dp ({}) x micro-batches ({}) must divide the batch of {}",
                  mesh_.ToString(), micro_, dp_, micro_, c.batch);
    std::map<std::string, Tensor*> base_params;
    for (auto& [name, p] : base_.module().NamedParameters()) base_params[name] = p;
    Generator scratch(0);  // the stages' own initial weights are replaced by the base model's
    std::vector<distributed::PipelineStage> stages;
    distributed::PipelineProcesses where;  // one stage lane per process (mpirun)
    for (int64_t s = 0; s < pp; ++s) {
      const int64_t first = distributed::ShardOffset(c.layers, pp, s);
      const int64_t last = first + distributed::ShardSize(c.layers, pp, s);
      distributed::PipelineStage stage;
      for (int64_t l = 0; l < dp_; ++l) {
        const Device d = DeviceAt(s, l);
        stage.lanes.push_back(d);
        where.ranks.push_back(static_cast<int>(RankAt(s, l)));
        if (!mesh_.is_local(RankAt(s, l))) {  // another process's stage lane
          lanes_.emplace_back();
          continue;
        }
        where.stage = s;
        where.lane = l;
        auto m = std::make_unique<LlamaStage>(c, first, last, s + 1 == pp, scratch, Options{d, DType::kFloat32});
        NoGradGuard no_grad;
        for (auto& [name, p] : m->NamedParameters()) p->copy_(base_params.at(name)->to(d));
        opts_.push_back(std::make_unique<optim::AdamW>(m->Parameters(), c.lr));
        lanes_.push_back(std::move(m));
      }
      stage.forward = [this, s, pp](int64_t micro, int64_t lane, const Tensor& in) {
        LlamaStage& m = *lanes_[static_cast<size_t>(s * dp_ + lane)];
        const int64_t t = base_.config().context, rows = base_.config().batch / dp_ / micro_;
        const auto at = static_cast<std::ptrdiff_t>((lane * micro_ + micro) * rows * t);
        const auto n = static_cast<std::ptrdiff_t>(rows * t);
        const Device d = DeviceAt(s, lane);
        const Tensor x = s == 0 ? FromVector<int64_t>(std::vector<int64_t>(xs_.begin() + at, xs_.begin() + at + n),
                                                      {rows, t}, d)
                                : in;
        const Tensor out = m.Forward(x);
        if (s + 1 < pp) return out;
        const Tensor y =
            FromVector<int64_t>(std::vector<int64_t>(ys_.begin() + at, ys_.begin() + at + n), {rows * t}, d);
        return cross_entropy(out.reshape({rows * t, base_.config().vocab}), y);
      };
      stages.push_back(std::move(stage));
      if (dp_ > 1 && !mesh_.multi_process()) {
        std::vector<Device> lane_devices = stages.back().lanes;
        groups_.push_back(std::make_unique<distributed::Group>(std::move(lane_devices)));
      }
    }
    pipe_ = mesh_.multi_process() ? std::make_unique<distributed::Pipeline>(std::move(stages), where)
                                  : std::make_unique<distributed::Pipeline>(std::move(stages));
    for (auto& m : lanes_) {
      if (m) m->Train();
    }
  }
  std::string kind() const override { return "llama"; }
  int64_t default_steps() const override { return base_.default_steps(); }
  std::string metric_name() const override { return base_.metric_name(); }
  nn::Module& module() override {
    SyncToBase();
    return base_.module();
  }
  double TrainStep(int64_t step, int64_t total) override {
    for (auto& o : opts_) o->set_lr(base_.LearningRate(step, total));
    xs_.clear();
    ys_.clear();
    base_.DrawBatch(xs_, ys_);
    for (auto& o : opts_) o->ZeroGrad();
    const distributed::PipelineResult r = pipe_->Run(schedule_, micro_);
    if (mesh_.multi_process()) return StepProcess(r);
    const int64_t pp = pipe_->num_stages();
    for (int64_t s = 0; s < static_cast<int64_t>(groups_.size()); ++s) {  // dp: average over the lanes
      std::vector<nn::Module*> replicas;
      for (int64_t l = 0; l < dp_; ++l) replicas.push_back(Lane(s, l));
      distributed::AverageGradients(*groups_[static_cast<size_t>(s)], replicas);
    }
    NoGradGuard no_grad;
    for (int64_t l = 0; l < dp_; ++l) {
      Tensor& e0 = *Lane(0, l)->embedding();
      Tensor* head = pp > 1 ? Lane(pp - 1, l)->embedding() : nullptr;
      if (head != nullptr) e0.mutable_autograd_meta().grad = e0.grad() + head->grad().to(e0.device());
      std::vector<Tensor*> params;  // the one-device model's order, the tied weight once
      for (int64_t s = 0; s < pp; ++s) {
        for (Tensor* p : Lane(s, l)->Parameters()) {
          if (p != head) params.push_back(p);
        }
      }
      optim::ClipGradNorm(params, 1.0);
      if (head != nullptr) head->mutable_autograd_meta().grad = e0.grad().to(head->device());
    }
    for (auto& o : opts_) o->Step();
    return r.MeanLoss();
  }
  double Evaluate() override {
    SyncToBase();
    return base_.Evaluate();
  }
  std::string ConfigJson() const override { return base_.ConfigJson(); }
  LlamaExample& base() { return base_; }

 private:
  int64_t Size(std::string_view dim) const { return MeshDimSize(mesh_, dim); }
  // The rank and device of stage s, lane l: mesh coordinate pp = s, dp = l.
  int64_t RankAt(int64_t s, int64_t l) const { return StageRank(mesh_, s, l); }
  Device DeviceAt(int64_t s, int64_t l) const { return mesh_.devices()[static_cast<size_t>(RankAt(s, l))]; }
  distributed::ProcessGroup& Processes(std::vector<int64_t> ranks) const {
    std::vector<int> r(ranks.begin(), ranks.end());
    return distributed::ProcessGroup::Subgroup(r);
  }
  // One stage lane per process: the rest of TrainStep with the lanes' gradient mean, the tied embedding's
  // gradient sum (stage 0 and the last stage of a lane), the global norm (over the lane's stages) and the
  // loss (from the last stages) all-reduced between the processes that hold them.
  double StepProcess(const distributed::PipelineResult& r) {
    NoGradGuard no_grad;
    const int64_t pp = pipe_->num_stages();
    int64_t s = 0, l = 0;
    for (int64_t i = 0; i < pp * dp_; ++i) {
      if (mesh_.is_local(RankAt(i / dp_, i % dp_))) s = i / dp_, l = i % dp_;
    }
    LlamaStage& m = *Lane(s, l);
    if (dp_ > 1) {
      std::vector<int64_t> lanes;
      for (int64_t j = 0; j < dp_; ++j) lanes.push_back(RankAt(s, j));
      distributed::ProcessGroup& g = Processes(lanes);
      for (Tensor* p : m.Parameters()) {
        Tensor grad = p->grad();
        g.AllReduce(grad, runtime::ReduceOp::kAvg);
        p->mutable_autograd_meta().grad = grad;
      }
    }
    Tensor* emb = m.embedding();
    if (pp > 1 && emb != nullptr) {  // stage 0 and the last stage: one gradient for the tied weight
      Tensor grad = emb->grad();
      Processes({RankAt(0, l), RankAt(pp - 1, l)}).AllReduce(grad, runtime::ReduceOp::kSum);
      emb->mutable_autograd_meta().grad = grad;
    }
    // optim::ClipGradNorm(1.0) over the lane's parameters, the tied weight once (on stage 0).
    Tensor total = zeros({}, DType::kFloat32, Device("cpu"));
    for (Tensor* p : m.Parameters()) {
      if (p == emb && s > 0) continue;
      const Tensor g = p->grad();
      if (g.defined()) total = total + sum(g * g).to(Device("cpu"));
    }
    std::vector<int64_t> stages;
    for (int64_t j = 0; j < pp; ++j) stages.push_back(RankAt(j, l));
    Processes(stages).AllReduce(total, runtime::ReduceOp::kSum);
    const Tensor norm = sqrt(total);
    const Tensor scale = minimum(full({}, 1.0, norm.dtype(), norm.device()) / (norm + 1e-6), full({}, 1.0, norm.dtype(), norm.device()));
    for (Tensor* p : m.Parameters()) {
      const Tensor g = p->grad();
      if (g.defined()) p->mutable_autograd_meta().grad = g * cast(scale.to(g.device()), g.dtype());
    }
    for (auto& o : opts_) o->Step();
    double mine = 0;
    for (const Tensor& loss : r.losses) mine += loss.to(Device("cpu")).item<float>();
    Tensor t = full({}, mine, DType::kFloat64, Device("cpu"));
    distributed::ProcessGroup::World().AllReduce(t, runtime::ReduceOp::kSum);
    return t.item<double>() / static_cast<double>(micro_ * dp_);
  }
  LlamaStage* Lane(int64_t s, int64_t l) { return lanes_[static_cast<size_t>(s * dp_ + l)].get(); }
  // Lane 0's weights back into the wrapped one-device model (the tied weight from stage 0). With one stage
  // lane per process every process gets them: an all_reduce (sum) per parameter to which only the process
  // that holds it contributes (x + 0 is x).
  void SyncToBase() {
    NoGradGuard no_grad;
    std::map<std::string, Tensor*> trained;
    for (int64_t s = pipe_->num_stages() - 1; s >= 0; --s) {
      if (Lane(s, 0) == nullptr) continue;
      for (auto& [name, p] : Lane(s, 0)->NamedParameters()) trained[name] = p;
    }
    const bool first_holder = mesh_.is_local(RankAt(0, 0));
    for (auto& [name, p] : base_.module().NamedParameters()) {
      if (!mesh_.multi_process()) {
        p->copy_(trained.at(name)->to(p->device()));
        continue;
      }
      auto it = trained.find(name);
      const bool mine = it != trained.end() && (name != "tok_emb.weight" || first_holder);
      Tensor v = mine ? it->second->to(Device("cpu")).clone() : zeros(p->shape(), p->dtype(), Device("cpu"));
      distributed::ProcessGroup::World().AllReduce(v, runtime::ReduceOp::kSum);
      p->copy_(v.to(p->device()));
    }
  }

  distributed::ProcessMesh mesh_;
  LlamaExample base_;
  distributed::PipelineSchedule schedule_ = distributed::PipelineSchedule::k1F1B;
  int64_t dp_ = 1, micro_ = 1;
  std::vector<std::unique_ptr<LlamaStage>> lanes_;  // [stage * dp + lane]
  std::vector<std::unique_ptr<optim::AdamW>> opts_;
  std::vector<std::unique_ptr<distributed::Group>> groups_;  // per stage, over its lanes (dp > 1)
  std::unique_ptr<distributed::Pipeline> pipe_;
  std::vector<int64_t> xs_, ys_;  // this step's batch
};

// ---- tiny Llama in pipeline stages with tensor parallel stages ("pp" and "tp", optionally "dp") ----------------
// Stage s runs on the ranks at pp coordinate s; with dp, each dp coordinate l of it is a lane (a data-parallel
// replica of the stage, as PipelineLlamaExample's). A stage lane is the tp ranks at (pp = s, dp = l), a mesh
// of its own ("tp": mesh_.Slice(pp, s), then .Slice(dp, l)); its layers are cut as PipelineLlamaExample cuts
// them and its weights placed as ParallelLlamaExample places them (q/k/v, gate and up column-parallel, the
// attention output and down projections row-parallel, norms and the embedding replicated). Each batch is cut
// into dp x micro-batches row blocks as PipelineLlamaExample cuts it (lane l takes blocks l · micro ..). The
// tied head is a copy of the embedding on the last stage whose gradient is added to stage 0's (and back)
// before clipping; with dp the lanes' gradients are averaged first (per tp rank: the same shard in every
// lane). The data, weights and schedule are LlamaExample's.
// In one process distributed::Pipeline sees one lane per stage lane, on its tp rank 0: the activation it
// sends is that rank's copy of the replicated hidden state, and the next stage replicates what it receives
// over its tp ranks with the differentiable device copy (shard_tensor), so the gradient it sends back is
// the sum of its ranks' shares. The last stage returns tp rank 0's copy of the replicated loss: seeding it
// alone is distributed::Backward's rule (shares; the collectives' adjoints reach the other ranks).
// With one rank per process (mpirun, torchrun-style) the pipeline's lanes are the (dp, tp) ranks: tp rank r
// of lane l of stage s sends its copy of the hidden state to the same rank of stage s + 1 and gets back the
// gradient share of that copy, which seeds its own backward (the shares sum to the gradient, as in one
// process); only tp rank 0 of each lane's last stage seeds the loss (PipelineProcesses::seed). The lanes'
// gradient mean, the tied weight's gradient, the global norm, the loss and SyncToBase's weights are
// all-reduced between the processes that hold them.
class PipelineTensorParallelLlamaExample : public Example {
 public:
  PipelineTensorParallelLlamaExample(const distributed::ProcessMesh& mesh, uint64_t seed, const ParallelOptions& po)
      : Example(mesh.devices()[0], seed),
        mesh_(mesh),
        base_(mesh.devices()[0], seed),
        sequence_parallel_(po.sequence_parallel) {
    namespace d = distributed;
    for (const std::string& n : mesh_.dim_names()) {
      OAR_CHECK_ARG(n == "pp" || n == "tp" || n == "dp",
                    "--mesh {}: pipeline with tensor parallel runs on the dims pp, tp and dp (not '{}')",
                    mesh_.ToString(), n);
    }
    schedule_ = d::ParsePipelineSchedule(po.schedule);
    const LlamaConfig& c = base_.config();
    const int64_t pp = Size("pp"), tp = Size("tp");
    dp_ = Size("dp");
    micro_ = po.micro_batches > 0 ? po.micro_batches : pp;
    OAR_CHECK_ARG(c.heads % tp == 0 && c.hidden % tp == 0, "--mesh {}: tp must divide the {} heads and the hidden size {}",
                  mesh_.ToString(), c.heads, c.hidden);
    OAR_CHECK_ARG(pp <= c.layers, "--mesh {}: {} pipeline stages for {} layers; each stage needs at least one layer",
                  mesh_.ToString(), pp, c.layers);
    OAR_CHECK_ARG(c.batch % (dp_ * micro_) == 0,
                  "--mesh {} --micro-batches {}: dp ({}) x micro-batches ({}) must divide the batch of {}",
                  mesh_.ToString(), micro_, dp_, micro_, c.batch);
    const std::vector<TensorParallelParam> all = TensorParallelParams(base_.module());
    std::vector<d::PipelineStage> stages;
    std::vector<Tensor*> locals;
    d::PipelineProcesses where;  // one rank per process: the lanes are each stage's (dp, tp) ranks
    if (mesh_.multi_process()) {
      const std::vector<int64_t> me = mesh_.Coord(mesh_.first_local());
      where.stage = me[static_cast<size_t>(mesh_.DimIndex("pp"))];
      my_lane_ = dp_ > 1 ? me[static_cast<size_t>(mesh_.DimIndex("dp"))] : 0;
      const int64_t r = me[static_cast<size_t>(mesh_.DimIndex("tp"))];
      where.lane = my_lane_ * tp + r;
      where.seed = r == 0 ? 1 : 0;
    }
    for (int64_t s = 0; s < pp; ++s) {
      const int64_t first = d::ShardOffset(c.layers, pp, s), last = first + d::ShardSize(c.layers, pp, s);
      firsts_.push_back(first);
      lasts_.push_back(last);
      d::PipelineStage stage;
      for (int64_t l = 0; l < dp_; ++l) {
        d::ProcessMesh lane = mesh_.Slice(mesh_.DimIndex("pp"), s);
        if (dp_ > 1) lane = lane.Slice(lane.DimIndex("dp"), l);
        meshes_.push_back(lane);
        params_.emplace_back();
        const bool held = !mesh_.multi_process() || (s == where.stage && l == my_lane_);
        for (const TensorParallelParam& p : all) {
          bool mine =
              (p.name == "tok_emb.weight" && (s == 0 || s + 1 == pp)) || (p.name == "norm.weight" && s + 1 == pp);
          for (int64_t i = first; i < last; ++i) mine |= p.name.starts_with("layers." + std::to_string(i) + ".");
          if (!mine || !held) continue;
          const d::Placements pl{p.tp};
          auto t = std::make_unique<d::DistTensor>(d::shard_tensor(p.whole.contiguous(), lane, pl));
          *t = t->detach();
          t->set_requires_grad(true);
          for (Tensor& x : t->mutable_locals()) {
            if (x.defined()) locals.push_back(&x);
          }
          params_.back().emplace(p.name, std::move(t));
        }
        const std::vector<Device>& devs = lane.devices();
        if (mesh_.multi_process()) {
          stage.lanes.insert(stage.lanes.end(), devs.begin(), devs.end());
          for (int64_t r = 0; r < tp; ++r) where.ranks.push_back(lane.process_rank(r));
        } else {
          stage.lanes.push_back(devs[0]);
        }
      }
      const int64_t per_lane = mesh_.multi_process() ? tp : 1;  // Pipeline lanes per dp lane
      stage.forward = [this, s, pp, per_lane](int64_t micro, int64_t lane, const Tensor& in) {
        return Forward(s, lane / per_lane, pp, micro, in);
      };
      stages.push_back(std::move(stage));
      if (dp_ > 1 && !mesh_.multi_process()) {  // per tp rank: its shard in every lane
        for (int64_t r = 0; r < tp; ++r) {
          std::vector<Device> replicas;
          for (int64_t l = 0; l < dp_; ++l)
            replicas.push_back(meshes_[static_cast<size_t>(Slot(s, l))].devices()[static_cast<size_t>(r)]);
          groups_.push_back(std::make_unique<d::Group>(std::move(replicas)));
        }
      }
    }
    pipe_ = mesh_.multi_process() ? std::make_unique<d::Pipeline>(std::move(stages), std::move(where))
                                  : std::make_unique<d::Pipeline>(std::move(stages));
    opt_ = std::make_unique<optim::AdamW>(locals, c.lr);
  }
  std::string kind() const override { return "llama"; }
  int64_t default_steps() const override { return base_.default_steps(); }
  std::string metric_name() const override { return base_.metric_name(); }
  nn::Module& module() override {
    SyncToBase();
    return base_.module();
  }
  double TrainStep(int64_t step, int64_t total) override {
    namespace d = distributed;
    opt_->set_lr(base_.LearningRate(step, total));
    xs_.clear();
    ys_.clear();
    base_.DrawBatch(xs_, ys_);
    opt_->ZeroGrad();
    const d::PipelineResult r = pipe_->Run(schedule_, micro_);
    NoGradGuard no_grad;
    for (auto& lane : params_) {  // each rank's gradient with the parameter's placements
      for (auto& [name, t] : lane) {
        const d::DistTensor g = t->grad();
        if (!g.defined()) continue;
        for (size_t k = 0; k < g.locals().size(); ++k) {
          if (g.locals()[k].defined()) t->mutable_locals()[k].mutable_autograd_meta().grad = g.locals()[k];
        }
      }
    }
    const int64_t pp = pipe_->num_stages();
    if (mesh_.multi_process()) return StepProcess(r);
    if (dp_ > 1) {  // the lanes' mean, per stage and tp rank
      for (int64_t s = 0; s < pp; ++s) {
        for (auto& [name, t] : params_[static_cast<size_t>(Slot(s, 0))]) {
          for (size_t k = 0; k < t->locals().size(); ++k) {
            std::vector<Tensor> grads;
            for (int64_t l = 0; l < dp_; ++l) grads.push_back(P(s, l, name).local(static_cast<int64_t>(k)).grad());
            groups_[static_cast<size_t>(s) * t->locals().size() + k]->AllReduce(grads, runtime::ReduceOp::kAvg);
          }
        }
      }
    }
    for (int64_t l = 0; l < dp_ && pp > 1; ++l) {  // the tied weight: one gradient for both copies
      d::DistTensor& e0 = *params_[static_cast<size_t>(Slot(0, l))].at("tok_emb.weight");
      d::DistTensor& head = *params_[static_cast<size_t>(Slot(pp - 1, l))].at("tok_emb.weight");
      for (size_t k = 0; k < e0.locals().size(); ++k) {
        Tensor& a = e0.mutable_locals()[k];
        Tensor& b = head.mutable_locals()[k];
        a.mutable_autograd_meta().grad = a.grad() + b.grad().to(a.device());
        b.mutable_autograd_meta().grad = a.grad().to(b.device());
      }
    }
    ClipGradients(1.0);
    opt_->Step();
    return r.MeanLoss();
  }
  double Evaluate() override {
    SyncToBase();
    return base_.Evaluate();
  }
  std::string ConfigJson() const override { return base_.ConfigJson(); }
  LlamaExample& base() { return base_; }

 private:
  int64_t Size(std::string_view dim) const { return MeshDimSize(mesh_, dim); }
  // The mesh rank at pp = s, dp = l, tp = k.
  int64_t RankAt(int64_t s, int64_t l, int64_t k) const {
    std::vector<int64_t> coord;
    for (const std::string& n : mesh_.dim_names()) coord.push_back(n == "pp" ? s : n == "dp" ? l : k);
    return mesh_.Rank(coord);
  }
  int64_t Slot(int64_t s, int64_t l) const { return s * dp_ + l; }
  const distributed::DistTensor& P(int64_t s, int64_t l, const std::string& name) const {
    const auto& lane = params_[static_cast<size_t>(Slot(s, l))];
    auto it = lane.find(name);
    OAR_CHECK(it != lane.end(), kInternal, "pipeline llama: stage {} lane {} has no {}", s, l, name);
    return *it->second;
  }
  // Stage s's forward of micro-batch `micro` on lane l (rows [(l · micro-batches + micro) · rows, + rows) of
  // the batch, as PipelineLlamaExample cuts it).
  Tensor Forward(int64_t s, int64_t l, int64_t pp, int64_t micro, const Tensor& in) {
    namespace d = distributed;
    const LlamaConfig& c = base_.config();
    const d::ProcessMesh& sub = meshes_[static_cast<size_t>(Slot(s, l))];
    const d::Placements rep{d::Placement::Replicate()};
    const int64_t t = c.context, rows = c.batch / dp_ / micro_;
    const auto at = static_cast<std::ptrdiff_t>((l * micro_ + micro) * rows * t),
               n = static_cast<std::ptrdiff_t>(rows * t);
    auto tokens = [&](const std::vector<int64_t>& v, const Dims& shape) {
      return d::shard_tensor(FromVector<int64_t>(std::vector<int64_t>(v.begin() + at, v.begin() + at + n), shape,
                                                 Device("cpu")),
                             sub, rep);
    };
    d::DistTensor h = s == 0 ? d::embedding(P(s, l, "tok_emb.weight"), tokens(xs_, {rows, t}))
                             : d::shard_tensor(in, sub, rep).set_annotated(false);
    // Sequence parallel: the stage's replicated input sliced on the sequence (local), gathered again for
    // the next stage or the replicated head.
    if (sequence_parallel_) h = d::ScatterSequence(h, 0, 1);
    h = TensorParallelLayers(
        c, h, firsts_[static_cast<size_t>(s)], lasts_[static_cast<size_t>(s)],
        [this, s, l](const std::string& name) -> const d::DistTensor& { return P(s, l, name); }, sequence_parallel_);
    if (s + 1 < pp) return d::Reshard(h, rep).local(sub.first_local());
    d::DistTensor normed = d::rms_norm(h, 1, P(s, l, "norm.weight"));
    if (sequence_parallel_) normed = d::GatherSequence(normed, 0);
    const d::DistTensor logits = d::matmul(normed, d::transpose(P(s, l, "tok_emb.weight"), 0, 1));
    const d::DistTensor loss = d::cross_entropy(d::reshape(logits, {rows * t, c.vocab}), tokens(ys_, {rows * t}));
    return d::Reshard(loss, rep).local(sub.first_local());
  }
  // This process's (stage, dp lane, tp rank) with one rank per process.
  std::array<int64_t, 3> Me() const {
    const std::vector<int64_t> me = mesh_.Coord(mesh_.first_local());
    return {me[static_cast<size_t>(mesh_.DimIndex("pp"))], my_lane_, me[static_cast<size_t>(mesh_.DimIndex("tp"))]};
  }
  // One rank per process: the rest of TrainStep. This process holds stage s's lane l, tp rank k.
  double StepProcess(const distributed::PipelineResult& r) {
    namespace d = distributed;
    NoGradGuard no_grad;
    const int64_t pp = pipe_->num_stages();
    const auto [s, l, k] = Me();
    auto& mine = params_[static_cast<size_t>(Slot(s, l))];
    if (dp_ > 1) {  // the lanes' mean: this shard in every lane
      std::vector<int> lanes;
      for (int64_t j = 0; j < dp_; ++j) lanes.push_back(static_cast<int>(RankAt(s, j, k)));
      d::ProcessGroup& g = d::ProcessGroup::Subgroup(lanes);
      for (auto& [name, t] : mine) {
        Tensor& w = t->mutable_locals()[static_cast<size_t>(k)];
        Tensor grad = w.grad();
        g.AllReduce(grad, runtime::ReduceOp::kAvg);
        w.mutable_autograd_meta().grad = grad;
      }
    }
    if (pp > 1 && (s == 0 || s + 1 == pp)) {  // the tied weight: one gradient for both copies (stage 0 + head)
      Tensor& w = mine.at("tok_emb.weight")->mutable_locals()[static_cast<size_t>(k)];
      Tensor grad = w.grad();
      d::ProcessGroup::Subgroup({static_cast<int>(RankAt(0, l, k)), static_cast<int>(RankAt(pp - 1, l, k))})
          .AllReduce(grad, runtime::ReduceOp::kSum);
      w.mutable_autograd_meta().grad = grad;
    }
    ClipGradients(1.0);
    opt_->Step();
    double loss = 0;
    if (s + 1 == pp && k == 0) {
      for (const Tensor& x : r.losses) loss += x.to(Device("cpu")).item<float>();
    }
    Tensor t = full({}, loss, DType::kFloat64, Device("cpu"));
    d::ProcessGroup::World().AllReduce(t, runtime::ReduceOp::kSum);
    return t.item<double>() / static_cast<double>(micro_ * dp_);
  }
  // optim::ClipGradNorm over the whole parameters, each element once (lane 0's — after the mean every lane
  // holds the same —, shards on their rank, replicated parameters on tp rank 0, the tied weight on stage 0).
  void ClipGradients(double max_norm) {
    NoGradGuard no_grad;
    double total = 0;
    for (int64_t s = 0; s < pipe_->num_stages(); ++s) {
      if (mesh_.multi_process() && my_lane_ != 0) break;
      for (auto& [name, t] : params_[static_cast<size_t>(Slot(s, 0))]) {
        if (s > 0 && name == "tok_emb.weight") continue;
        for (size_t k = 0; k < t->locals().size(); ++k) {
          if (!t->locals()[k].defined()) continue;  // another process's rank
          const Tensor g = t->locals()[k].grad();
          if (g.defined() && (!t->placements()[0].is_replicate() || k == 0)) total += sum(g * g).to(Device("cpu")).item<double>();
        }
      }
    }
    if (mesh_.multi_process()) {  // each process summed what it holds
      Tensor t = full({}, total, DType::kFloat64, Device("cpu"));
      distributed::ProcessGroup::World().AllReduce(t, runtime::ReduceOp::kSum);
      total = t.item<double>();
    }
    const double norm = std::sqrt(total);
    if (norm <= max_norm) return;
    const double scale = max_norm / (norm + 1e-6);
    for (auto& lane : params_) {
      for (auto& [name, t] : lane) {
        for (Tensor& x : t->mutable_locals()) {
          if (x.defined() && x.grad().defined()) x.mutable_autograd_meta().grad = x.grad() * scale;
        }
      }
    }
  }
  // The trained weights back into the wrapped one-device model (lane 0's, the tied weight from stage 0). With
  // one rank per process, every process gets them: FullTensor gathers over the stage lane's tp ranks, then
  // an all_reduce (sum) over the job per parameter to which only tp rank 0 of lane 0 of the stage holding it
  // contributes.
  void SyncToBase() {
    NoGradGuard no_grad;
    std::map<std::string, Tensor> trained;
    for (int64_t s = pipe_->num_stages(); s-- > 0;) {
      for (int64_t l = dp_; l-- > 0;) {  // lane 0's last, so its weights are the ones kept
        for (auto& [name, t] : params_[static_cast<size_t>(Slot(s, l))]) trained[name] = distributed::FullTensor(*t);
      }
    }
    if (!mesh_.multi_process()) {
      for (auto& [name, p] : base_.module().NamedParameters()) p->copy_(trained.at(name).to(p->device()));
      return;
    }
    const auto [s, l, k] = Me();
    for (auto& [name, p] : base_.module().NamedParameters()) {
      auto it = trained.find(name);
      const bool holder = l == 0 && k == 0 && it != trained.end() && (name != "tok_emb.weight" || s == 0);
      Tensor v = holder ? it->second.to(Device("cpu")).clone() : zeros(p->shape(), p->dtype(), Device("cpu"));
      distributed::ProcessGroup::World().AllReduce(v, runtime::ReduceOp::kSum);
      p->copy_(v.to(p->device()));
    }
  }

  distributed::ProcessMesh mesh_;
  LlamaExample base_;
  bool sequence_parallel_ = false;
  distributed::PipelineSchedule schedule_ = distributed::PipelineSchedule::k1F1B;
  int64_t micro_ = 1, dp_ = 1, my_lane_ = 0;
  std::vector<distributed::ProcessMesh> meshes_;  // per stage lane [stage * dp + lane]: its tp devices
  std::vector<int64_t> firsts_, lasts_;           // per stage: its layers
  std::vector<std::map<std::string, std::unique_ptr<distributed::DistTensor>>> params_;  // per stage lane
  std::vector<std::unique_ptr<distributed::Group>> groups_;  // one process, dp > 1: [stage * tp + tp rank]
  std::unique_ptr<optim::AdamW> opt_;
  std::unique_ptr<distributed::Pipeline> pipe_;
  std::vector<int64_t> xs_, ys_;
};

LlamaExample& AsLlama(Example& e) {
  if (auto* p = dynamic_cast<PipelineTensorParallelLlamaExample*>(&e)) return p->base();
  if (auto* p = dynamic_cast<ParallelLlamaExample*>(&e)) return p->base();
  if (auto* p = dynamic_cast<PipelineLlamaExample*>(&e)) return p->base();
  auto* l = dynamic_cast<LlamaExample*>(&e);
  OAR_CHECK_ARG(l != nullptr, "this needs a llama checkpoint, got a '{}' model", e.kind());
  return *l;
}

}  // namespace

std::unique_ptr<Example> MakeParallelExample(const std::string& kind, const distributed::ProcessMesh& mesh,
                                             uint64_t seed, const ParallelOptions& options) {
  OAR_CHECK_ARG(kind == "llama", "--mesh: only the llama example runs over a mesh so far, got '{}'", kind);
  const auto& names = mesh.dim_names();
  const bool pipelined = std::find(names.begin(), names.end(), "pp") != names.end();
  OAR_CHECK_ARG(pipelined || (options.schedule == "1f1b" && options.micro_batches == 0),
                "--schedule and --micro-batches need a pipeline dim in --mesh (e.g. pp=2); got --mesh {}",
                mesh.ToString());
  const bool tensor_parallel = std::find(names.begin(), names.end(), "tp") != names.end();
  OAR_CHECK_ARG(tensor_parallel || !options.sequence_parallel,
                "--sequence-parallel shards the activations on the tensor-parallel mesh dim: --mesh needs a 'tp' "
                "dim, got --mesh {}",
                mesh.ToString());
  try {
    if (pipelined && tensor_parallel) {
      return std::make_unique<PipelineTensorParallelLlamaExample>(mesh, seed, options);
    }
    if (pipelined) return std::make_unique<PipelineLlamaExample>(mesh, seed, options);
    return std::make_unique<ParallelLlamaExample>(mesh, seed, options.sequence_parallel);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotFound) throw;
    Throw(ErrorCode::kInvalidArgument,
          "--mesh {} needs {} devices: {} (a simulator's device count is set by OAR_<NAME>_DEVICES, e.g. "
          "OAR_KUNLUN_SIM_DEVICES=4)",
          mesh.ToString(), mesh.numel(), e.what());
  }
}

void SetDataParallel(Example& e, int rank, int size, std::function<void(Tensor&)> all_reduce_mean) {
  auto* l = dynamic_cast<LlamaExample*>(&e);
  OAR_CHECK_ARG(l != nullptr, "data parallel across processes: only the llama example so far, got '{}'", e.kind());
  l->SetDataParallel(rank, size, std::move(all_reduce_mean));
}

std::vector<std::string> ExampleKinds() { return {"mlp", "cnn", "llama"}; }

std::unique_ptr<Example> MakeExample(const std::string& kind, Device device, uint64_t seed) {
  std::unique_ptr<Example> e;
  if (kind != "mlp" && kind != "cnn" && kind != "llama") {
    Throw(ErrorCode::kInvalidArgument, "unknown model '{}'; known models: mlp, cnn, llama", kind);
  }
  (void)zeros({1}, DType::kFloat32, device);  // an unknown or unusable device fails here, clearly
  if (kind == "mlp") e = std::make_unique<MlpExample>(device, seed);
  if (kind == "cnn") e = std::make_unique<CnnExample>(device, seed);
  if (kind == "llama") e = std::make_unique<LlamaExample>(device, seed);
  return e;
}

Tensor Example::EagerStep(int64_t step, int64_t total) {
  const std::vector<Tensor> batch = Batch(step, total);
  const std::vector<double> values = optimizer().NextStepScalars();
  return TrainOn(batch, [&](size_t k, DType dtype, Device device) { return full({}, values.at(k), dtype, device); })[0];
}

double Example::TrainStep(int64_t step, int64_t total) { return EagerStep(step, total).to(Device("cpu")).item<float>(); }

std::vector<Tensor> Example::Batch(int64_t, int64_t) { Throw(ErrorCode::kUnimplemented, "{}", NotCapturable()); }
std::vector<Tensor> Example::TrainOn(std::span<const Tensor>, const optim::Optimizer::ScalarFn&) {
  Throw(ErrorCode::kUnimplemented, "{}", NotCapturable());
}
optim::Optimizer& Example::optimizer() { Throw(ErrorCode::kUnimplemented, "{}", NotCapturable()); }
InferenceForward Example::ExportForward(int64_t, int64_t) { Throw(ErrorCode::kUnimplemented, "{}", NotCapturable()); }
std::string Example::NotCapturable() const {
  return fmt::format("the {} example in this configuration (over a mesh) has no single-device step to capture or "
                     "forward to export; --static and export work on one device",
                     kind());
}

namespace {

std::vector<double> TrainLoop(int64_t steps, int64_t log_every, const std::function<void(int64_t, double)>& log,
                              const std::function<void(int64_t, int64_t)>& progress,
                              const std::function<double(int64_t)>& step) {
  if (log_every <= 0) log_every = std::max<int64_t>(1, steps / 10);
  std::vector<double> losses;
  losses.reserve(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i) {
    losses.push_back(step(i));
    if (log && (i % log_every == 0 || i + 1 == steps)) log(i, losses.back());
    if (progress) progress(i + 1, steps);
  }
  return losses;
}

}  // namespace

std::vector<double> Train(Example& example, int64_t steps, int64_t log_every,
                          const std::function<void(int64_t, double)>& log,
                          const std::function<void(int64_t, int64_t)>& progress) {
  if (steps < 0) steps = example.default_steps();
  return TrainLoop(steps, log_every, log, progress, [&](int64_t i) { return example.TrainStep(i, steps); });
}

std::vector<double> TrainStatic(Example& example, int64_t steps, int64_t log_every,
                                const std::function<void(int64_t, double)>& log,
                                const std::function<void(int64_t, int64_t)>& progress, jit::StaticFunction::Stats* stats,
                                scheduler::RunProfile* profile, const std::string& fusion_passes) {
  if (steps < 0) steps = example.default_steps();
  std::vector<jit::StateSlot> state = StateOf(example.module());
  for (auto& [name, t] : example.optimizer().NamedState()) state.push_back({name, t});
  const std::vector<Tensor*> params = example.module().Parameters();
  OAR_CHECK_ARG(!params.empty(), "TrainStatic: the model has no parameters");
  // The optimiser's host numbers enter as 0-d inputs of the parameters' dtype: the values eager fills in.
  const DType scalar_dtype = params[0]->dtype();
  size_t num_batch = 0;
  jit::StaticFunction step_fn(
      [&](std::span<const Tensor> in) {
        return example.TrainOn(in.first(num_batch), [&](size_t k, DType dtype, Device) {
          return cast(in[num_batch + k], dtype);
        });
      },
      state, example.device());
  step_fn.set_profile(profile);
  step_fn.set_fusion_passes(fusion_passes);
  std::vector<double> losses = TrainLoop(steps, log_every, log, progress, [&](int64_t i) {
    std::vector<Tensor> inputs = example.Batch(i, steps);
    num_batch = inputs.size();
    for (double v : example.optimizer().NextStepScalars()) inputs.push_back(full({}, v, scalar_dtype, example.device()));
    return static_cast<double>(step_fn(inputs)[0].to(Device("cpu")).item<float>());
  });
  if (stats != nullptr) *stats = step_fn.stats();
  return losses;
}

double UnigramEntropy(Example& llama) { return AsLlama(llama).Unigram(); }

InferenceForward DecodeForward(Example& llama, int64_t batch, int64_t max_positions) {
  return AsLlama(llama).DecodeForward(batch, max_positions);
}

std::string Generate(Example& llama, const std::string& prompt, int64_t max_new_tokens, int64_t top_k,
                     uint64_t sample_seed) {
  return AsLlama(llama).Generate(prompt, max_new_tokens, top_k, sample_seed);
}

}  // namespace oar::examples
