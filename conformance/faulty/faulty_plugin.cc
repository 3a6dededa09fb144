// Deliberately faulty plugins: the conformance suite must catch each one at the right level, naming the
// right case. Every variant is a correct simulated device (the shared simulator and host kernels of
// plugins/common, every op x dtype of the host kernel library) with exactly one planted bug, chosen at
// build time by OAR_FAULT_<NAME>:
//   STRIDED_MATMUL    matmul treats its inputs as contiguous (ignores strides)            -> L1 matmul transposed
//   EARLY_D2H         memcpy_d2h_async lands 50 ms after its stream and events complete   -> L0 async d2h ordering
//   SOFTMAX_OVERFLOW  softmax without max subtraction (overflows for large logits)        -> L1 softmax large_logits
//   WRITE_PAST_END    float32 add writes one element past its output                      -> L1 guard regions
//   FP16_GARBAGE      every kernel with a float16 output returns garbage                  -> L1 float16 cases
//   CRASH_ON_OP       neg raises SIGSEGV                                                  -> L1 neg CRASHED
//   LEAK              every kernel launch leaks 64 KiB of device memory                   -> L1 memory growth
//   ALLREDUCE_AVG_AS_SUM  all_reduce AVG returns the sum (never divides by the ranks)    -> L3 all_reduce avg
// One per class of bug that used to get through (docs/conformance.md, "Deliberately faulty plugins"):
//   BF16_TRUNCATE     bfloat16 exp truncates instead of rounding to nearest (within 1 ulp)  -> L1 exp bf16 tail (bias)
//   MATMUL_K_TAIL     float32 matmul drops the last K % 8 terms when K > 8                -> L1 matmul tails
//   MATMUL_K0_UNWRITTEN  float32 matmul with K = 0 leaves its output unwritten           -> L1 matmul k0
//   LEAK_ONE_OP       log1p leaks 64 KiB of device memory per launch                      -> L1 log1p (leak)
//   QUERY_ALWAYS_DONE stream_query and event_query always answer "done"                   -> L0 held-stream queries
//   SYNC_D2H_NO_WAIT  a synchronous memcpy_d2h reads at once, not after queued work       -> L0 held-stream sync copy
// Per-kernel determinism declarations (device attributes deterministic_kernels / nondeterministic_kernels):
//   RACY_SUM_KERNEL_DECLARED  the device is not declared deterministic, but 'deterministic_kernels' lists the
//                     racy float32 sum                                                    -> L1 sum (determinism)
//   RACY_SUM_KERNEL_EXCUSED   not a bug: the device is deterministic except for the racy float32 sum, which
//                     'nondeterministic_kernels' lists                                    -> L1 sum PASSED, a NOTE
//   DETERMINISM_LIST_TYPO     'nondeterministic_kernels' names an op the plugin does not register -> L0 declarations
//   RACY_SUM          a float32 full sum differs in its last bit from one call to the next -> L1 sum (determinism)
//   FILL_OOB          a float32 scalar fill writes one element past its output            -> L1 fill scalar, L2 grads name fill
//   FILL_NARROW       int64 fill writes the value narrowed to 32 bits                     -> L1 fill int64
// Built with the SDK's add_oar_plugin into lib/oar/faulty (never installed, never on the default path).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <cmath>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/sim/ccl.h"
#include "plugins/common/sim/device_api.h"
#include "plugins/common/sim/kernels.h"
#include "plugins/common/sim/simulator.h"

#ifndef OAR_FAULTY_NAME
#error "OAR_FAULTY_NAME (the device type) must be defined by the build"
#endif

