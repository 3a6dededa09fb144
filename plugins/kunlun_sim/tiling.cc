#include "plugins/kunlun_sim/tiling.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "plugins/common/host_kernels.h"
#include "plugins/common/sim/config.h"

namespace oar::kunlun {
namespace {

using sim::Throw;

constexpr int64_t kLocalAlign = 64;  // every region of local memory starts on a 64-byte boundary

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }
int64_t CeilDiv(int64_t n, int64_t d) { return (n + d - 1) / d; }

/// Visit the row-major element range [begin, end) of a strided N-d view as runs along its innermost
/// dimension: fn(first element offset, run length, inner stride), offsets and strides in elements.
template <typename Fn>
void ForRuns(int rank, const int64_t* shape, const int64_t* strides, int64_t begin, int64_t end, Fn&& fn) {
  if (begin >= end) return;
  if (rank == 0) {
    fn(int64_t{0}, int64_t{1}, int64_t{1});
    return;
  }
  int64_t idx[OAR_MAX_RANK];
  int64_t rest = begin;
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = rest % shape[d];
    rest /= shape[d];
  }
  int64_t offset = 0;
  for (int d = 0; d < rank; ++d) offset += idx[d] * strides[d];
  const int last = rank - 1;
  for (int64_t pos = begin; pos < end;) {
    const int64_t n = std::min(shape[last] - idx[last], end - pos);
    fn(offset, n, strides[last]);
    pos += n;
    idx[last] += n;
    offset += n * strides[last];
    if (idx[last] < shape[last]) continue;
    offset -= shape[last] * strides[last];
    idx[last] = 0;
    for (int d = last - 1; d >= 0; --d) {  // carry
      offset += strides[d];
      if (++idx[d] < shape[d]) break;
      offset -= shape[d] * strides[d];
      idx[d] = 0;
    }
  }
}

/// DMA in: elements [begin, end) of `d` (in row-major order of its shape) into dense `dst`.
void Gather(const oar_tensor_desc_t& d, int64_t begin, int64_t end, char* dst) {
  const auto es = static_cast<int64_t>(sdk::DTypeSize(d.dtype));
  const char* base = static_cast<const char*>(d.data);
  ForRuns(d.rank, d.shape, d.strides, begin, end, [&](int64_t off, int64_t n, int64_t stride) {
    const char* src = base + off * es;
    if (stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n * es));
      dst += n * es;
      return;
    }
    for (int64_t i = 0; i < n; ++i, dst += es) std::memcpy(dst, src + i * stride * es, static_cast<size_t>(es));
  });
}

/// DMA out: dense `src` into elements [begin, end) of `d`.
void Scatter(const oar_tensor_desc_t& d, int64_t begin, int64_t end, const char* src) {
  const auto es = static_cast<int64_t>(sdk::DTypeSize(d.dtype));
  char* base = static_cast<char*>(d.data);
  ForRuns(d.rank, d.shape, d.strides, begin, end, [&](int64_t off, int64_t n, int64_t stride) {
    char* dst = base + off * es;
    if (stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n * es));
      src += n * es;
      return;
    }
    for (int64_t i = 0; i < n; ++i, src += es) std::memcpy(dst + i * stride * es, src, static_cast<size_t>(es));
  });
}

/// The local memory of the core running the current tile. Tiles of a stream run one at a time on its
/// worker, so one buffer per worker thread models it.
char* LocalMemory(int64_t bytes) {
  thread_local std::vector<char> local;
  if (static_cast<int64_t>(local.size()) < bytes) local.resize(static_cast<size_t>(bytes));
  return local.data();
}

oar_tensor_desc_t Dense(const oar_tensor_desc_t& like, void* data, int rank, const int64_t* shape,
                        const int64_t* strides) {
  oar_tensor_desc_t d = like;
  d.data = data;
  d.rank = rank;
  d.shape = shape;
  d.strides = strides;
  d.format = OAR_FORMAT_PLAIN;
  return d;
}

sim::Cost WavesCost(const std::vector<TilePass>& passes, const sim::DeviceModel& model, const Geometry& g,
                    int32_t dtype, uint64_t bytes, double flops) {
  const double cores = static_cast<double>(g.cores());
  const double core_bandwidth = model.memory_bandwidth / cores;
  const double core_flops = model.PeakFlops(dtype) / cores;
  double ns = model.launch_overhead_ns;
  for (const TilePass& p : passes) {
    const double waves = static_cast<double>(CeilDiv(p.tiles, g.cores()));
    const double tile_ns =
        std::max(static_cast<double>(p.tile_bytes) / core_bandwidth, p.tile_flops / core_flops) * 1e9;
    ns += waves * tile_ns;
  }
  sim::Cost c;
  c.bytes = bytes;
  c.flops = flops;
  c.duration_ns = ns;
  return c;
}

