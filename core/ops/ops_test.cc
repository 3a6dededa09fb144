// End to end through the real cpu plugin: eager ops, views, host access, serialization and errors.
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "core/ops/ops.h"
#include "core/ops/output_allocator.h"
#include "core/runtime/copy.h"

namespace oar {
namespace {

Tensor F32(std::vector<float> v, const Dims& shape) { return FromVector<float>(v, shape, Device("cpu")); }

TEST(Ops, AddBroadcastsAndSubMulDivAgree) {
  Tensor a = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = F32({10, 20, 30}, {3});
  EXPECT_EQ((a + b).ToVector<float>(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ((a - b).ToVector<float>(), (std::vector<float>{-9, -18, -27, -6, -15, -24}));
  EXPECT_EQ((a * F32({2}, {1})).ToVector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ((b / 10.0).ToVector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor col = F32({1, 2}, {2, 1});
  EXPECT_EQ((col + b).shape(), (Dims{2, 3}));
  EXPECT_EQ((col + b).ToVector<float>(), (std::vector<float>{11, 21, 31, 12, 22, 32}));
}

TEST(Ops, NonContiguousInputsGiveTheSameAnswer) {
  Tensor a = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = a.transpose(0, 1);  // [[1,4],[2,5],[3,6]]
  EXPECT_EQ((t + F32({0, 0, 0, 0, 0, 0}, {3, 2})).ToVector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(t.contiguous().ToVector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(a.slice(1, 0, 3, 2).ToVector<float>(), (std::vector<float>{1, 3, 4, 6}));
  EXPECT_EQ(t.reshape({6}).ToVector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Ops, UnaryOps) {
  Tensor x = F32({-1, 0, 2}, {3});
  EXPECT_EQ(neg(x).ToVector<float>(), (std::vector<float>{1, 0, -2}));
  EXPECT_EQ(relu(x).ToVector<float>(), (std::vector<float>{0, 0, 2}));
  const std::vector<float> e = exp(x).ToVector<float>();
  EXPECT_NEAR(e[0], std::exp(-1.0f), 1e-6);
  EXPECT_NEAR(e[2], std::exp(2.0f), 1e-5);
}

TEST(Ops, MatmulBatchedBroadcastTransposedAndVector) {
  Tensor a = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = F32({1, 0, 0, 1, 1, 1}, {3, 2});
  EXPECT_EQ(matmul(a, b).ToVector<float>(), (std::vector<float>{4, 5, 10, 11}));
  // a^T as a strided view: [3,2] x [2,3]
  EXPECT_EQ(matmul(a.transpose(0, 1), a).shape(), (Dims{3, 3}));
  EXPECT_EQ(matmul(a.transpose(0, 1), a).ToVector<float>(), (std::vector<float>{17, 22, 27, 22, 29, 36, 27, 36, 45}));
  // batch broadcast: [2,2,3] x [3,2]
  Tensor batch = F32({1, 2, 3, 4, 5, 6, 0, 0, 0, 1, 1, 1}, {2, 2, 3});
  EXPECT_EQ(matmul(batch, b).ToVector<float>(), (std::vector<float>{4, 5, 10, 11, 0, 0, 2, 2}));
  // vectors
  EXPECT_EQ(matmul(a, F32({1, 1, 1}, {3})).ToVector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(matmul(F32({1, 1}, {2}), a).shape(), (Dims{3}));
}

TEST(Ops, ReductionsOverAxes) {
  Tensor a = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(a).item<float>(), 21.0f);
  EXPECT_EQ(sum(a, {0}).ToVector<float>(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum(a, {-1}, true).shape(), (Dims{2, 1}));
  EXPECT_EQ(sum(a, {-1}, true).ToVector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(mean(a, {1}).ToVector<float>(), (std::vector<float>{2, 5}));
  EXPECT_EQ(sum(a.transpose(0, 1), {1}).ToVector<float>(), (std::vector<float>{5, 7, 9}));
  EXPECT_THROW(sum(a, {2}), Error);
  EXPECT_THROW(sum(a, {0, -2}), Error);
}

TEST(Ops, CastFillArangeAndItem) {
  Tensor x = F32({1.7f, -1.7f, 300.0f}, {3});
  EXPECT_EQ(cast(x, DType::kInt32).ToVector<int32_t>(), (std::vector<int32_t>{1, -1, 300}));
  EXPECT_EQ(cast(x, DType::kInt8).ToVector<int32_t>(), (std::vector<int32_t>{1, -1, 127}));  // saturates
  EXPECT_EQ(x.to(DType::kBFloat16).to(DType::kFloat32).ToVector<float>()[0], 1.703125f);
  EXPECT_EQ(full({2, 2}, 7, DType::kInt64, Device("cpu")).ToVector<int64_t>(), (std::vector<int64_t>{7, 7, 7, 7}));
  EXPECT_EQ(arange(0, 5, 2, DType::kInt64, Device("cpu")).ToVector<int64_t>(), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(zeros({0, 3}, DType::kFloat32, Device("cpu")).numel(), 0);
  EXPECT_THROW(x.item<float>(), Error);
}

TEST(Ops, SeededRandomIsReproducible) {
  Generator g1(42), g2(42), g3(43);
  const auto a = randn({100}, g1, 0, 1, DType::kFloat32, Device("cpu")).ToVector<float>();
  const auto b = randn({100}, g2, 0, 1, DType::kFloat32, Device("cpu")).ToVector<float>();
  const auto c = randn({100}, g3, 0, 1, DType::kFloat32, Device("cpu")).ToVector<float>();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double m = 0;
  for (float v : a) m += v;
  EXPECT_LT(std::abs(m / 100), 0.35);
}

TEST(Ops, OutputAllocatorIsUsedWhileInstalledThenRestored) {
  const Tensor a = ones({2, 3});
  int calls = 0;
  {
    ops::ScopedOutputAllocator outer([&](const Dims& shape, DType dtype, Device device) {
      ++calls;
      return runtime::Empty(shape, dtype, device);
    });
    EXPECT_EQ((a + a).ToVector<float>(), std::vector<float>(6, 2.0f));
    EXPECT_EQ(calls, 1);
    {
      int inner_calls = 0;
      ops::ScopedOutputAllocator inner([&](const Dims& shape, DType dtype, Device device) {
        ++inner_calls;
        return runtime::Empty(shape, dtype, device);
      });
      (void)sum(a);
      EXPECT_EQ(inner_calls, 1);
    }
    (void)exp(a);  // the outer one is back
    EXPECT_EQ(calls, 2);
  }
  (void)exp(a);  // none installed: runtime::Empty
  EXPECT_EQ(calls, 2);
}

TEST(Ops, BadInputIsAClearError) {
  Tensor a = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  auto expect = [](auto&& fn, ErrorCode code, const std::string& fragment) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect([&] { a + F32({1, 2}, {2}); }, ErrorCode::kInvalidArgument, "add: shapes [2, 3] and [2] are not broadcastable");
  expect([&] { a + cast(a, DType::kInt64); }, ErrorCode::kInvalidArgument, "different dtypes");
  expect([&] { matmul(a, a); }, ErrorCode::kInvalidArgument, "matmul: a [2, 3] and b [2, 3] do not chain");
  expect([&] { div(cast(a, DType::kInt32), cast(a, DType::kInt32)); }, ErrorCode::kInvalidArgument,
         "div: argument 'a' has dtype int32; expected one of float32");
  expect([&] { a.to(Device("nosuch:0")); }, ErrorCode::kNotFound, "unknown device 'nosuch:0'; available devices:");
  expect([&] { Tensor().shape(); }, ErrorCode::kFailedPrecondition, "undefined");
}

TEST(Ops, SafetensorsRoundTripFromDevice) {
  Tensor a = F32({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  const auto path = std::filesystem::temp_directory_path() / ("oar_ops_test.safetensors." + std::to_string(::getpid()));
  SaveTensors(path, {{"a", a}, {"n", arange(0, 3, 1, DType::kInt64, Device("cpu"))}});
  auto loaded = LoadTensors(path, Device("cpu"));
  EXPECT_EQ(loaded.at("a").shape(), (Dims{3, 2}));
  EXPECT_EQ(loaded.at("a").ToVector<float>(), a.ToVector<float>());
  EXPECT_EQ(loaded.at("n").ToVector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  std::filesystem::remove(path);
}

TEST(Ops, PrintsReadably) {
  const std::string s = F32({1, 2, 3, 4}, {2, 2}).ToString();
  EXPECT_NE(s.find("Tensor(cpu:0, float32, [2, 2])"), std::string::npos) << s;
  EXPECT_NE(s.find("[[1, 2],\n [3, 4]]"), std::string::npos) << s;
}

}  // namespace
}  // namespace oar
