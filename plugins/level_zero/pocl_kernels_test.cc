// The level_zero kernels verified on the CPU: the SAME OpenCL C sources (kernels/*.cl) built by pocl,
// launched by the SAME host code (ops.cc: layouts, grids, argument packing) through a LaunchTarget on
// an OpenCL queue, and compared with plain loops written here. Tensors live in fine-grained SVM, so a
// device address is a host address as it is for the Level Zero plugin's USM pointers.
//
// pocl cannot load SPIR-V, so this checks the kernel logic, not the SPIR-V translation (spirv_test.cc
// and the spirv-val test cover the module; only a real driver covers the rest).
#include <CL/cl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/level_zero/ops.h"
#include "plugins/level_zero/pocl_testing.h"

namespace oar::level_zero {
namespace {

using sdk::Half;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// The pocl device (pocl_testing.h) and the program built from the kernel sources (once).
class Cl {
 public:
  static Cl& Get() {
    static Cl cl;
    return cl;
  }
  const std::string& error() const { return error_; }
  cl_context context() const { return PoclDevice::Get().context(); }
  cl_command_queue queue() const { return PoclDevice::Get().queue(); }
  cl_kernel Kernel(const std::string& name) {
    auto it = kernels_.find(name);
    if (it != kernels_.end()) return it->second;
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(program_, name.c_str(), &err);
    if (err != CL_SUCCESS) throw std::runtime_error("clCreateKernel(" + name + ") failed: " + std::to_string(err));
    return kernels_[name] = k;
  }

 private:
  Cl() {
    const PoclDevice& d = PoclDevice::Get();
    error_ = d.error();
    if (error_.empty() && !d.fine_grained_svm()) error_ = "the OpenCL device has no fine-grained SVM buffers";
    if (!error_.empty()) return;
    std::ifstream file(std::string(OAR_L0_KERNEL_DIR) + "/oar_kernels.cl");
    std::stringstream source;
    source << file.rdbuf();
    try {
      program_ = d.Build(source.str(), std::string("-cl-std=CL2.0 -I ") + OAR_L0_KERNEL_DIR, "kernels/oar_kernels.cl");
    } catch (const std::runtime_error& e) {
      error_ = e.what();
    }
  }
  std::string error_;
  cl_program program_ = nullptr;
  std::map<std::string, cl_kernel> kernels_;
};

/// LaunchTarget on the OpenCL queue; `max_groups` is kept small in some tests so that the kernels'
/// loops over groups beyond the launched grid are exercised.
class PoclTarget : public LaunchTarget {
 public:
  explicit PoclTarget(uint32_t max_groups = 65535) : max_groups_(max_groups) {}
  void Launch(const std::string& name, std::span<const KernelArg> args, const Grid& grid) override {
    cl_kernel k = Cl::Get().Kernel(name);
    for (size_t i = 0; i < args.size(); ++i) {
      const cl_uint index = static_cast<cl_uint>(i);
      const cl_int err = args[i].kind == KernelArg::kPointer ? clSetKernelArgSVMPointer(k, index, args[i].value)
                                                             : clSetKernelArg(k, index, args[i].size, args[i].value);
      if (err != CL_SUCCESS) throw std::runtime_error(name + ": argument " + std::to_string(i) + " refused");
    }
    size_t global[3], local[3];
    for (int d = 0; d < 3; ++d) {
      local[d] = grid.local[d];
      global[d] = static_cast<size_t>(grid.groups[d]) * grid.local[d];
    }
    const cl_int err = clEnqueueNDRangeKernel(Cl::Get().queue(), k, 3, nullptr, global, local, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) throw std::runtime_error(name + ": clEnqueueNDRangeKernel " + std::to_string(err));
    ++launches;
  }
  void ReadToHost(void* dst, const void* src, size_t bytes) override {
    clFinish(Cl::Get().queue());
    std::memcpy(dst, src, bytes);
  }
  uint32_t MaxGroups(int) const override { return max_groups_; }
  int launches = 0;

 private:
  uint32_t max_groups_;
};

/// A tensor in SVM: `shape` and `strides` over a buffer of `elements` elements of `dtype`.
struct Tensor {
  int32_t dtype;
  std::vector<int64_t> shape, strides;
  std::shared_ptr<void> buffer;
  size_t elements = 0;