// ---- elementwise -------------------------------------------------------------------------------------

/// Elements per tile: every operand's slice of the tile must fit in local memory together.
int64_t ElementwiseTile(const oar_kernel_call_t& call, const Geometry& g) {
  int64_t per_element = 0;
  for (int i = 0; i < call.num_inputs; ++i) per_element += static_cast<int64_t>(sdk::DTypeSize(call.inputs[i].dtype));
  for (int i = 0; i < call.num_outputs; ++i) per_element += static_cast<int64_t>(sdk::DTypeSize(call.outputs[i].dtype));
  const int64_t operands = call.num_inputs + call.num_outputs;
  const int64_t tile = (g.local_bytes - kLocalAlign * operands) / std::max<int64_t>(per_element, 1) / 64 * 64;
  return std::max<int64_t>(tile, 64);
}

// ---- reductions --------------------------------------------------------------------------------------

/// A reduction's source: K kept elements (one per output) times R reduced elements, each group with its
/// own strided walk over the same base.
struct ReduceSource {
  const char* base = nullptr;
  int32_t dtype = OAR_DTYPE_INVALID;
  int kept_rank = 0, red_rank = 0;
  int64_t kept_shape[OAR_MAX_RANK] = {}, kept_strides[OAR_MAX_RANK] = {};
  int64_t red_shape[OAR_MAX_RANK] = {}, red_strides[OAR_MAX_RANK] = {};
  int64_t K = 1, R = 1;
};

ReduceSource DescribeReduction(const oar_kernel_call_t& call) {
  const std::string where = std::string("op '") + call.op + "' on device " + std::to_string(call.device);
  if (call.num_inputs != 1 || call.num_outputs != 1)
    Throw(OAR_STATUS_INVALID_ARGUMENT, where + ": expects 1 input and 1 output");
  const oar_tensor_desc_t& x = call.inputs[0];
  const oar_tensor_desc_t& out = call.outputs[0];
  bool reduced[OAR_MAX_RANK] = {};
  for (int i = 0; i < call.num_attrs; ++i) {
    if (std::string_view(call.attrs[i].name) != "axes") continue;
    if (call.attrs[i].type != OAR_ATTR_INTS)
      Throw(OAR_STATUS_INVALID_ARGUMENT, where + ": 'axes' is not an integer list");
    int64_t previous = -1;
    for (size_t k = 0; k < call.attrs[i].v.ints.size; ++k) {
      const int64_t a = call.attrs[i].v.ints.data[k];
      if (a <= previous || a >= x.rank) {
        Throw(OAR_STATUS_INVALID_ARGUMENT,
              where + ": 'axes' must be sorted, unique and inside [0, " + std::to_string(x.rank) + ")");
      }
      reduced[a] = true;
      previous = a;
    }
  }
  if (out.rank != x.rank) Throw(OAR_STATUS_INVALID_ARGUMENT, where + ": the output must keep the input's rank");
  ReduceSource s;
  s.base = static_cast<const char*>(x.data);
  s.dtype = x.dtype;
  s.K = s.R = 1;
  for (int d = 0; d < x.rank; ++d) {
    if (out.shape[d] != (reduced[d] ? 1 : x.shape[d])) {
      Throw(OAR_STATUS_INVALID_ARGUMENT, where + ": output extent " + std::to_string(out.shape[d]) + " in dimension " +
                                             std::to_string(d) + " does not match the reduction");
    }
    if (reduced[d]) {
      s.red_shape[s.red_rank] = x.shape[d];
      s.red_strides[s.red_rank++] = x.strides[d];
      s.R *= x.shape[d];
    } else {
      s.kept_shape[s.kept_rank] = x.shape[d];
      s.kept_strides[s.kept_rank++] = x.strides[d];
      s.K *= x.shape[d];
    }
  }
  return s;
}

int32_t AccDType(int32_t dtype) {
  return dtype == OAR_DTYPE_INT32 || dtype == OAR_DTYPE_INT64 ? int32_t{OAR_DTYPE_INT64} : int32_t{OAR_DTYPE_FLOAT32};
}

