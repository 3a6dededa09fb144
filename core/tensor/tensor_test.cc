// Metadata-only behaviour of Tensor (no kernels, no plugins): views, broadcasting, DLPack, Device names.
#include <cstdlib>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/tensor/dlpack.h"
#include "core/tensor/tensor.h"

namespace oar {
namespace {

// A host-memory tensor holding 0, 1, 2, ... (device "cpu" is only a label here).
Tensor Iota(const Dims& shape) {
  const int64_t n = shape.Product();
  auto* data = static_cast<float*>(std::malloc(sizeof(float) * std::max<int64_t>(n, 1)));
  std::iota(data, data + n, 0.0f);
  auto storage = std::make_shared<Storage>(Device("cpu"), data, sizeof(float) * n,
                                           [](void*, void* p, size_t) { std::free(p); }, nullptr);
  return Tensor(storage, DType::kFloat32, shape, ContiguousStrides(shape), 0);
}

float At(const Tensor& t, std::initializer_list<int64_t> index) {
  int64_t off = t.offset();
  int i = 0;
  for (int64_t x : index) off += x * t.strides()[i++];
  return static_cast<const float*>(t.storage()->data())[off];
}

TEST(Device, ParsesNamesAndRejectsMalformedOnes) {
  EXPECT_EQ(Device("cuda:1").type(), "cuda");
  EXPECT_EQ(Device("cuda:1").index(), 1);
  EXPECT_EQ(Device("ascend_sim").str(), "ascend_sim:0");
  EXPECT_EQ(Device("cpu"), Device("cpu", 0));
  EXPECT_NE(Device("cpu:1"), Device("cpu:0"));
  for (const char* bad : {"", "CUDA", "cuda:", "cuda:x", "cuda:-1", ":1", "cu da", "cuda:1:2"}) {
    EXPECT_THROW(Device{bad}, Error) << bad;
  }
}

TEST(DType, ParsesNamesAndAliasesAndRejectsOthers) {
  EXPECT_EQ(ParseDType("float32"), DType::kFloat32);
  EXPECT_EQ(ParseDType("bf16"), DType::kBFloat16);
  EXPECT_EQ(ParseDType("half"), DType::kFloat16);
  EXPECT_EQ(ParseDType("int64"), DType::kInt64);
  try {
    ParseDType("float8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'float8'"), std::string::npos) << e.what();
  }
}

TEST(TensorViews, TransposeAndPermuteSwapStrides) {
  Tensor t = Iota({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Dims{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Dims{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(At(p, {3, 1, 2}), At(t, {1, 2, 3}));
  EXPECT_EQ(t.transpose(0, -1).shape(), (Dims{4, 3, 2}));
  EXPECT_THROW(t.permute({0, 0, 1}), Error);
  EXPECT_THROW(t.permute({0, 1}), Error);
  EXPECT_THROW(t.transpose(0, 3), Error);
}

TEST(TensorViews, SliceFollowsPythonSemantics) {
  Tensor t = Iota({10});
  Tensor s = t.slice(0, 2, 9, 3);  // 2, 5, 8
  EXPECT_EQ(s.shape(), (Dims{3}));
  EXPECT_EQ(At(s, {2}), 8.0f);
  EXPECT_EQ(t.slice(0, -3, 100).shape(), (Dims{3}));
  EXPECT_EQ(t.slice(0, 7, 3).numel(), 0);
  EXPECT_THROW(t.slice(0, 0, 5, 0), Error);
}

TEST(TensorViews, ViewNeedsCompatibleStrides) {
  Tensor t = Iota({2, 3, 4});
  EXPECT_EQ(t.view({6, -1}).shape(), (Dims{6, 4}));
  EXPECT_EQ(t.view({-1}).strides(), (Dims{1}));
  // Splitting and merging within one contiguous chunk works on a permuted tensor...
  Tensor p = t.permute({1, 0, 2});  // [3, 2, 4], strides [4, 12, 1]
  EXPECT_EQ(p.view({3, 2, 2, 2}).strides(), (Dims{4, 12, 2, 1}));
  // ...merging dims that are not adjacent in memory does not.
  EXPECT_THROW(p.view({6, 4}), Error);
  EXPECT_THROW(t.view({5, 5}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
}

TEST(TensorViews, ExpandSqueezeUnsqueeze) {
  Tensor t = Iota({3, 1});
  Tensor e = t.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Dims{0, 1, 0}));
  EXPECT_EQ(At(e, {1, 2, 3}), 2.0f);
  EXPECT_THROW(t.expand({3, 2, 2}).shape(), Error);  // 3 -> 2 is not a broadcast
  EXPECT_EQ(t.squeeze(1).shape(), (Dims{3}));
  EXPECT_EQ(t.squeeze(0).shape(), (Dims{3, 1}));  // not size 1: unchanged
  EXPECT_EQ(t.unsqueeze(0).shape(), (Dims{1, 3, 1}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Dims{3, 1, 1}));
  EXPECT_THROW(t.unsqueeze(4), Error);
}

// Tensor::WithNewStorage puts the Storage and the TensorImpl in one allocation: the storage (and its
// bytes) must live exactly as long as the last tensor or storage reference, whichever goes last.
struct FreeCounter {
  int frees = 0;
  static void Delete(void* context, void* data, size_t) {
    ++static_cast<FreeCounter*>(context)->frees;
    std::free(data);
  }
};

TEST(TensorHandle, CoAllocatedStorageOutlivesItsFirstTensorWhileViewsRemain) {
  FreeCounter counter;
  auto* data = static_cast<float*>(std::malloc(sizeof(float) * 6));
  std::iota(data, data + 6, 0.0f);
  const Dims shape{2, 3};
  Tensor view;
  std::shared_ptr<Storage> kept;
  {
    Tensor t = Tensor::WithNewStorage(Device("cpu"), data, sizeof(float) * 6, &FreeCounter::Delete, &counter,
                                      DType::kFloat32, shape, ContiguousStrides(shape));
    EXPECT_EQ(t.shape(), shape);
    EXPECT_EQ(t.offset(), 0);
    EXPECT_EQ(t.data_ptr(), data);
    view = t.transpose(0, 1);
    kept = t.storage();
  }
  EXPECT_EQ(counter.frees, 0);  // the view and `kept` still hold the storage
  EXPECT_EQ(At(view, {2, 1}), 5.0f);
  view = Tensor();
  EXPECT_EQ(counter.frees, 0);
  EXPECT_EQ(static_cast<float*>(kept->data())[4], 4.0f);
  kept.reset();
  EXPECT_EQ(counter.frees, 1);
}

TEST(TensorHandle, CoAllocatedStorageGoesWithItsLastTensor) {
  FreeCounter counter;
  const Dims shape{4};
  Tensor a = Tensor::WithNewStorage(Device("cpu"), std::malloc(16), 16, &FreeCounter::Delete, &counter,
                                    DType::kFloat32, shape, ContiguousStrides(shape));
  Tensor b = a;
  a = Tensor();
  EXPECT_EQ(counter.frees, 0);
  b = Tensor();
  EXPECT_EQ(counter.frees, 1);
  EXPECT_THROW(Tensor::WithNewStorage(Device("cpu"), nullptr, 0, nullptr, nullptr, DType::kFloat32, Dims{2},
                                      Dims{}),
               Error);
}

// The blocks of co-allocated tensors are reused from a per-thread cache: a block freed on another thread
// goes to that thread's cache, and one freed while (or after) its thread exits goes to the heap. The
// storages still go exactly with their last reference (ASan and LSan builds check the blocks themselves).
TEST(TensorHandle, CoAllocatedBlocksFreedOnOtherThreadsAndAtThreadExit) {
  FreeCounter counter;
  const Dims shape{2};
  const auto make = [&] {
    return Tensor::WithNewStorage(Device("cpu"), std::malloc(8), 8, &FreeCounter::Delete, &counter, DType::kFloat32,
                                  shape, ContiguousStrides(shape));
  };
  std::vector<Tensor> from_main;
  for (int i = 0; i < 100; ++i) from_main.push_back(make());  // more than a thread's cache keeps
  Tensor from_worker;
  std::thread worker([&] {
    from_main.clear();  // freed here: into the worker's cache, the rest to the heap
    for (int i = 0; i < 10; ++i) make();  // reuses the cached blocks
    from_worker = make();
  });
  worker.join();  // the worker's cache goes back to the heap
  EXPECT_EQ(counter.frees, 110);
  ASSERT_TRUE(from_worker.defined());
  from_worker = Tensor();  // made on the exited thread, freed on this one
  EXPECT_EQ(counter.frees, 111);
  for (int i = 0; i < 10; ++i) {
    Tensor t = make();
    EXPECT_EQ(t.shape(), shape);
  }
  EXPECT_EQ(counter.frees, 121);
}

TEST(TensorHandle, CopiesMovesAndSelfAssignmentKeepOneCountPerHandle) {
  FreeCounter counter;
  const Dims shape{3};
  Tensor a = Tensor::WithNewStorage(Device("cpu"), std::malloc(12), 12, &FreeCounter::Delete, &counter,
                                    DType::kFloat32, shape, ContiguousStrides(shape));
  const TensorImpl* impl = a.impl();
  Tensor& alias = a;
  a = alias;             // self copy-assignment
  a = std::move(alias);  // self move-assignment
  ASSERT_TRUE(a.defined());
  EXPECT_EQ(a.impl(), impl);
  Tensor b(std::move(a));
  EXPECT_FALSE(a.defined());  // NOLINT(bugprone-use-after-move): moved-from handles are undefined
  Tensor c;
  c = b;
  b = Tensor(c);
  EXPECT_EQ(b.impl(), impl);
  c = std::move(b);
  EXPECT_FALSE(b.defined());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(counter.frees, 0);
  // A tensor assigned a view of itself: the new reference is taken before the old one is dropped.
  c = c.view({3});
  EXPECT_EQ(counter.frees, 0);
  EXPECT_NE(c.impl(), impl);
  c = Tensor();
  EXPECT_EQ(counter.frees, 1);
}

TEST(Broadcast, FollowsNumpyRulesAndNamesTheOp) {
  EXPECT_EQ(BroadcastShapes({3, 1, 5}, {4, 1}, "add"), (Dims{3, 4, 5}));
  EXPECT_EQ(BroadcastShapes({}, {2, 2}, "add"), (Dims{2, 2}));
  EXPECT_EQ(BroadcastShapes({0, 1}, {1, 3}, "add"), (Dims{0, 3}));
  try {
    BroadcastShapes({2, 3}, {4}, "mul");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mul: shapes [2, 3] and [4] are not broadcastable"), std::string::npos)
        << e.what();
  }
}

TEST(DLPack, RoundTripKeepsViewAndLifetime) {
  Tensor t = Iota({4, 6}).slice(1, 1, 5).transpose(0, 1);  // [4, 4] strided, offset 1
  DLManagedTensor* m = ToDLPack(t);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(m->dl_tensor.byte_offset, 4u);
  Tensor back = FromDLPack(m);
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(back.strides(), t.strides());
  t = Tensor();  // the import alone keeps the memory alive
  EXPECT_EQ(At(back, {2, 3}), 3 * 6 + 1 + 2);
}

TEST(DLPack, RejectsWhatItCannotRepresent) {
  Tensor t = Iota({2});
  DLManagedTensor* m = ToDLPack(t);
  m->dl_tensor.dtype.lanes = 4;
  EXPECT_THROW(FromDLPack(m), Error);
  m->dl_tensor.dtype.lanes = 1;
  m->dl_tensor.device.device_type = kDLVulkan;
  EXPECT_THROW(FromDLPack(m), Error);
  m->deleter(m);
}

// Fields another library hands over are checked before they are used: a huge byte_offset used to give a
// tensor whose data pointer wrapped around (a crash on first read), an overflowing shape a wrong numel.
TEST(DLPack, RejectsOffsetsAndShapesThatOverflow) {
  Tensor t = Iota({2});
  DLManagedTensor* m = ToDLPack(t);
  auto expect_refused = [&](const std::string& fragment) {
    try {
      FromDLPack(m);
      FAIL() << "accepted; expected an error containing " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  DLTensor& dl = m->dl_tensor;
  dl.byte_offset = UINT64_MAX - 7;  // a multiple of the element size
  expect_refused("byte_offset 18446744073709551608");
  dl.byte_offset = (uint64_t{1} << 63) - 8;  // fits, but its end does not
  expect_refused("beyond 2^63 bytes");
  dl.byte_offset = 0;
  int64_t shape[2] = {int64_t{1} << 32, int64_t{1} << 32};  // 2^64 elements: wraps to 0
  int64_t strides[2] = {1, 1};
  dl.ndim = 2;
  dl.shape = shape;
  dl.strides = nullptr;
  expect_refused("more than 2^63-1 elements");
  shape[0] = int64_t{1} << 40;
  shape[1] = 2;
  strides[0] = int64_t{1} << 40;
  dl.strides = strides;
  expect_refused("beyond 2^63 bytes");
  shape[0] = -1;
  expect_refused("negative extent -1");
  dl.shape = nullptr;
  expect_refused("shape pointer is null");
  // No elements, but the row-major strides leave int64 (found by fuzz/dlpack_fuzzer.cc).
  int64_t empty[3] = {0, int64_t{1} << 58, int64_t{1} << 58};
  dl.ndim = 3;
  dl.shape = empty;
  dl.strides = nullptr;
  expect_refused("no row-major strides in 64 bits");
  dl.ndim = 2;
  dl.strides = strides;
  // A well-formed import still works after all that.
  shape[0] = 2;
  shape[1] = 1;
  strides[0] = 1;
  strides[1] = 1;
  dl.shape = shape;
  Tensor back = FromDLPack(m);
  EXPECT_EQ(back.shape(), (Dims{2, 1}));
  EXPECT_EQ(At(back, {1, 0}), 1);
}

}  // namespace
}  // namespace oar