  Tensor(int32_t t, std::vector<int64_t> s, std::vector<int64_t> st = {}, size_t storage = 0)
      : dtype(t), shape(std::move(s)), strides(std::move(st)) {
    if (strides.empty()) {  // contiguous
      strides.resize(shape.size());
      int64_t step = 1;
      for (size_t d = shape.size(); d-- > 0;) {
        strides[d] = step;
        step *= shape[d];
      }
    }
    elements = storage;
    if (elements == 0) {
      elements = 1;
      for (size_t d = 0; d < shape.size(); ++d) elements += static_cast<size_t>((shape[d] - 1) * strides[d]);
    }
    const size_t bytes = std::max<size_t>(elements * sdk::DTypeSize(t), 8);
    void* p = clSVMAlloc(Cl::Get().context(), CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER, bytes, 0);
    std::memset(p, 0, bytes);
    buffer = std::shared_ptr<void>(p, [](void* q) { clSVMFree(Cl::Get().context(), q); });
  }
  template <typename T>
  T* data() const {
    return static_cast<T*>(buffer.get());
  }
  /// Storage index of a row-major logical index.
  size_t At(int64_t i) const {
    int64_t off = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      off += (i % shape[d]) * strides[d];
      i /= shape[d];
    }
    return static_cast<size_t>(off);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return n;
  }
  oar_tensor_desc_t Desc() const {
    oar_tensor_desc_t d{};
    d.struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
    d.data = buffer.get();
    d.dtype = dtype;
    d.rank = static_cast<int32_t>(shape.size());
    d.shape = shape.data();
    d.strides = strides.data();
    return d;
  }
};

oar_attr_t IntsAttr(const char* name, const std::vector<int64_t>& v) {
  oar_attr_t a{};
  a.struct_size = OAR_ATTR_STRUCT_SIZE;
  a.name = name;
  a.type = OAR_ATTR_INTS;
  a.v.ints.data = v.data();
  a.v.ints.size = v.size();
  return a;
}
oar_attr_t IntAttr(const char* name, int64_t v) {
  oar_attr_t a{};
  a.struct_size = OAR_ATTR_STRUCT_SIZE;
  a.name = name;
  a.type = OAR_ATTR_INT;
  a.v.i = v;
  return a;
}
oar_attr_t FloatAttr(const char* name, double v) {
  oar_attr_t a = IntAttr(name, 0);
  a.type = OAR_ATTR_FLOAT;
  a.v.f = v;
  return a;
}

/// Run `op` through ops.cc on pocl and wait for it.
void RunOp(const char* op, const std::vector<const Tensor*>& ins, const std::vector<const Tensor*>& outs,
           const std::vector<oar_attr_t>& attrs = {}, uint32_t max_groups = 65535) {
  std::vector<oar_tensor_desc_t> in, out;
  for (const Tensor* t : ins) in.push_back(t->Desc());
  for (const Tensor* t : outs) out.push_back(t->Desc());
  oar_kernel_call_t call{};
  call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
  call.op = op;
  call.num_inputs = static_cast<int32_t>(in.size());
  call.num_outputs = static_cast<int32_t>(out.size());
  call.num_attrs = static_cast<int32_t>(attrs.size());
  call.inputs = in.data();
  call.outputs = out.data();
  call.attrs = attrs.data();
  PoclTarget target(max_groups);
  Run(call, target);
  clFinish(Cl::Get().queue());
}

class PoclKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Cl::Get().error().empty()) GTEST_SKIP() << Cl::Get().error();
  }
};

