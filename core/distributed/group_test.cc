// Collectives through the core on both simulators (their in-process CCL), against results computed on
// the host; data-parallel training on two devices against one device with the whole batch.
#include "core/distributed/group.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/nn/layers.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/optim/optim.h"
#include "core/runtime/runtime.h"
#include "core/runtime/testing.h"

namespace oar::distributed {
namespace {

const bool kConfigured = runtime::testing::UseOnlyPlugins(OAR_PLUGIN_DIR, {"cpu", "kunlun_sim", "ascend_sim"});

std::vector<float> Values(int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(std::round(g.NextNormal() * 8));  // small integers: exact sums
  return v;
}

class Collectives : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<Device> Devices() const { return {Device(GetParam() + ":0"), Device(GetParam() + ":1")}; }
};

TEST_P(Collectives, AllReduceEveryOpMatchesTheHost) {
  ASSERT_TRUE(kConfigured);
  Group group(Devices());
  const int64_t n = 1000;
  const std::vector<float> a = Values(n, 1), b = Values(n, 2);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    const std::vector<Tensor> t = {FromVector<float>(a, {n}, Devices()[0]), FromVector<float>(b, {n}, Devices()[1])};
    group.AllReduce(t, op);
    std::vector<float> want(static_cast<size_t>(n));
    for (size_t i = 0; i < want.size(); ++i) {
      switch (op) {
        case ReduceOp::kSum:
          want[i] = a[i] + b[i];
          break;
        case ReduceOp::kMax:
          want[i] = std::max(a[i], b[i]);
          break;
        case ReduceOp::kMin:
          want[i] = std::min(a[i], b[i]);
          break;
        default:
          want[i] = (a[i] + b[i]) / 2;
          break;
      }
    }
    EXPECT_EQ(t[0].ToVector<float>(), want) << static_cast<int>(op);
    EXPECT_EQ(t[1].ToVector<float>(), want) << static_cast<int>(op);
  }
}

TEST_P(Collectives, BroadcastAllGatherReduceScatterSendRecv) {
  Group group(Devices());
  const std::vector<float> a = Values(12, 3), b = Values(12, 4);
  auto make = [&] {
    return std::vector<Tensor>{FromVector<float>(a, {4, 3}, Devices()[0]), FromVector<float>(b, {4, 3}, Devices()[1])};
  };
  std::vector<Tensor> t = make();
  group.Broadcast(t, 1);
  EXPECT_EQ(t[0].ToVector<float>(), b);

  t = make();
  const std::vector<Tensor> gathered = group.AllGather(t);
  std::vector<float> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  for (const Tensor& g : gathered) {
    EXPECT_EQ(g.shape(), (Dims{2, 4, 3}));
    EXPECT_EQ(g.ToVector<float>(), ab);
  }

  const std::vector<Tensor> scattered = group.ReduceScatter(t, ReduceOp::kSum);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(scattered[r].shape(), (Dims{2, 3}));
    std::vector<float> want(6);
    for (size_t i = 0; i < 6; ++i) want[i] = a[r * 6 + i] + b[r * 6 + i];
    EXPECT_EQ(scattered[r].ToVector<float>(), want) << "rank " << r;
  }

  const Tensor dst = zeros({4, 3}, DType::kFloat32, Devices()[1]);
  group.SendRecv(t[0], 0, dst, 1);
  EXPECT_EQ(dst.ToVector<float>(), a);
}

TEST_P(Collectives, BadCallsAreClearErrors) {
  Group group(Devices());
  const Tensor x0 = zeros({3}, DType::kFloat32, Devices()[0]), x1 = zeros({4}, DType::kFloat32, Devices()[1]);
  try {
    group.AllReduce(std::vector<Tensor>{x0, x1}, ReduceOp::kSum);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rank 1 has shape [4], rank 0 has [3]"), std::string::npos) << e.what();
  }
  try {
    group.AllReduce(std::vector<Tensor>{x1.slice(0, 0, 3), x0}, ReduceOp::kSum);  // swapped devices
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the tensor of rank 0 is on " + GetParam() + ":1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Group({Devices()[0], Devices()[0]}), Error);
}

INSTANTIATE_TEST_SUITE_P(Sims, Collectives, ::testing::Values("kunlun_sim", "ascend_sim"));

TEST(Group, ADeviceTypeWithoutCclSaysSo) {
  try {
    Group g({Device("cpu:0")});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("device type 'cpu' has no collective communication"), std::string::npos)
        << e.what();
  }
}

/// Two layers, built the same on any device from one seed.
struct Mlp : nn::Module {
  Mlp(Device device) {
    Generator gen(11);
    nn::Options o;
    o.device = device;
    l1 = RegisterModule("l1", std::make_shared<nn::Linear>(6, 16, true, gen, o));
    l2 = RegisterModule("l2", std::make_shared<nn::Linear>(16, 3, true, gen, o));
  }
  Tensor Forward(const Tensor& x) { return (*l2)(relu((*l1)(x))); }
  std::shared_ptr<nn::Linear> l1, l2;
};

TEST(DataParallel, TwoKunlunDevicesWithHalfBatchesMatchOneWithTheWholeBatch) {
  const std::vector<Device> devices = {Device("kunlun_sim:0"), Device("kunlun_sim:1")};
  Group group(devices);
  Mlp single(devices[0]), rank0(devices[0]), rank1(devices[1]);
  optim::SGD opt_single(single.Parameters(), 0.05);
  optim::SGD opt0(rank0.Parameters(), 0.05), opt1(rank1.Parameters(), 0.05);
  Generator data(5);
  for (int step = 0; step < 8; ++step) {
    const Tensor x = randn({8, 6}, data), y = randn({8, 3}, data);  // on cpu
    // One device, the whole batch.
    single.ZeroGrad();
    mse_loss(single.Forward(x.to(devices[0])), y.to(devices[0])).backward();
    opt_single.Step();
    // Two devices, half a batch each, gradients averaged (equal halves: the mean of the halves' mean
    // losses is the whole batch's mean loss).
    rank0.ZeroGrad();
    rank1.ZeroGrad();
    mse_loss(rank0.Forward(x.slice(0, 0, 4).to(devices[0])), y.slice(0, 0, 4).to(devices[0])).backward();
    mse_loss(rank1.Forward(x.slice(0, 4, 8).to(devices[1])), y.slice(0, 4, 8).to(devices[1])).backward();
    std::vector<nn::Module*> replicas = {&rank0, &rank1};
    AverageGradients(group, replicas);
    opt0.Step();
    opt1.Step();
  }
  const auto ps = single.Parameters(), p0 = rank0.Parameters(), p1 = rank1.Parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::vector<float> s = ps[i]->ToVector<float>(), a = p0[i]->ToVector<float>(), b = p1[i]->ToVector<float>();
    EXPECT_EQ(a, b) << "replicas diverged at parameter " << i;
    for (size_t k = 0; k < s.size(); ++k) EXPECT_NEAR(a[k], s[k], 1e-5f * (1 + std::abs(s[k]))) << i << "," << k;
  }
}

}  // namespace
}  // namespace oar::distributed