/// How one pass cuts K x R into tiles: kb outputs by rc reduced elements, plus kb results.
struct Chunking {
  int64_t rc, kb, chunks;
};
Chunking Chunks(int64_t K, int64_t R, int64_t acc_size, const Geometry& g) {
  const int64_t cap = (g.local_bytes - 2 * kLocalAlign) / acc_size;  // accumulator elements that fit
  Chunking c;
  c.rc = std::max<int64_t>(1, std::min(R, cap - 1));
  c.kb = std::max<int64_t>(1, std::min(K, cap / (c.rc + 1)));
  c.chunks = CeilDiv(R, c.rc);
  return c;
}

template <typename T, typename Acc>
void GatherBlockT(const ReduceSource& s, int64_t k0, int64_t k1, int64_t r0, int64_t r1, Acc* dst) {
  const T* base = reinterpret_cast<const T*>(s.base);
  ForRuns(s.kept_rank, s.kept_shape, s.kept_strides, k0, k1, [&](int64_t koff, int64_t kn, int64_t kstride) {
    for (int64_t i = 0; i < kn; ++i) {
      const T* row = base + koff + i * kstride;
      ForRuns(s.red_rank, s.red_shape, s.red_strides, r0, r1, [&](int64_t roff, int64_t rn, int64_t rstride) {
        for (int64_t j = 0; j < rn; ++j) {
          if constexpr (std::is_integral_v<Acc>) {
            *dst++ = static_cast<Acc>(row[roff + j * rstride]);
          } else {
            *dst++ = static_cast<Acc>(static_cast<float>(row[roff + j * rstride]));
          }
        }
      });
    }
  });
}

/// DMA in with conversion to the accumulator type: block [k0, k1) x [r0, r1) as a dense row-major matrix.
void GatherBlock(const ReduceSource& s, int32_t acc_dtype, int64_t k0, int64_t k1, int64_t r0, int64_t r1, char* dst) {
  const bool ok = sdk::VisitDType(s.dtype, [&](auto t) {
    using T = decltype(t);
    if (acc_dtype == OAR_DTYPE_INT64) {
      GatherBlockT<T, int64_t>(s, k0, k1, r0, r1, reinterpret_cast<int64_t*>(dst));
    } else {
      GatherBlockT<T, float>(s, k0, k1, r0, r1, reinterpret_cast<float*>(dst));
    }
  });
  if (!ok) Throw(OAR_STATUS_INVALID_ARGUMENT, "reduction over an invalid dtype");
}

/// One value per output (K accumulators), computed tile by tile; recurses over the partial sums while
/// the reduced extent needed more than one chunk.
std::vector<char> ReduceToAcc(const ReduceSource& s, int32_t acc_dtype, oar_kernel_fn_t sum,
                              const oar_kernel_call_t& like, const Geometry& g) {
  const auto acc_size = static_cast<int64_t>(sdk::DTypeSize(acc_dtype));
  const Chunking c = Chunks(s.K, s.R, acc_size, g);
  std::vector<char> partials(static_cast<size_t>(c.chunks * s.K * acc_size));
  char* local = LocalMemory(g.local_bytes);
  char* tile_in = local;
  char* tile_out = local + RoundUp(c.kb * c.rc * acc_size, kLocalAlign);
  if (tile_out + c.kb * acc_size > local + g.local_bytes)
    Throw(OAR_STATUS_INTERNAL, "reduction tile exceeds local memory");

  const int64_t axes[] = {1};
  oar_attr_t axes_attr{};
  axes_attr.struct_size = OAR_ATTR_STRUCT_SIZE;
  axes_attr.name = "axes";
  axes_attr.type = OAR_ATTR_INTS;
  axes_attr.v.ints.data = axes;
  axes_attr.v.ints.size = 1;
  oar_tensor_desc_t descs[2] = {like.inputs[0], like.outputs[0]};
  descs[0].dtype = descs[1].dtype = acc_dtype;
  int64_t in_shape[2], in_strides[2], out_shape[2], out_strides[2] = {1, 1};
  oar_kernel_call_t tc = like;
  tc.op = "sum";
  tc.inputs = &descs[0];
  tc.outputs = &descs[1];
  tc.attrs = &axes_attr;
  tc.num_attrs = 1;

  for (int64_t k0 = 0; k0 < s.K; k0 += c.kb) {
    const int64_t kbb = std::min(c.kb, s.K - k0);
    for (int64_t chunk = 0; chunk < c.chunks; ++chunk) {
      const int64_t r0 = chunk * c.rc;
      const int64_t len = std::min(s.R, r0 + c.rc) - r0;
      GatherBlock(s, acc_dtype, k0, k0 + kbb, r0, r0 + len, tile_in);
      in_shape[0] = kbb;
      in_shape[1] = len;
      in_strides[0] = len;
      in_strides[1] = 1;
      out_shape[0] = kbb;
      out_shape[1] = 1;
      descs[0] = Dense(descs[0], tile_in, 2, in_shape, in_strides);
      descs[1] = Dense(descs[1], tile_out, 2, out_shape, out_strides);
      sim::RunHostKernel(sum, tc);
      std::memcpy(partials.data() + (chunk * s.K + k0) * acc_size, tile_out, static_cast<size_t>(kbb * acc_size));
    }
  }
  if (c.chunks == 1) return partials;
  // Another pass: the partials form a [chunks, K] tensor in device scratch memory, reduced over chunks.
  ReduceSource next;
  next.base = partials.data();
  next.dtype = acc_dtype;
  next.kept_rank = 1;
  next.kept_shape[0] = s.K;
  next.kept_strides[0] = 1;
  next.red_rank = 1;
  next.red_shape[0] = c.chunks;
  next.red_strides[0] = s.K;
  next.K = s.K;
  next.R = c.chunks;
  return ReduceToAcc(next, acc_dtype, sum, like, g);
}