/// Float equality where NaN equals NaN and -0.0 differs from 0.0.
::testing::AssertionResult Same(float got, float want, float rel = 0.0f) {
  if (std::isnan(got) && std::isnan(want)) return ::testing::AssertionSuccess();
  if (got == want && std::signbit(got) == std::signbit(want)) return ::testing::AssertionSuccess();
  if (rel > 0 && std::isfinite(want) && std::fabs(got - want) <= rel * std::max(1.0f, std::fabs(want))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got " << got << ", want " << want;
}

// ---- elementwise ------------------------------------------------------------------------------------------

TEST_F(PoclKernels, BinaryOpsOnATransposedAndABroadcastOperand) {
  // a: logical [3, 4] stored transposed ([4, 3] in memory); b: a [4] row broadcast along dim 0.
  Tensor a(OAR_DTYPE_FLOAT32, {3, 4}, {1, 3}), b(OAR_DTYPE_FLOAT32, {3, 4}, {0, 1}, 4);
  for (int i = 0; i < 12; ++i) a.data<float>()[i] = static_cast<float>(i) - 5.5f;
  const float bv[4] = {2.0f, -0.5f, kNan, 3.0f};
  std::memcpy(b.data<float>(), bv, sizeof(bv));
  const std::map<std::string, float (*)(float, float)> ops = {
      {"add", [](float x, float y) { return x + y; }},
      {"sub", [](float x, float y) { return x - y; }},
      {"mul", [](float x, float y) { return x * y; }},
      {"div", [](float x, float y) { return x / y; }},
      {"maximum", [](float x, float y) { return std::isnan(x) || std::isnan(y) ? kNan : std::max(x, y); }},
      {"minimum", [](float x, float y) { return std::isnan(x) || std::isnan(y) ? kNan : std::min(x, y); }},
      {"pow", [](float x, float y) { return std::pow(x, y); }},
      {"relu_grad", [](float x, float y) { return x * (y > 0 ? 1.0f : 0.0f); }}};  // g * (x > 0), NaN x -> g * 0
  for (const auto& [op, fn] : ops) {
    Tensor out(OAR_DTYPE_FLOAT32, {3, 4});
    RunOp(op.c_str(), {&a, &b}, {&out});
    for (int64_t i = 0; i < 12; ++i) {
      const float x = a.data<float>()[a.At(i)], y = b.data<float>()[b.At(i)];
      EXPECT_TRUE(Same(out.data<float>()[i], fn(x, y), 1e-6f)) << op << " at " << i << " of " << x << ", " << y;
    }
  }
}

TEST_F(PoclKernels, UnaryOpsFollowTheContractInF32AndF16) {
  const std::vector<float> xs = {0.0f, -0.0f, 1.5f, -2.25f, 30.0f, -1e4f, 1e4f, kNan, kInf, -kInf, 0.001f, 7.0f};
  const std::map<std::string, float (*)(float)> ops = {
      {"neg", [](float x) { return -x; }},
      {"exp", [](float x) { return std::exp(x); }},
      {"relu", [](float x) { return x < 0 ? 0.0f : x; }},
      {"abs", [](float x) { return std::fabs(x); }},
      {"sign", [](float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : x); }},
      {"log", [](float x) { return std::log(x); }},
      {"log1p", [](float x) { return std::log1p(x); }},
      {"sqrt", [](float x) { return std::sqrt(x); }},
      {"rsqrt", [](float x) { return 1.0f / std::sqrt(x); }},
      {"sin", [](float x) { return std::sin(x); }},
      {"cos", [](float x) { return std::cos(x); }},
      {"tanh", [](float x) { return std::tanh(x); }},
      {"sigmoid", [](float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }},
      {"erf", [](float x) { return std::erf(x); }},
      {"reciprocal", [](float x) { return 1.0f / x; }}};
  const int64_t n = static_cast<int64_t>(xs.size());
  for (const int32_t dtype : {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT16}) {
    const bool half = dtype == OAR_DTYPE_FLOAT16;
    Tensor x(dtype, {n});
    for (int64_t i = 0; i < n; ++i) {
      if (half)
        x.data<uint16_t>()[i] = Half(xs[i]).bits;
      else
        x.data<float>()[i] = xs[i];
    }
    for (const auto& [op, fn] : ops) {
      Tensor out(dtype, {n});
      RunOp(op.c_str(), {&x}, {&out});
      for (int64_t i = 0; i < n; ++i) {
        const float in = half ? static_cast<float>(Half(xs[i])) : xs[i];
        const float want = half ? static_cast<float>(Half(fn(in))) : fn(in);
        const float got = half ? Half::ToFloat(out.data<uint16_t>()[i]) : out.data<float>()[i];
        // OpenCL's built-in math is within a few ulp; 16-bit results may differ by one rounding step.
        EXPECT_TRUE(Same(got, want, half ? 1e-3f : 2e-6f)) << op << "(" << in << ") " << (half ? "f16" : "f32");
      }
    }
  }
}