namespace oar::faulty {
namespace {

using sdk::Guard;

sim::DeviceModel Model() {
  sim::DeviceModel m;
  m.name = "Faulty simulated device (" OAR_FAULTY_NAME ")";
  m.vendor = "Oar conformance test suite";
  m.compute_units = 8;
  m.local_memory_per_unit = 64 << 10;
  m.peak_flops_f32 = 1e12;
  m.peak_flops_f16 = 2e12;
  m.peak_flops_bf16 = 2e12;
  m.memory_bandwidth = 100e9;
  m.host_link_bandwidth = 10e9;
  m.peer_bandwidth = 10e9;
  m.launch_overhead_ns = 1000;
  m.copy_overhead_ns = 1000;
  m.alignment = 64;
  m.dtypes = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT16, OAR_DTYPE_BFLOAT16, OAR_DTYPE_INT8,
              OAR_DTYPE_UINT8,   OAR_DTYPE_INT32,   OAR_DTYPE_INT64,   OAR_DTYPE_BOOL};
#if defined(OAR_FAULT_RACY_SUM_KERNEL_DECLARED)
  m.deterministic = false;
  m.extra_strings["deterministic_kernels"] = "add; sum(float32, float32)";  // BUG: that sum is racy
#elif defined(OAR_FAULT_RACY_SUM_KERNEL_EXCUSED)
  m.extra_strings["nondeterministic_kernels"] = "sum(float32,float32)";  // honest: the one racy kernel
#elif defined(OAR_FAULT_DETERMINISM_LIST_TYPO)
  m.extra_strings["nondeterministic_kernels"] = "sum(float32,float32); scater_add";  // BUG: no such op
#endif
  return m;
}

// ---- the planted bugs ------------------------------------------------------------------------------

[[maybe_unused]] void MatmulIgnoringStrides(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  sim::OwnedCall owned(call);
  for (int i = 0; i < 2; ++i) {  // BUG: pretend both operands are row-major contiguous
    oar_tensor_desc_t& d = owned.input(i);
    auto* strides = const_cast<int64_t*>(d.strides);
    int64_t expected = 1;
    for (int dim = d.rank - 1; dim >= 0; --dim) {
      strides[dim] = expected;
      expected *= d.shape[dim];
    }
  }
  sim::RunHostKernel(kernel.host_fn, owned.call());
}

template <typename T>
void NaiveSoftmax(const sdk::KernelCall& k) {
  const sdk::TensorRef x = k.input(0), y = k.output(0);
  int64_t axis = k.GetInt("axis", -1);
  if (axis < 0) axis += x.rank();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = static_cast<int>(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const int64_t n = x.dim(static_cast<int>(axis));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const T* in = x.data<T>() + o * n * inner + i;
      T* out = y.data<T>() + o * n * inner + i;
      T total = 0;
      for (int64_t j = 0; j < n; ++j) total += std::exp(in[j * inner]);  // BUG: no max subtraction
      for (int64_t j = 0; j < n; ++j) out[j * inner] = std::exp(in[j * inner]) / total;
    }
  }
}

[[maybe_unused]] void SoftmaxWithoutMax(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  const sdk::KernelCall k(&call);
  if (!k.input(0).is_contiguous() || !k.output(0).is_contiguous()) return sim::RunHostKernel(kernel.host_fn, call);
  if (k.input(0).dtype() == OAR_DTYPE_FLOAT32) return NaiveSoftmax<float>(k);
  if (k.input(0).dtype() == OAR_DTYPE_FLOAT64) return NaiveSoftmax<double>(k);
  sim::RunHostKernel(kernel.host_fn, call);
}

[[maybe_unused]] void AddWritingPastEnd(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  sim::RunHostKernel(kernel.host_fn, call);
  const sdk::TensorRef out = sdk::KernelCall(&call).output(0);
  if (out.numel() > 0 && out.is_contiguous()) out.data<float>()[out.numel()] = 1234.5f;  // BUG: one past the end
}

[[maybe_unused]] void Float16Garbage(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  sim::RunHostKernel(kernel.host_fn, call);
  for (int i = 0; i < call.num_outputs; ++i) {  // BUG: float16 results are overwritten
    const oar_tensor_desc_t& d = call.outputs[i];
    if (d.dtype == OAR_DTYPE_FLOAT16) std::memset(d.data, 0x7b, sim::DescriptorSpanBytes(d));
  }
}

[[maybe_unused]] void CrashingKernel(const sim::SimKernel&, const oar_kernel_call_t&) {
  std::raise(SIGSEGV);  // BUG: the whole process dies
}

[[maybe_unused]] void LeakingKernel(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  void* scratch = nullptr;  // BUG: scratch memory that is never freed
  if (oar_status_t* s = sim::DeviceApi()->malloc(call.device, 64 << 10, &scratch)) sdk::Host()->status_destroy(s);
  sim::RunHostKernel(kernel.host_fn, call);
}

// Contiguous rank-2 float32 matmul with a K loop blocked by 8, as a vectorised kernel would be.
[[maybe_unused]] void BlockedMatmul(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  const sdk::KernelCall k(&call);
  const sdk::TensorRef a = k.input(0), b = k.input(1), y = k.output(0);
#if defined(OAR_FAULT_MATMUL_K0_UNWRITTEN)
  // (an empty operand's strides need not look contiguous: decide before the layout check)
  if (a.rank() == 2 && a.dtype() == OAR_DTYPE_FLOAT32 && a.dim(1) == 0) return;  // BUG: the zeros are never written
#endif
  if (a.rank() != 2 || b.rank() != 2 || a.dtype() != OAR_DTYPE_FLOAT32 || !a.is_contiguous() || !b.is_contiguous() ||
      !y.is_contiguous()) {
    return sim::RunHostKernel(kernel.host_fn, call);
  }
  const int64_t m = a.dim(0), kk = a.dim(1), n = b.dim(1);
  int64_t k_end = kk;
#if defined(OAR_FAULT_MATMUL_K_TAIL)
  if (kk > 8) k_end = kk / 8 * 8;  // BUG: the remainder of the blocked K loop is never accumulated
#endif
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k_end; ++p) acc += double(a.data<float>()[i * kk + p]) * b.data<float>()[p * n + j];
      y.data<float>()[i * n + j] = static_cast<float>(acc);
    }
  }
}

