// The small classifier that the capture and the Predictor tests trace, save and serve: two Linear layers,
// tanh, views whose extents carry the batch (so capture must generalise them), softmax.
#ifndef OAR_CORE_JIT_NET_TESTING_H_
#define OAR_CORE_JIT_NET_TESTING_H_

#include <span>
#include <vector>

#include "core/jit/capture.h"
#include "core/nn/layers.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd_meta.h"

namespace oar::jit::testing_net {

class Net {
 public:
  explicit Net(uint64_t seed) : gen_(seed), fc1_(4, 8, true, gen_), fc2_(8, 3, true, gen_) {}
  Tensor Forward(const Tensor& x) {
    const Tensor h = tanh(fc1_.Forward(x));
    const Tensor flat = h.reshape({x.dim(0) * 8}).reshape({x.dim(0), 8});  // views with the batch in them
    return softmax(fc2_.Forward(flat), -1);
  }
  std::vector<StateSlot> Slots() {
    return {{"fc1.weight", &fc1_.weight}, {"fc1.bias", fc1_.bias}, {"fc2.weight", &fc2_.weight},
            {"fc2.bias", fc2_.bias}};
  }
  Function Fn() {
    return [this](std::span<const Tensor> in) {
      NoGradGuard no_grad;
      return std::vector<Tensor>{Forward(in[0])};
    };
  }

 private:
  Generator gen_;
  nn::Linear fc1_, fc2_;
};

inline std::vector<InputSpec> BatchSpec() {
  return {{"x", DType::kFloat32, {DimSpec::Symbol("B"), DimSpec::Static(4)}}};
}

}  // namespace oar::jit::testing_net

#endif  // OAR_CORE_JIT_NET_TESTING_H_