TEST_F(PoclKernels, IntegerOpsWrapAroundAndCompare) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max(), kMin = std::numeric_limits<int32_t>::min();
  Tensor a(OAR_DTYPE_INT32, {4}), b(OAR_DTYPE_INT32, {4}, {0}, 1);  // b: one value broadcast
  const int32_t av[4] = {kMax, kMin, -7, 0};
  std::memcpy(a.data<int32_t>(), av, sizeof(av));
  b.data<int32_t>()[0] = 2;
  auto run = [&](const char* op, const Tensor& in1, const Tensor* in2) {
    Tensor out(OAR_DTYPE_INT32, {4});
    if (in2 != nullptr)
      RunOp(op, {&in1, in2}, {&out});
    else
      RunOp(op, {&in1}, {&out});
    return std::vector<int32_t>(out.data<int32_t>(), out.data<int32_t>() + 4);
  };
  EXPECT_EQ(run("add", a, &b), (std::vector<int32_t>{kMin + 1, kMin + 2, -5, 2}));
  EXPECT_EQ(run("sub", a, &b), (std::vector<int32_t>{kMax - 2, kMax - 1, -9, -2}));
  EXPECT_EQ(run("mul", a, &b), (std::vector<int32_t>{-2, 0, -14, 0}));
  EXPECT_EQ(run("maximum", a, &b), (std::vector<int32_t>{kMax, 2, 2, 2}));
  EXPECT_EQ(run("minimum", a, &b), (std::vector<int32_t>{2, kMin, -7, 0}));
  EXPECT_EQ(run("neg", a, nullptr), (std::vector<int32_t>{-kMax, kMin, 7, 0}));
  EXPECT_EQ(run("abs", a, nullptr), (std::vector<int32_t>{kMax, kMin, 7, 0}));
  EXPECT_EQ(run("relu", a, nullptr), (std::vector<int32_t>{kMax, 0, 0, 0}));
  EXPECT_EQ(run("sign", a, nullptr), (std::vector<int32_t>{1, -1, -1, 0}));
  // int64: positions against a causal limit, as an attention mask is built.
  Tensor pos(OAR_DTYPE_INT64, {3, 3}, {0, 1}, 3), lim(OAR_DTYPE_INT64, {3, 3}, {1, 0}, 3);
  for (int i = 0; i < 3; ++i) {
    pos.data<int64_t>()[i] = (int64_t{1} << 40) + i;
    lim.data<int64_t>()[i] = (int64_t{1} << 40) + i;
  }
  Tensor mask(OAR_DTYPE_BOOL, {3, 3});
  RunOp("le", {&pos, &lim}, {&mask});
  EXPECT_EQ(std::vector<uint8_t>(mask.data<uint8_t>(), mask.data<uint8_t>() + 9),
            (std::vector<uint8_t>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  Tensor prod(OAR_DTYPE_INT64, {3, 3});
  RunOp("mul", {&pos, &lim}, {&prod});
  const uint64_t p01 = static_cast<uint64_t>(pos.data<int64_t>()[1]) * static_cast<uint64_t>(lim.data<int64_t>()[0]);
  EXPECT_EQ(prod.data<int64_t>()[1], static_cast<int64_t>(p01)) << "wraps modulo 2^64";
}

TEST_F(PoclKernels, ComparisonsAndWhere) {
  Tensor a(OAR_DTYPE_FLOAT16, {5}), b(OAR_DTYPE_FLOAT16, {5});
  const float av[5] = {1.0f, kNan, -0.0f, 2.0f, 3.0f}, bv[5] = {2.0f, kNan, 0.0f, 2.0f, -kInf};
  for (int i = 0; i < 5; ++i) {
    a.data<uint16_t>()[i] = Half(av[i]).bits;
    b.data<uint16_t>()[i] = Half(bv[i]).bits;
  }
  const std::map<std::string, std::vector<uint8_t>> expected = {{"eq", {0, 0, 1, 1, 0}}, {"ne", {1, 1, 0, 0, 1}},
                                                                {"lt", {1, 0, 0, 0, 0}}, {"le", {1, 0, 1, 1, 0}},
                                                                {"gt", {0, 0, 0, 0, 1}}, {"ge", {0, 0, 1, 1, 1}}};
  for (const auto& [op, want] : expected) {
    Tensor out(OAR_DTYPE_BOOL, {5});
    RunOp(op.c_str(), {&a, &b}, {&out});
    EXPECT_EQ(std::vector<uint8_t>(out.data<uint8_t>(), out.data<uint8_t>() + 5), want) << op;
  }
  // where on int64 (the 64-bit bit kernel) with a broadcast condition column.
  Tensor cond(OAR_DTYPE_BOOL, {2, 3}, {1, 0}, 2), x(OAR_DTYPE_INT64, {2, 3}), y(OAR_DTYPE_INT64, {2, 3});
  cond.data<uint8_t>()[0] = 1;
  for (int i = 0; i < 6; ++i) {
    x.data<int64_t>()[i] = (int64_t{1} << 40) + i;
    y.data<int64_t>()[i] = -i;
  }
  Tensor out(OAR_DTYPE_INT64, {2, 3});
  RunOp("where", {&cond, &x, &y}, {&out});
  EXPECT_EQ(std::vector<int64_t>(out.data<int64_t>(), out.data<int64_t>() + 6),
            (std::vector<int64_t>{(int64_t{1} << 40), (int64_t{1} << 40) + 1, (int64_t{1} << 40) + 2, -3, -4, -5}));
}

TEST_F(PoclKernels, CopyWritesOnlyTheElementsOfAStridedView) {
  // x: int8 [2, 3] contiguous; out: the view out[:, ::2] of a [2, 6] buffer, whose other bytes survive.
  Tensor x(OAR_DTYPE_INT8, {2, 3}), out(OAR_DTYPE_INT8, {2, 3}, {6, 2}, 12);
  for (int i = 0; i < 6; ++i) x.data<int8_t>()[i] = static_cast<int8_t>(i + 1);
  std::memset(out.data<int8_t>(), 99, 12);
  RunOp("copy", {&x}, {&out});
  const std::vector<int8_t> want = {1, 99, 2, 99, 3, 99, 4, 99, 5, 99, 6, 99};
  EXPECT_EQ(std::vector<int8_t>(out.data<int8_t>(), out.data<int8_t>() + 12), want);
  // float16 bits travel unchanged (a NaN payload included), from a broadcast source.
  Tensor h(OAR_DTYPE_FLOAT16, {4}, {0}, 1), hout(OAR_DTYPE_FLOAT16, {4});
  h.data<uint16_t>()[0] = 0x7e01;
  RunOp("copy", {&h}, {&hout});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(hout.data<uint16_t>()[i], 0x7e01);
}

TEST_F(PoclKernels, RankEightWithNoMergeableDimensions) {
  // Every dimension reversed in memory, so no two dims merge and the kernel walks all eight.
  const std::vector<int64_t> shape = {2, 3, 2, 2, 3, 2, 2, 3};
  std::vector<int64_t> strides(8);
  int64_t step = 1;
  for (size_t d = 0; d < 8; ++d) {
    strides[d] = step;
    step *= shape[d];
  }
  Tensor x(OAR_DTYPE_FLOAT32, shape, strides), y(OAR_DTYPE_FLOAT32, shape, {}), out(OAR_DTYPE_FLOAT32, shape);
  for (size_t i = 0; i < x.elements; ++i) x.data<float>()[i] = static_cast<float>(i);
  for (size_t i = 0; i < y.elements; ++i) y.data<float>()[i] = 0.5f * static_cast<float>(i);
  RunOp("add", {&x, &y}, {&out});
  for (int64_t i = 0; i < out.numel(); ++i) {
    ASSERT_EQ(out.data<float>()[i], x.data<float>()[x.At(i)] + y.data<float>()[i]) << "element " << i;
  }
}

TEST_F(PoclKernels, FillConvertsTheValueWithTheCastRules) {
  struct Case {
    int32_t dtype;
    oar_attr_t value;
    uint64_t bits;
  };
  const Case cases[] = {
      {OAR_DTYPE_FLOAT32, FloatAttr("value", 2.5), 0x40200000},
      {OAR_DTYPE_FLOAT64, IntAttr("value", -2), 0xc000000000000000},
      {OAR_DTYPE_FLOAT16, FloatAttr("value", 0.1), Half(0.1f).bits},
      {OAR_DTYPE_BFLOAT16, FloatAttr("value", 1.0), 0x3f80},
      {OAR_DTYPE_INT8, FloatAttr("value", 3.9), 3},
      {OAR_DTYPE_INT8, FloatAttr("value", 1000.0), 127},
      {OAR_DTYPE_UINT8, IntAttr("value", 300), 44},
      {OAR_DTYPE_INT32, FloatAttr("value", kNan), 0},
      {OAR_DTYPE_INT64, IntAttr("value", -7), static_cast<uint64_t>(int64_t{-7})},
      {OAR_DTYPE_BOOL, FloatAttr("value", kNan), 1},
  };
  for (const Case& c : cases) {
    Tensor out(c.dtype, {3, 333});  // more than one work-group
    RunOp("fill", {}, {&out}, {c.value});
    const size_t width = sdk::DTypeSize(c.dtype);
    for (int64_t i = 0; i < out.numel(); i += 97) {
      uint64_t got = 0;
      std::memcpy(&got, static_cast<const char*>(out.buffer.get()) + i * width, width);
      EXPECT_EQ(got, c.bits) << sdk::DTypeName(c.dtype) << " at " << i;
    }
  }
}

TEST_F(PoclKernels, CastFollowsTheConversionTable) {
  Tensor f(OAR_DTYPE_FLOAT32, {8});
  const float fv[8] = {-3.7f, 3.7f, kNan, kInf, -kInf, 3e9f, -0.0f, 65520.0f};
  std::memcpy(f.data<float>(), fv, sizeof(fv));
  Tensor i32(OAR_DTYPE_INT32, {8}), b8(OAR_DTYPE_BOOL, {8}), f16(OAR_DTYPE_FLOAT16, {8}), i64(OAR_DTYPE_INT64, {8});
  RunOp("cast", {&f}, {&i32});
  RunOp("cast", {&f}, {&b8});
  RunOp("cast", {&f}, {&f16});
  RunOp("cast", {&f}, {&i64});
  const int32_t imax = std::numeric_limits<int32_t>::max(), imin = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(std::vector<int32_t>(i32.data<int32_t>(), i32.data<int32_t>() + 8),
            (std::vector<int32_t>{-3, 3, 0, imax, imin, imax, 0, 65520}));
  EXPECT_EQ(std::vector<uint8_t>(b8.data<uint8_t>(), b8.data<uint8_t>() + 8),
            (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(i64.data<int64_t>()[5], 3000000000);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(f16.data<uint16_t>()[i], Half(fv[i]).bits) << fv[i];

  Tensor big(OAR_DTYPE_INT64, {4});
  const int64_t bv[4] = {(int64_t{1} << 32) + 5, -1, 16777217, (int64_t{1} << 60)};
  std::memcpy(big.data<int64_t>(), bv, sizeof(bv));
  Tensor to_i32(OAR_DTYPE_INT32, {4}), to_f32(OAR_DTYPE_FLOAT32, {4}), to_f16(OAR_DTYPE_FLOAT16, {4});
  RunOp("cast", {&big}, {&to_i32});
  RunOp("cast", {&big}, {&to_f32});
  RunOp("cast", {&big}, {&to_f16});
  EXPECT_EQ(std::vector<int32_t>(to_i32.data<int32_t>(), to_i32.data<int32_t>() + 4),
            (std::vector<int32_t>{5, -1, 16777217, 0}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(to_f32.data<float>()[i], static_cast<float>(bv[i]));  // round to nearest even
    EXPECT_EQ(to_f16.data<uint16_t>()[i], Half(static_cast<float>(bv[i])).bits);
  }
  Tensor flags(OAR_DTYPE_BOOL, {3}), back(OAR_DTYPE_FLOAT16, {3});
  flags.data<uint8_t>()[1] = 1;
  RunOp("cast", {&flags}, {&back});
  EXPECT_EQ(back.data<uint16_t>()[1], Half(1.0f).bits);
  EXPECT_EQ(back.data<uint16_t>()[0], 0);
}

TEST_F(PoclKernels, Float16ConversionsAreExactAndRoundToNearestEven) {
  // Every half bit pattern widens exactly (NaN payloads included).
  Tensor all(OAR_DTYPE_FLOAT16, {65536}), wide(OAR_DTYPE_FLOAT32, {65536});
  for (uint32_t i = 0; i < 65536; ++i) all.data<uint16_t>()[i] = static_cast<uint16_t>(i);
  RunOp("cast", {&all}, {&wide});
  for (uint32_t i = 0; i < 65536; ++i) {
    const float want = Half::ToFloat(static_cast<uint16_t>(i));
    uint32_t got_bits, want_bits;
    std::memcpy(&got_bits, &wide.data<float>()[i], 4);
    std::memcpy(&want_bits, &want, 4);
    ASSERT_EQ(got_bits, want_bits) << "half bits 0x" << std::hex << i;
  }
  // Narrowing: ties (to even), half subnormals and their ties, overflow, and a sweep of float bits.
  std::vector<float> values = {
      1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -(2.0f + 0x1p-10f), 0x1p-25f,  0x3p-25f, 0x1p-24f, 0x1.8p-24f,
      65504.0f,        65519.99f,           0x1p-126f,          0x1p-149f, -0x1p-14f};
  for (uint32_t bits = 0x30000000u; bits < 0x48000000u; bits += 0x000f4243u) {
    float f;
    std::memcpy(&f, &bits, 4);
    values.push_back(f);
    values.push_back(-f);
  }
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor f(OAR_DTYPE_FLOAT32, {n}), h(OAR_DTYPE_FLOAT16, {n});
  std::memcpy(f.data<float>(), values.data(), values.size() * 4);
  RunOp("cast", {&f}, {&h});
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(h.data<uint16_t>()[i], Half(values[i]).bits) << values[i];
}

// ---- reductions and softmax -------------------------------------------------------------------------------

/// The reference reduction of `x` over `axes` (keepdim), in double.
std::vector<double> Reduce(const Tensor& x, const std::vector<int64_t>& axes, const std::string& op) {
  std::vector<int64_t> out_shape = x.shape;
  for (int64_t a : axes) out_shape[a] = 1;
  int64_t outputs = 1;
  for (int64_t e : out_shape) outputs *= e;
  std::vector<double> acc(outputs, op == "max" ? -INFINITY : (op == "min" ? INFINITY : 0.0));
  std::vector<int64_t> count(outputs, 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i, o = 0, step = 1;
    for (size_t d = x.shape.size(); d-- > 0;) {
      const int64_t c = rest % x.shape[d];
      rest /= x.shape[d];
      o += (out_shape[d] == 1 ? 0 : c) * step;
      step *= out_shape[d];
    }
    const double v = x.data<float>()[x.At(i)];
    if (op == "max")
      acc[o] = std::isnan(acc[o]) || std::isnan(v) ? NAN : std::max(acc[o], v);
    else if (op == "min")
      acc[o] = std::isnan(acc[o]) || std::isnan(v) ? NAN : std::min(acc[o], v);
    else
      acc[o] += v;
    ++count[o];
  }
  if (op == "mean") {
    for (int64_t o = 0; o < outputs; ++o) acc[o] /= static_cast<double>(count[o]);
  }
  return acc;
}

TEST_F(PoclKernels, ReductionsOverAxesOfAPermutedTensor) {
  // x: logical [4, 5, 300] stored as [300, 4, 5] (a permuted view).
  Tensor x(OAR_DTYPE_FLOAT32, {4, 5, 300}, {5, 1, 20});
  for (size_t i = 0; i < x.elements; ++i) x.data<float>()[i] = std::sin(static_cast<float>(i)) * 10.0f;
  x.data<float>()[x.At(7)] = kNan;  // poisons one max/min/sum output
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{2}, {0, 2}, {1}, {}, {0, 1, 2}}) {
    for (const std::string& op : std::vector<std::string>{"sum", "mean", "max", "min"}) {
      std::vector<int64_t> shape = x.shape;
      for (int64_t a : axes) shape[a] = 1;
      Tensor out(OAR_DTYPE_FLOAT32, shape);
      const std::vector<oar_attr_t> attrs = {IntsAttr("axes", axes)};
      RunOp(op.c_str(), {&x}, {&out}, attrs, /*max_groups=*/3);
      const std::vector<double> want = Reduce(x, axes, op);
      for (size_t o = 0; o < want.size(); ++o) {
        EXPECT_TRUE(Same(out.data<float>()[o], static_cast<float>(want[o]), 1e-5f))
            << op << " over " << axes.size() << " axes, output " << o;
      }
    }
  }
}

TEST_F(PoclKernels, SumKeepsFloat32PrecisionAndEmptySetsFollowTheContract) {
  Tensor x(OAR_DTYPE_FLOAT32, {1 << 21});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.1f;
  Tensor out(OAR_DTYPE_FLOAT32, {1});
  RunOp("sum", {&x}, {&out}, {IntsAttr("axes", {0})});
  const double want = 0.1f * static_cast<double>(1 << 21);
  EXPECT_NEAR(out.data<float>()[0], want, want * 1e-6);

  Tensor empty(OAR_DTYPE_FLOAT16, {3, 0}), sum(OAR_DTYPE_FLOAT16, {3, 1}), mean(OAR_DTYPE_FLOAT16, {3, 1});
  RunOp("sum", {&empty}, {&sum}, {IntsAttr("axes", {1})});
  RunOp("mean", {&empty}, {&mean}, {IntsAttr("axes", {1})});
  EXPECT_EQ(sum.data<uint16_t>()[2], 0);
  EXPECT_TRUE(std::isnan(Half::ToFloat(mean.data<uint16_t>()[2])));
  Tensor max(OAR_DTYPE_FLOAT16, {3, 1});
  EXPECT_THROW(RunOp("max", {&empty}, {&max}, {IntsAttr("axes", {1})}), sdk::StatusError);
}

TEST_F(PoclKernels, SoftmaxAndLogSoftmaxAlongAStridedAxis) {
  const int64_t rows = 5, n = 300;
  Tensor x(OAR_DTYPE_FLOAT32, {n, rows}, {1, n});  // softmax along dim 0, which is the unit-stride one
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) x.data<float>()[r * n + j] = static_cast<float>((j * 37 + r) % 101) * 0.7f;
  }
  x.data<float>()[1 * n + 3] = -kInf;  // probability 0
  x.data<float>()[2 * n + 4] = kNan;   // row 2 all NaN
  x.data<float>()[3 * n + 5] = kInf;   // row 3 all NaN (a +inf maximum)
  for (const std::string& op : std::vector<std::string>{"softmax", "log_softmax"}) {
    Tensor out(OAR_DTYPE_FLOAT32, {n, rows});
    RunOp(op.c_str(), {&x}, {&out}, {IntAttr("axis", 0)}, /*max_groups=*/2);
    for (int64_t r = 0; r < rows; ++r) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max<double>(m, x.data<float>()[r * n + j]);
      for (int64_t j = 0; j < n; ++j) s += std::exp(x.data<float>()[r * n + j] - m);
      for (int64_t j = 0; j < n; ++j) {
        const double d = x.data<float>()[r * n + j] - m;
        const double want = r == 2 || r == 3 ? NAN : (op == "softmax" ? std::exp(d) / s : d - std::log(s));
        EXPECT_TRUE(Same(out.data<float>()[j * rows + r], static_cast<float>(want), 1e-5f))
            << op << " row " << r << " element " << j;
      }
    }
  }
  Tensor scalar(OAR_DTYPE_FLOAT16, {}), one(OAR_DTYPE_FLOAT16, {});
  scalar.data<uint16_t>()[0] = Half(42.0f).bits;
  RunOp("softmax", {&scalar}, {&one}, {IntAttr("axis", 0)});
  EXPECT_EQ(Half::ToFloat(one.data<uint16_t>()[0]), 1.0f);
}