// BUG: bfloat16 results are truncated (the low 16 bits of the float32 result dropped) instead of
// rounded to nearest even: always within 1 ulp, but biased toward zero.
[[maybe_unused]] void TruncatingBf16Exp(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  const sdk::KernelCall k(&call);
  const sdk::TensorRef x = k.input(0), y = k.output(0);
  if (x.dtype() != OAR_DTYPE_BFLOAT16 || !x.is_contiguous() || !y.is_contiguous()) {
    return sim::RunHostKernel(kernel.host_fn, call);
  }
  for (int64_t i = 0; i < x.numel(); ++i) {
    uint32_t bits = static_cast<uint32_t>(x.data<uint16_t>()[i]) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    const float r = std::exp(v);
    std::memcpy(&bits, &r, 4);
    y.data<uint16_t>()[i] = static_cast<uint16_t>(bits >> 16);
  }
}

[[maybe_unused]] void LeakingLog1p(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  void* scratch = nullptr;  // BUG: scratch memory of this one op is never freed
  if (oar_status_t* s = sim::DeviceApi()->malloc(call.device, 64 << 10, &scratch)) sdk::Host()->status_destroy(s);
  sim::RunHostKernel(kernel.host_fn, call);
}

// A full float32 sum whose last bit depends on the call, as an atomics-based reduction's would.
[[maybe_unused]] void RacySum(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  sim::RunHostKernel(kernel.host_fn, call);
  const sdk::TensorRef y = sdk::KernelCall(&call).output(0);
  static std::atomic<uint64_t> calls{0};
  if (y.dtype() == OAR_DTYPE_FLOAT32 && y.numel() == 1 && (calls++ % 2) == 1) {
    float& v = y.data<float>()[0];
    v = std::nextafter(v, std::numeric_limits<float>::infinity());  // BUG: one ulp off, every other call
  }
}

[[maybe_unused]] void FillPastScalar(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  sim::RunHostKernel(kernel.host_fn, call);
  const sdk::TensorRef y = sdk::KernelCall(&call).output(0);
  if (y.dtype() == OAR_DTYPE_FLOAT32 && y.rank() == 0) y.data<float>()[1] = y.data<float>()[0];  // BUG: 2 elements
}

[[maybe_unused]] void NarrowingFill(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  sim::RunHostKernel(kernel.host_fn, call);
  const sdk::TensorRef y = sdk::KernelCall(&call).output(0);
  if (y.dtype() != OAR_DTYPE_INT64 || !y.is_contiguous()) return;
  for (int64_t i = 0; i < y.numel(); ++i) {
    y.data<int64_t>()[i] = static_cast<int32_t>(y.data<int64_t>()[i]);  // BUG: only the low 32 bits survive
  }
}

[[maybe_unused]] oar_status_t* StreamQueryAlwaysIdle(int32_t, oar_stream_t, bool* idle) {
  *idle = true;  // BUG: never looks at the stream
  return nullptr;
}
[[maybe_unused]] oar_status_t* EventQueryAlwaysComplete(int32_t, oar_event_t, bool* complete) {
  *complete = true;  // BUG: never looks at the event
  return nullptr;
}

// BUG: the synchronous copy reads device memory at once instead of after the work already queued on the
// device's streams (as a DMA engine that bypasses the stream fences would): the bytes may predate a
// memset or kernel the host enqueued before asking.
[[maybe_unused]] oar_status_t* SyncD2hWithoutWaiting(int32_t device, void* dst, const void* src, size_t size) {
  return Guard([&] {
    if (size == 0) return;
    const char* from = sim::Simulator::Get().device(device).memory().Translate(src, size, "memcpy_d2h source");
    std::memcpy(dst, from, size);
  });
}

// BUG: the copy is staged now but lands in host memory 50 ms later, on a thread of its own, while the
// stream and any event recorded after it already report completion.
[[maybe_unused]] oar_status_t* EarlyD2hAsync(int32_t device, oar_stream_t stream, void* dst, const void* src,
                                             size_t size) {
  auto staged = std::make_shared<std::vector<uint8_t>>(size);
  if (oar_status_t* s = sim::DeviceApi()->memcpy_d2h(device, staged->data(), src, size)) return s;
  (void)stream;
  std::thread([staged, dst] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::memcpy(dst, staged->data(), staged->size());
  }).detach();
  return nullptr;
}

// ---- the plugin ------------------------------------------------------------------------------------