template <typename T>
void Finish(const std::vector<char>& acc, int32_t acc_dtype, bool mean, int64_t count, std::vector<char>* out) {
  const size_t k = acc.size() / sdk::DTypeSize(acc_dtype);
  out->resize(k * sizeof(T));
  for (size_t i = 0; i < k; ++i) {
    T v{};
    if (acc_dtype == OAR_DTYPE_INT64) {
      int64_t a;
      std::memcpy(&a, acc.data() + i * 8, 8);
      v = static_cast<T>(a);  // narrows modulo 2^bits for int32
    } else {
      float a;
      std::memcpy(&a, acc.data() + i * 4, 4);
      if (mean) {
        v = T(static_cast<float>(static_cast<double>(a) / static_cast<double>(count)));
      } else {
        v = T(a);
      }
    }
    std::memcpy(out->data() + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

// ---- public: elementwise -----------------------------------------------------------------------------

TilePass PlanElementwise(const oar_kernel_call_t& call, const Geometry& g) {
  TilePass p;
  if (call.num_outputs < 1) return p;
  const int64_t numel = sim::NumElements(call.outputs[0]);
  const int64_t tile = ElementwiseTile(call, g);
  const int64_t full = std::min(tile, numel);
  int64_t per_element = 0;
  for (int i = 0; i < call.num_inputs; ++i) per_element += static_cast<int64_t>(sdk::DTypeSize(call.inputs[i].dtype));
  for (int i = 0; i < call.num_outputs; ++i) per_element += static_cast<int64_t>(sdk::DTypeSize(call.outputs[i].dtype));
  p.tiles = CeilDiv(numel, tile);
  p.tile_bytes = full * per_element;
  p.tile_flops = static_cast<double>(full) * sim::FlopsPerElement(call.op);
  return p;
}

void RunTiledElementwise(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  const Geometry& g = kGeometry;
  const int operands = call.num_inputs + call.num_outputs;
  if (call.num_outputs != 1 || operands > 4) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, "op '" + kernel.op +
                                           "': a tiled elementwise kernel has 1 output and at most "
                                           "3 inputs");
  }
  const oar_tensor_desc_t& out = call.outputs[0];
  for (int i = 0; i < call.num_inputs; ++i) {
    const oar_tensor_desc_t& in = call.inputs[i];
    if (in.rank != out.rank || !std::equal(in.shape, in.shape + in.rank, out.shape)) {
      Throw(OAR_STATUS_INVALID_ARGUMENT, "op '" + kernel.op + "' on device " + std::to_string(call.device) +
                                             ": input " + std::to_string(i) + " does not have the output's shape");
    }
  }
  const int64_t numel = sim::NumElements(out);
  if (numel == 0) return;
  const int64_t tile = ElementwiseTile(call, g);
  char* local = LocalMemory(g.local_bytes);
  char* regions[4];
  int64_t used = 0;
  for (int j = 0; j < operands; ++j) {
    const oar_tensor_desc_t& d = j < call.num_inputs ? call.inputs[j] : call.outputs[j - call.num_inputs];
    regions[j] = local + used;
    used += RoundUp(tile * static_cast<int64_t>(sdk::DTypeSize(d.dtype)), kLocalAlign);
  }
  if (used > g.local_bytes) Throw(OAR_STATUS_INTERNAL, "op '" + kernel.op + "': tile exceeds local memory");

  oar_tensor_desc_t descs[4];
  int64_t shape[1] = {0};
  const int64_t strides[1] = {1};
  oar_kernel_call_t tc = call;
  tc.inputs = descs;
  tc.outputs = descs + call.num_inputs;
  for (int64_t begin = 0; begin < numel; begin += tile) {
    const int64_t end = std::min(numel, begin + tile);
    shape[0] = end - begin;
    for (int i = 0; i < call.num_inputs; ++i) Gather(call.inputs[i], begin, end, regions[i]);
    for (int j = 0; j < operands; ++j) {
      const oar_tensor_desc_t& d = j < call.num_inputs ? call.inputs[j] : call.outputs[j - call.num_inputs];
      descs[j] = Dense(d, regions[j], 1, shape, strides);
    }
    sim::RunHostKernel(kernel.host_fn, tc);
    Scatter(out, begin, end, regions[call.num_inputs]);
  }
}

sim::Cost TiledElementwiseCost(const sim::SimKernel&, const sim::DeviceModel& model, const oar_kernel_call_t& call) {
  const TilePass p = PlanElementwise(call, kGeometry);
  const sim::Cost roofline = sim::KernelCost(model, call);
  return WavesCost({p}, model, kGeometry, call.outputs[0].dtype, roofline.bytes, roofline.flops);
}

// ---- public: reductions ------------------------------------------------------------------------------

std::vector<TilePass> PlanReduction(const oar_kernel_call_t& call, const Geometry& g) {
  std::vector<TilePass> passes;
  const ReduceSource s = DescribeReduction(call);
  if (s.K == 0 || s.R == 0) return passes;
  const int32_t acc = AccDType(s.dtype);
  const auto acc_size = static_cast<int64_t>(sdk::DTypeSize(acc));
  auto in_size = static_cast<int64_t>(sdk::DTypeSize(s.dtype));
  int64_t R = s.R;
  for (;;) {
    const Chunking c = Chunks(s.K, R, acc_size, g);
    TilePass p;
    p.tiles = CeilDiv(s.K, c.kb) * c.chunks;
    p.tile_bytes = c.kb * c.rc * in_size + c.kb * acc_size;
    p.tile_flops = static_cast<double>(c.kb * c.rc);
    passes.push_back(p);
    if (c.chunks == 1) break;
    R = c.chunks;
    in_size = acc_size;
  }
  return passes;
}

void RunTiledReduction(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  const ReduceSource s = DescribeReduction(call);
  const oar_tensor_desc_t& out = call.outputs[0];
  const bool mean = kernel.op == "mean";
  if (s.K == 0) return;
  const int32_t acc_dtype = AccDType(s.dtype);
  std::vector<char> acc;
  if (s.R == 0) {  // reducing an empty set: zeros (then NaN for the mean, as 0 / 0)
    acc.assign(static_cast<size_t>(s.K) * sdk::DTypeSize(acc_dtype), 0);
  } else {
    const int32_t key[2] = {acc_dtype, acc_dtype};
    const host::HostKernel* sum = host::FindHostKernel("sum", key);
    if (sum == nullptr) Throw(OAR_STATUS_INTERNAL, "no host sum kernel for the accumulator type");
    acc = ReduceToAcc(s, acc_dtype, sum->fn, call, kGeometry);
  }
  std::vector<char> result;
  const bool ok = sdk::VisitDType(out.dtype, [&](auto t) { Finish<decltype(t)>(acc, acc_dtype, mean, s.R, &result); });
  if (!ok) Throw(OAR_STATUS_INVALID_ARGUMENT, "reduction into an invalid dtype");
  Scatter(out, 0, s.K, result.data());
}

sim::Cost TiledReductionCost(const sim::SimKernel&, const sim::DeviceModel& model, const oar_kernel_call_t& call) {
  const sim::Cost roofline = sim::KernelCost(model, call);
  return WavesCost(PlanReduction(call, kGeometry), model, kGeometry, call.inputs[0].dtype, roofline.bytes,
                   roofline.flops);
}

}  // namespace oar::kunlun