// ---- matmul -----------------------------------------------------------------------------------------------

TEST_F(PoclKernels, BatchedMatmulWithTransposedAndBroadcastOperands) {
  const int64_t B = 3, M = 17, K = 21, N = 35;
  for (const int32_t dtype : {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT16}) {
    const bool half = dtype == OAR_DTYPE_FLOAT16;
    Tensor a(dtype, {B, M, K}, {0, K, 1}, static_cast<size_t>(M * K));  // one matrix broadcast over the batch
    Tensor b(dtype, {B, K, N}, {K * N, 1, K});                          // each batch stored transposed
    auto value = [](size_t i) { return static_cast<float>(static_cast<int>(i * 7 % 13) - 6) * 0.25f; };
    for (size_t i = 0; i < a.elements; ++i) {
      if (half)
        a.data<uint16_t>()[i] = Half(value(i)).bits;
      else
        a.data<float>()[i] = value(i);
    }
    for (size_t i = 0; i < b.elements; ++i) {
      if (half)
        b.data<uint16_t>()[i] = Half(value(i + 5)).bits;
      else
        b.data<float>()[i] = value(i + 5);
    }
    auto get = [&](const Tensor& t, size_t at) {
      return half ? Half::ToFloat(t.data<uint16_t>()[at]) : t.data<float>()[at];
    };
    Tensor out(dtype, {B, M, N});
    RunOp("matmul", {&a, &b}, {&out}, {}, /*max_groups=*/2);
    for (int64_t bt = 0; bt < B; ++bt) {
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k) {
            acc += get(a, a.At((bt * M + i) * K + k)) * get(b, b.At((bt * K + k) * N + j));
          }
          const float want = half ? static_cast<float>(Half(static_cast<float>(acc))) : static_cast<float>(acc);
          EXPECT_TRUE(Same(get(out, static_cast<size_t>((bt * M + i) * N + j)), want, half ? 1e-3f : 1e-6f))
              << "batch " << bt << " [" << i << ", " << j << "]";
        }
      }
    }
  }
  Tensor a0(OAR_DTYPE_FLOAT32, {2, 0}), b0(OAR_DTYPE_FLOAT32, {0, 3}), z(OAR_DTYPE_FLOAT32, {2, 3});
  std::fill(z.data<float>(), z.data<float>() + 6, 5.0f);
  RunOp("matmul", {&a0, &b0}, {&z});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(z.data<float>()[i], 0.0f) << "K = 0 gives zeros";
}