sim::KernelSet& Kernels() {
  static sim::KernelSet set = [] {
    sim::KernelSet s;
    s.AddHostKernels([](std::string_view, std::span<const int32_t>) { return true; });
    for ([[maybe_unused]] sim::SimKernel& k : s.kernels()) {
#if defined(OAR_FAULT_STRIDED_MATMUL)
      if (k.op == "matmul") k.run = MatmulIgnoringStrides;
#elif defined(OAR_FAULT_SOFTMAX_OVERFLOW)
      if (k.op == "softmax") k.run = SoftmaxWithoutMax;
#elif defined(OAR_FAULT_WRITE_PAST_END)
      if (k.op == "add" && k.dtypes[0] == OAR_DTYPE_FLOAT32) k.run = AddWritingPastEnd;
#elif defined(OAR_FAULT_FP16_GARBAGE)
      if (std::find(k.dtypes.begin(), k.dtypes.end(), OAR_DTYPE_FLOAT16) != k.dtypes.end()) k.run = Float16Garbage;
#elif defined(OAR_FAULT_CRASH_ON_OP)
      if (k.op == "neg") k.run = CrashingKernel;
#elif defined(OAR_FAULT_LEAK)
      k.run = LeakingKernel;
#elif defined(OAR_FAULT_MATMUL_K_TAIL) || defined(OAR_FAULT_MATMUL_K0_UNWRITTEN)
      if (k.op == "matmul") k.run = BlockedMatmul;
#elif defined(OAR_FAULT_BF16_TRUNCATE)
      if (k.op == "exp") k.run = TruncatingBf16Exp;
#elif defined(OAR_FAULT_LEAK_ONE_OP)
      if (k.op == "log1p") k.run = LeakingLog1p;
#elif defined(OAR_FAULT_RACY_SUM) || defined(OAR_FAULT_RACY_SUM_KERNEL_DECLARED) || \
    defined(OAR_FAULT_RACY_SUM_KERNEL_EXCUSED)
      if (k.op == "sum") k.run = RacySum;
#elif defined(OAR_FAULT_FILL_OOB)
      if (k.op == "fill") k.run = FillPastScalar;
#elif defined(OAR_FAULT_FILL_NARROW)
      if (k.op == "fill") k.run = NarrowingFill;
#endif
    }
    return s;
  }();
  return set;
}

oar_status_t* Initialize() {
  return Guard([] {
    sim::PluginSpec spec;
    spec.name = OAR_FAULTY_NAME;
    spec.env_prefix = "OAR_FAULTY_SIM";
    spec.model = Model();
    sim::Simulator::Initialize(spec);
  });
}

oar_status_t* RegisterKernels(oar_kernel_registrar_t* registrar) {
  return Guard([&] { Kernels().Register(registrar); });
}

const oar_kernel_api_t kKernelApi = sim::MakeKernelApi(RegisterKernels);

const oar_device_api_t kDeviceApi = [] {
  oar_device_api_t d = *sim::DeviceApi();
#if defined(OAR_FAULT_EARLY_D2H)
  d.memcpy_d2h_async = EarlyD2hAsync;
#endif
#if defined(OAR_FAULT_SYNC_D2H_NO_WAIT)
  d.memcpy_d2h = SyncD2hWithoutWaiting;
#endif
#if defined(OAR_FAULT_QUERY_ALWAYS_DONE)
  d.stream_query = StreamQueryAlwaysIdle;
  d.event_query = EventQueryAlwaysComplete;
#endif
  return d;
}();

#if defined(OAR_FAULT_ALLREDUCE_AVG_AS_SUM)
oar_status_t* AllReduceAvgAsSum(const void* send, void* recv, size_t count, int32_t dtype, int32_t reduce_op,
                                oar_ccl_comm_t comm, oar_stream_t stream) {
  if (reduce_op == OAR_REDUCE_AVG) reduce_op = OAR_REDUCE_SUM;  // BUG: the sum is never divided by nranks
  return sim::CclApi()->all_reduce(send, recv, count, dtype, reduce_op, comm, stream);
}

const oar_ccl_api_t kCclApi = [] {
  oar_ccl_api_t c = *sim::CclApi();
  c.all_reduce = AllReduceAvgAsSum;
  return c;
}();
#endif

const oar_plugin_api_t kApi = [] {
  oar_plugin_api_t api = sim::MakePluginApi(OAR_FAULTY_NAME, OAR_VERSION_STRING, Initialize, &kKernelApi, nullptr);
  api.device = &kDeviceApi;
#if defined(OAR_FAULT_ALLREDUCE_AVG_AS_SUM)
  api.ccl = &kCclApi;
#endif
  return api;
}();

}  // namespace
}  // namespace oar::faulty

OAR_DEFINE_PLUGIN(&oar::faulty::kApi)