// ---- index_select -----------------------------------------------------------------------------------------

TEST_F(PoclKernels, IndexSelectGathersRowsAndRejectsBadIndices) {
  Tensor table(OAR_DTYPE_FLOAT32, {6, 4});  // an embedding table
  for (int i = 0; i < 24; ++i) table.data<float>()[i] = static_cast<float>(i);
  Tensor index(OAR_DTYPE_INT64, {3}, {2}, 6);  // a strided index view: elements 0, 2, 4
  const int64_t iv[6] = {5, -1, 0, -1, 5, -1};
  std::memcpy(index.data<int64_t>(), iv, sizeof(iv));
  Tensor out(OAR_DTYPE_FLOAT32, {3, 4});
  RunOp("index_select", {&table, &index}, {&out}, {IntAttr("axis", 0)});
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(out.data<float>()[r * 4 + c], static_cast<float>(iv[2 * r] * 4 + c));
  }
  Tensor cols(OAR_DTYPE_BOOL, {2, 3}), pick(OAR_DTYPE_INT64, {2}), got(OAR_DTYPE_BOOL, {2, 2});
  cols.data<uint8_t>()[2] = 1;
  cols.data<uint8_t>()[3] = 1;
  pick.data<int64_t>()[0] = 2;
  pick.data<int64_t>()[1] = 0;
  RunOp("index_select", {&cols, &pick}, {&got}, {IntAttr("axis", 1)});
  EXPECT_EQ(std::vector<uint8_t>(got.data<uint8_t>(), got.data<uint8_t>() + 4), (std::vector<uint8_t>{1, 0, 0, 1}));

  index.data<int64_t>()[2] = 6;
  try {
    RunOp("index_select", {&table, &index}, {&out}, {IntAttr("axis", 0)});
    ADD_FAILURE() << "an index of 6 into 6 rows was accepted";
  } catch (const sdk::StatusError& e) {
    EXPECT_EQ(e.code(), OAR_STATUS_OUT_OF_RANGE);
    EXPECT_NE(std::string(e.what()).find("index 6 at position [1] is out of range for dimension 0 of input 0 (x) "
                                         "(valid: [0, 6))"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(PoclKernels, GatherAlongAnAxisAndItsOutOfRangeMessage) {
  // Cross-entropy style: pick one column per row of a [3, 5] matrix, through a strided index view.
  Tensor x(OAR_DTYPE_FLOAT16, {3, 5});
  for (int i = 0; i < 15; ++i) x.data<uint16_t>()[i] = Half(static_cast<float>(i)).bits;
  Tensor index(OAR_DTYPE_INT64, {3, 1}, {2, 1}, 6);
  const int64_t iv[6] = {4, 9, 0, 9, 2, 9};
  std::memcpy(index.data<int64_t>(), iv, sizeof(iv));
  Tensor out(OAR_DTYPE_FLOAT16, {3, 1});
  RunOp("gather", {&x, &index}, {&out}, {IntAttr("axis", 1)});
  for (int r = 0; r < 3; ++r) EXPECT_EQ(Half::ToFloat(out.data<uint16_t>()[r]), static_cast<float>(r * 5 + iv[2 * r]));
  // Along axis 0 with a [2, 5] index into [3, 5] (index extents may be smaller than x's).
  Tensor rows(OAR_DTYPE_INT64, {2, 5}), picked(OAR_DTYPE_FLOAT16, {2, 5});
  for (int i = 0; i < 10; ++i) rows.data<int64_t>()[i] = (i * 7) % 3;
  RunOp("gather", {&x, &rows}, {&picked}, {IntAttr("axis", 0)});
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Half::ToFloat(picked.data<uint16_t>()[i]), static_cast<float>(((i * 7) % 3) * 5 + i % 5)) << i;
  }
  rows.data<int64_t>()[6] = -1;
  try {
    RunOp("gather", {&x, &rows}, {&picked}, {IntAttr("axis", 0)});
    ADD_FAILURE() << "index -1 was accepted";
  } catch (const sdk::StatusError& e) {
    EXPECT_EQ(e.code(), OAR_STATUS_OUT_OF_RANGE);
    EXPECT_NE(std::string(e.what()).find("index -1 at position [1, 1] is out of range for dimension 0 of input 0 "
                                         "(x) (valid: [0, 3))"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace oar::level_zero
