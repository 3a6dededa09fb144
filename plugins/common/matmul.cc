// Matmul host kernel: out[..., M, N] = a[..., M, K] @ b[..., K, N].
//
// float32 and bfloat16 go to oneDNN with memory descriptors carrying the operands' real strides, so a
// transposed operand (swapped strides) costs no copy. Batch dimensions are collapsed; when they
// collapse to one (or none) a single batched primitive runs, with a stride-0 batch expressed as
// oneDNN's own broadcast (batch extent 1); otherwise one 2-D primitive runs per batch element. An
// operand whose matrix is neither row- nor column-major (e.g. a stride-0 row) is packed first.
// Primitive creation costs far more than a small matmul, so primitives are cached in an LRU keyed by
// (dtype, dims, strides). float16, which oneDNN 2.6 cannot multiply on CPUs without AVX512-FP16, and
// bfloat16 on CPUs without AVX512-BF16, go through float32 copies (accumulation is float32 either
// way). float64 has no oneDNN matmul: a cache-blocked loop, parallel over row blocks. A layout whose
// memory descriptor oneDNN refuses (a batch stride below one strided matrix's span, as x[:, ::2, :]
// with an odd row count gives) runs one primitive per batch element or on dense copies; should oneDNN
// refuse even those, float32 takes the same blocked loop. A valid call never fails.
//
// fused_linear (out[..., N] = act(x[..., K] @ w[K, N] + bias[N])) runs the plain matmul above, then the bias
// and activation in one vectorised pass over the output. oneDNN's matmul with a bias and an eltwise post-op
// was measured slower than that on the quiet 2-core machine (0.75-0.93x of matmul + add + relu in four of
// five runs, docs/PERFORMANCE.md), so it is not used.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "oar/plugin/ops.h"
#include "plugins/common/dnnl_util.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/strided.h"
#include "plugins/common/vec_exp.h"
#include "plugins/common/vec_lanes.h"

namespace oar::host {
namespace {

using Dims = dnnl::memory::dims;

// ---- the problem, independent of how it is computed -------------------------------------------

/// One operand: base pointer and element strides of every dimension (batch dims, then the matrix).
struct Operand {
  char* data = nullptr;
  std::array<int64_t, OAR_MAX_RANK> strides{};
};

struct Problem {
  int rank = 0;                               // >= 2
  std::array<int64_t, OAR_MAX_RANK> shape{};  // the output's: [batch..., M, N]
  int64_t m = 0, n = 0, k = 0;
  Operand a, b, c;

  std::span<const int64_t> batch_shape() const { return {shape.data(), static_cast<size_t>(rank - 2)}; }
  std::span<const int64_t> batch_strides(const Operand& o) const {
    return {o.strides.data(), static_cast<size_t>(rank - 2)};
  }
  /// a's full shape [batch..., M, K].
  std::array<int64_t, OAR_MAX_RANK> shape_a() const {
    std::array<int64_t, OAR_MAX_RANK> s = shape;
    s[rank - 1] = k;
    return s;
  }
  /// b's full shape [batch..., K, N].
  std::array<int64_t, OAR_MAX_RANK> shape_b() const {
    std::array<int64_t, OAR_MAX_RANK> s = shape;
    s[rank - 2] = k;
    return s;
  }
};

/// Owns the dense copy of a packed operand.
struct Buffer {
  std::unique_ptr<char[]> bytes;
};

/// Copy the operand into a dense buffer of `To`, converting with the cast rules. Batch dims with
/// stride 0 stay broadcast (not materialised); everything else becomes row-major.
template <typename From, typename To>
Operand Pack(int rank, const std::array<int64_t, OAR_MAX_RANK>& full, const Operand& o, Buffer* buffer) {
  std::array<int64_t, OAR_MAX_RANK> shape = full, dense{};
  for (int d = 0; d < rank - 2; ++d) {
    if (o.strides[d] == 0) shape[d] = 1;
  }
  int64_t numel = 1;
  for (int d = rank - 1; d >= 0; --d) {
    dense[d] = numel;
    numel *= shape[d];
  }
  buffer->bytes.reset(new char[std::max<int64_t>(numel, 1) * sizeof(To)]);
  Operand packed;
  packed.data = buffer->bytes.get();
  for (int d = 0; d < rank; ++d) packed.strides[d] = shape[d] == full[d] ? dense[d] : 0;
  const std::span<const int64_t> dims(shape.data(), rank);
  const auto l = Collapse<2>(
      dims, {std::span<const int64_t>(dense.data(), rank), std::span<const int64_t>(o.strides.data(), rank)},
      {sizeof(To), sizeof(From)});
  ForEach<2>(l, {packed.data, o.data}, [](const std::array<char*, 2>& q, int64_t n, const std::array<int64_t, 2>& s) {
    To* dst = reinterpret_cast<To*>(q[0]);
    const From* src = reinterpret_cast<const From*>(q[1]);
    const int64_t ss = s[1] / static_cast<int64_t>(sizeof(From));
    for (int64_t i = 0; i < n; ++i) dst[i] = Convert<To>(src[i * ss]);
  });
  return packed;
}

/// Row- or column-major view of a rows x cols matrix with element strides (rs, cs), normalised so
/// that oneDNN accepts it; false when the matrix is neither (it must be packed).
bool PlainMatrix(int64_t rows, int64_t cols, int64_t* rs, int64_t* cs) {
  if ((cols == 1 || *cs == 1) && (rows == 1 || *rs >= cols)) {
    *cs = 1;
    if (rows == 1) *rs = cols;
    return true;
  }
  if ((rows == 1 || *rs == 1) && (cols == 1 || *cs >= rows)) {
    *rs = 1;
    if (cols == 1) *cs = rows;
    return true;
  }
  return false;
}

// ---- oneDNN -----------------------------------------------------------------------------------

struct Primitive {
  bool ok = false;  // false: oneDNN has no implementation for this problem
  dnnl::matmul matmul;
  dnnl::memory::desc scratchpad;  // each executing thread brings its own (Execution)
};

/// The cached primitive for (dt, a, b, c); a refusal is cached too, so the fallback is chosen at once
/// next time.
std::shared_ptr<const Primitive> FindPrimitive(dnnl::memory::data_type dt, const dnnl::memory::desc& a,
                                               const dnnl::memory::desc& b, const dnnl::memory::desc& c) {
  static LruCache<Primitive>& cache = *new LruCache<Primitive>(128);  // never destroyed: see DnnlEngine()
  std::vector<int64_t> words{static_cast<int64_t>(dt)};
  for (const dnnl::memory::desc* md : {&a, &b, &c}) {
    const int nd = md->data.ndims;
    words.push_back(nd);
    words.insert(words.end(), md->data.dims, md->data.dims + nd);
    words.insert(words.end(), md->data.format_desc.blocking.strides, md->data.format_desc.blocking.strides + nd);
  }
  return cache.FindOrMake(KeyOf(words), [&] {
    auto made = std::make_shared<Primitive>();
    try {
      // User scratchpads: the primitive is shared by every thread (two simulated devices' stream workers run
      // the same shapes at once under data parallelism), and with the library's scratchpad concurrent
      // executions of one primitive wrote into one buffer (wrong, run-dependent products, seen with the AVX-512
      // brgemm kernels). Each thread's Execution holds its own, as conv.cc does per call.
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, DnnlEngine());
      made->matmul = dnnl::matmul(pd);
      made->scratchpad = pd.scratchpad_desc();
      made->ok = true;
    } catch (const dnnl::error&) {
      made->ok = false;
    }
    return made;
  });
}

/// A memory descriptor with explicit strides, or nullopt when oneDNN refuses the layout (it rejects,
/// for instance, a batch stride smaller than the span of one strided matrix, as in x[:, ::2, :] with
/// an odd row count).
std::optional<dnnl::memory::desc> TryDesc(const Dims& dims, dnnl::memory::data_type dt, const Dims& strides) {
  try {
    return dnnl::memory::desc(dims, dt, strides);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

/// Products of at most this many multiply-adds run on one OpenMP thread: oneDNN splits even a [1, 64] x
/// [64, 192] product over the team, and the fork/join cost more than the product (2-30 us against about 2 us
/// on one thread on the shared 2-core machine, docs/PERFORMANCE.md).
constexpr int64_t kOneThreadMacs = int64_t{1} << 17;

/// A problem's primitive ready to run on this thread: its dnnl::memory objects and argument map are made
/// once and re-pointed at each call's operands (set_data_handle). Making three dnnl::memory objects and an
/// argument map per call cost about as much as a [1, 64] x [64, 192] product itself.
struct Execution {
  std::array<int64_t, 32> key{};
  size_t key_size = 0;
  std::shared_ptr<const Primitive> prim;
  dnnl::memory a, b, c;
  dnnl::memory scratchpad;  // this thread's, allocated by oneDNN with the Execution
  std::unordered_map<int, dnnl::memory> args;

  bool one_thread = false;  // a product too small to gain from a second thread (kOneThreadMacs)

  void Run(char* pa, char* pb, char* pc) {
    a.set_data_handle(pa);
    b.set_data_handle(pb);
    c.set_data_handle(pc);
    dnnl::stream& stream = DnnlStream();
    if (!one_thread || omp_get_max_threads() == 1) {
      prim->matmul.execute(stream, args);
      stream.wait();
      return;
    }
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    try {
      prim->matmul.execute(stream, args);
      stream.wait();
    } catch (...) {
      omp_set_num_threads(threads);
      throw;
    }
    omp_set_num_threads(threads);
  }
};

/// One operand's oneDNN layout before it is a descriptor: a 2-D matrix or a 3-D batch of them, with element
/// strides. Looking an Execution up by these words, not by descriptors, keeps the descriptors' construction
/// (dnnl_memory_desc_init_by_strides and two heap vectors per descriptor: about a tenth of the MLP's batch-1
/// Predictor run, docs/PERFORMANCE.md) off the calls that hit.
struct Layout {
  int nd = 0;
  std::array<int64_t, 3> dims{}, strides{};
};

Layout Layout2(int64_t rows, int64_t cols, int64_t rs, int64_t cs) { return {2, {rows, cols, 0}, {rs, cs, 0}}; }

/// The descriptor of `l`, or nullopt when oneDNN refuses the layout (TryDesc).
std::optional<dnnl::memory::desc> DescOf(const Layout& l, dnnl::memory::data_type dt) {
  return TryDesc(Dims(l.dims.begin(), l.dims.begin() + l.nd), dt, Dims(l.strides.begin(), l.strides.begin() + l.nd));
}

/// The calling thread's Execution for (dt, a, b, c), most recently used first, found by comparing the layouts'
/// dims and strides (no descriptor, no key string, no lock); null when oneDNN refuses one of the layouts or has no
/// implementation for them (a refusal is remembered like a primitive). A miss makes the descriptors and takes
/// the primitive from FindPrimitive's process-wide cache.
Execution* FindExecution(dnnl::memory::data_type dt, const Layout& a, const Layout& b, const Layout& c) {
  constexpr size_t kCapacity = 16;
  thread_local std::vector<std::unique_ptr<Execution>> recent;
  std::array<int64_t, 32> key{};  // 1 + 3 x (1 + 2 x 3) words at most
  size_t n = 0;
  key[n++] = static_cast<int64_t>(dt);
  for (const Layout* l : {&a, &b, &c}) {
    key[n++] = l->nd;
    for (int d = 0; d < l->nd; ++d) key[n++] = l->dims[d];
    for (int d = 0; d < l->nd; ++d) key[n++] = l->strides[d];
  }
  for (size_t i = 0; i < recent.size(); ++i) {
    Execution& e = *recent[i];
    if (e.key_size != n || !std::equal(key.begin(), key.begin() + n, e.key.begin())) continue;
    if (i > 0) std::rotate(recent.begin(), recent.begin() + i, recent.begin() + i + 1);
    return recent.front()->prim->ok ? recent.front().get() : nullptr;
  }
  auto e = std::make_unique<Execution>();
  e->key = key;
  e->key_size = n;
  const auto a_md = DescOf(a, dt), b_md = DescOf(b, dt), c_md = DescOf(c, dt);
  if (a_md && b_md && c_md) {
    e->prim = FindPrimitive(dt, *a_md, *b_md, *c_md);
  } else {
    static const auto& refused = *new std::shared_ptr<const Primitive>(std::make_shared<Primitive>());
    e->prim = refused;
  }
  int64_t macs = 1;  // batch x M x K x N from c's dims and a's last
  for (int d = 0; d < c.nd; ++d) macs *= c.dims[d];
  macs *= a.dims[a.nd - 1];
  e->one_thread = macs <= kOneThreadMacs;
  if (e->prim->ok) {
    e->a = dnnl::memory(*a_md, DnnlEngine(), DNNL_MEMORY_NONE);
    e->b = dnnl::memory(*b_md, DnnlEngine(), DNNL_MEMORY_NONE);
    e->c = dnnl::memory(*c_md, DnnlEngine(), DNNL_MEMORY_NONE);
    e->scratchpad = dnnl::memory(e->prim->scratchpad, DnnlEngine());
    e->args = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c},
               {DNNL_ARG_SCRATCHPAD, e->scratchpad}};
  }
  if (recent.size() == kCapacity) recent.pop_back();
  recent.insert(recent.begin(), std::move(e));
  return recent.front()->prim->ok ? recent.front().get() : nullptr;
}

/// Run the problem through oneDNN in dtype `dt` (operands already of that type). Returns false when
/// oneDNN has no implementation for it.
/// `pack_all` packs both operands even when their strides are plain: the retry when oneDNN refused them.
bool RunOneDnn(Problem p, dnnl::memory::data_type dt, size_t elem_size, bool pack_all = false) {
  const int r = p.rank;
  std::array<Buffer, 2> buffers;
  int64_t ars = p.a.strides[r - 2], acs = p.a.strides[r - 1];
  int64_t brs = p.b.strides[r - 2], bcs = p.b.strides[r - 1];
  auto pack = [&](Operand* o, const std::array<int64_t, OAR_MAX_RANK>& full, Buffer* buf) {
    switch (elem_size) {
      case 4:
        *o = Pack<float, float>(r, full, *o, buf);
        break;
      case 2:
        *o = Pack<uint16_t, uint16_t>(r, full, *o, buf);
        break;
      default:
        throw sdk::StatusError(OAR_STATUS_INTERNAL, "matmul: unexpected element size");
    }
  };
  bool packed = false;
  if (pack_all || !PlainMatrix(p.m, p.k, &ars, &acs)) {
    pack(&p.a, p.shape_a(), &buffers[0]);
    ars = p.k;
    acs = 1;
    packed = true;
  }
  if (pack_all || !PlainMatrix(p.k, p.n, &brs, &bcs)) {
    pack(&p.b, p.shape_b(), &buffers[1]);
    brs = p.n;
    bcs = 1;
    packed = true;
  }
  const int64_t es = static_cast<int64_t>(elem_size);
  const auto batch =
      Collapse<3>(p.batch_shape(), {p.batch_strides(p.c), p.batch_strides(p.a), p.batch_strides(p.b)}, {es, es, es});
  if (batch.numel == 0) return true;

  if (batch.rank == 1) {  // one batched primitive (or a plain 2-D one)
    const int64_t nb = batch.shape[0];
    const int64_t sa = batch.strides[1][0] / es, sb = batch.strides[2][0] / es;
    const bool batched = nb > 1;
    auto md = [&](int64_t bdim, int64_t bstride, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
      if (!batched) return Layout2(rows, cols, rs, cs);
      // A broadcast batch is oneDNN's batch extent 1; its stride is then irrelevant but must be valid.
      const int64_t span = std::max(rows * rs, cols * cs);
      return Layout{3, {bdim, rows, cols}, {bdim == 1 ? span : bstride, rs, cs}};
    };
    // else (a layout refused, or no implementation): one 2-D primitive per batch element, below
    if (Execution* e = FindExecution(dt, md(sa == 0 ? 1 : nb, sa, p.m, p.k, ars, acs),
                                     md(sb == 0 ? 1 : nb, sb, p.k, p.n, brs, bcs), md(nb, p.m * p.n, p.m, p.n, p.n, 1))) {
      e->Run(p.a.data, p.b.data, p.c.data);
      return true;
    }
  }
  // One 2-D primitive per batch element.
  Execution* exec = FindExecution(dt, Layout2(p.m, p.k, ars, acs), Layout2(p.k, p.n, brs, bcs), Layout2(p.m, p.n, p.n, 1));
  if (exec == nullptr) {
    // Unusual leading dimensions can be refused where dense ones are not; an unsupported dtype is
    // refused either way.
    const bool both_dense = packed && ars == p.k && acs == 1 && brs == p.n && bcs == 1;
    return both_dense || pack_all ? false : RunOneDnn(p, dt, elem_size, true);
  }
  ForRange<3>(batch, {p.c.data, p.a.data, p.b.data}, 0, batch.numel,
              [&](const std::array<char*, 3>& q, int64_t n, const std::array<int64_t, 3>& s) {
                for (int64_t i = 0; i < n; ++i) exec->Run(q[1] + i * s[1], q[2] + i * s[2], q[0] + i * s[0]);
              });
  return true;
}

// ---- float64 (and the float32 last resort) ----------------------------------------------------

/// Rows [i0, i1) of one matrix product; b is row-major with unit column stride, c dense.
/// Within a (K, N) cache block, 4x4 tiles of c are accumulated in registers across the block's K range
/// (one load of b serves four rows); ragged edges take the plain row loop.
template <typename T>
void GemmRows(const Problem& p, const T* a, const T* b, int64_t brs, T* c, int64_t i0, int64_t i1) {
  constexpr int64_t kBlockK = 256, kBlockN = 256, kTile = 4;
  const int r = p.rank;
  const int64_t ars = p.a.strides[r - 2], acs = p.a.strides[r - 1];
  std::fill(c + i0 * p.n, c + i1 * p.n, T(0));
  for (int64_t k0 = 0; k0 < p.k; k0 += kBlockK) {
    const int64_t k1 = std::min(p.k, k0 + kBlockK);
    for (int64_t j0 = 0; j0 < p.n; j0 += kBlockN) {
      const int64_t j1 = std::min(p.n, j0 + kBlockN);
      const int64_t tiled_j = j0 + (j1 - j0) / kTile * kTile;
      int64_t i = i0;
      for (; i + kTile <= i1; i += kTile) {
        for (int64_t j = j0; j < tiled_j; j += kTile) {
          T acc[kTile][kTile] = {};
          for (int64_t kk = k0; kk < k1; ++kk) {
            const T* brow = b + kk * brs + j;
            for (int64_t ti = 0; ti < kTile; ++ti) {
              const T aik = a[(i + ti) * ars + kk * acs];
              for (int64_t tj = 0; tj < kTile; ++tj) acc[ti][tj] += aik * brow[tj];
            }
          }
          for (int64_t ti = 0; ti < kTile; ++ti) {
            for (int64_t tj = 0; tj < kTile; ++tj) c[(i + ti) * p.n + j + tj] += acc[ti][tj];
          }
        }
        for (int64_t ti = 0; ti < kTile; ++ti) {  // columns left of a whole tile
          for (int64_t kk = k0; kk < k1; ++kk) {
            const T aik = a[(i + ti) * ars + kk * acs];
            for (int64_t j = tiled_j; j < j1; ++j) c[(i + ti) * p.n + j] += aik * b[kk * brs + j];
          }
        }
      }
      for (; i < i1; ++i) {  // rows left of a whole tile
        T* crow = c + i * p.n;
        for (int64_t kk = k0; kk < k1; ++kk) {
          const T aik = a[i * ars + kk * acs];
          const T* brow = b + kk * brs;
#pragma omp simd
          for (int64_t j = j0; j < j1; ++j) crow[j] += aik * brow[j];
        }
      }
    }
  }
}

/// A cache-blocked loop for float64, and for float32 layouts oneDNN refuses even when packed.
template <typename T>
void MatmulLoop(Problem p) {
  const int r = p.rank;
  Buffer buffer;
  if (p.b.strides[r - 1] != 1 && p.n > 1) {  // the inner loop wants unit-stride rows of b
    p.b = Pack<T, T>(r, p.shape_b(), p.b, &buffer);
  }
  const auto batch =
      Collapse<3>(p.batch_shape(), {p.batch_strides(p.c), p.batch_strides(p.a), p.batch_strides(p.b)}, {sizeof(T), sizeof(T), sizeof(T)});
  if (batch.numel == 0) return;
  std::vector<std::array<T*, 3>> mats;  // (c, a, b) per batch element
  mats.reserve(batch.numel);
  ForRange<3>(
      batch, {p.c.data, p.a.data, p.b.data}, 0, batch.numel,
      [&](const std::array<char*, 3>& q, int64_t n, const std::array<int64_t, 3>& s) {
        for (int64_t i = 0; i < n; ++i) {
          mats.push_back({reinterpret_cast<T*>(q[0] + i * s[0]), reinterpret_cast<T*>(q[1] + i * s[1]),
                          reinterpret_cast<T*>(q[2] + i * s[2])});
        }
      });
  constexpr int64_t kRowsPerTask = 16;
  const int64_t row_tasks = (p.m + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t brs = p.b.strides[r - 2];
  ParallelFor(
      batch.numel * row_tasks,
      [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const auto& mat = mats[t / row_tasks];
          const int64_t i0 = (t % row_tasks) * kRowsPerTask;
          GemmRows<T>(p, mat[1], mat[2], brs, mat[0], i0, std::min(p.m, i0 + kRowsPerTask));
        }
      },
      batch.numel * p.m * p.n * p.k);
}

// ---- the kernel -------------------------------------------------------------------------------

template <typename T>
dnnl::memory::data_type DnnlType() {
  if constexpr (std::is_same_v<T, float>) return dnnl::memory::data_type::f32;
  if constexpr (std::is_same_v<T, BFloat16>) return dnnl::memory::data_type::bf16;
  if constexpr (std::is_same_v<T, Half>) return dnnl::memory::data_type::f16;
  return dnnl::memory::data_type::undef;
}

/// Whether oneDNN multiplies `dt` at all on this CPU (asked once per dtype by the caller).
bool OneDnnSupports(dnnl::memory::data_type dt) {
  const dnnl::memory::desc md(Dims{16, 16}, dt, Dims{16, 1});
  return FindPrimitive(dt, md, md, md)->ok;
}

/// float16/bfloat16 through float32: convert both operands, multiply, round the result once.
template <typename T>
void MatmulViaF32(const Problem& p) {
  Buffer abuf, bbuf;
  Problem q = p;
  q.a = Pack<T, float>(p.rank, p.shape_a(), p.a, &abuf);
  q.b = Pack<T, float>(p.rank, p.shape_b(), p.b, &bbuf);
  int64_t numel = 1;
  for (int d = 0; d < p.rank; ++d) numel *= p.shape[d];
  std::vector<float> c(numel);
  q.c.data = reinterpret_cast<char*>(c.data());
  if (!RunOneDnn(q, dnnl::memory::data_type::f32, sizeof(float))) MatmulLoop<float>(q);
  // The output is contiguous, like c.
  T* out = reinterpret_cast<T*>(p.c.data);
  ParallelFor(numel, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = T(c[i]);
  });
}

template <typename T>
void Matmul(const KernelCall& call) {
  CheckArity(call, 2, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef a = call.input(0);
  const TensorRef b = call.input(1);
  const TensorRef out = call.output(0);
  const int r = out.rank();
  if (r < 2 || a.rank() != r || b.rank() != r) {
    Invalid(call, "inputs and output must share one rank >= 2");
  }
  Problem p;
  p.rank = r;
  std::copy(out.shape().begin(), out.shape().end(), p.shape.begin());
  p.m = out.dim(r - 2);
  p.n = out.dim(r - 1);
  p.k = a.dim(r - 1);
  for (int d = 0; d < r - 2; ++d) {
    if (a.dim(d) != out.dim(d) || b.dim(d) != out.dim(d)) {
      Invalid(call, "batch dimension " + std::to_string(d) + " of the inputs must equal the output's");
    }
  }
  if (a.dim(r - 2) != p.m || b.dim(r - 2) != p.k || b.dim(r - 1) != p.n) {
    Invalid(call, "expected a [..., M, K], b [..., K, N] and out [..., M, N]");
  }
  if (out.numel() == 0) return;
  CheckContiguous(call, out, "the output");
  for (auto [t, o] : {std::pair{&a, &p.a}, std::pair{&b, &p.b}, std::pair{&out, &p.c}}) {
    o->data = t->template data<char>();
    std::copy(t->strides().begin(), t->strides().end(), o->strides.begin());
  }
  if (p.k == 0) {  // an empty sum: zeros
    std::fill(out.data<T>(), out.data<T>() + out.numel(), T(0));
    return;
  }
  if constexpr (std::is_same_v<T, double>) {
    MatmulLoop<double>(p);
  } else {
    static const bool native = OneDnnSupports(DnnlType<T>());
    if (native && RunOneDnn(p, DnnlType<T>(), sizeof(T))) return;
    if constexpr (kIsHalfLike<T>) {
      MatmulViaF32<T>(p);
    } else {
      MatmulLoop<float>(p);  // oneDNN refused even dense copies: never fail on a valid layout
    }
  }
}

// ---- fused_linear ------------------------------------------------------------------------------

/// The `activation` attribute's codes (docs/ops.md; FusedActivation in core/ops/nn.h).
enum Activation : int64_t { kActNone = 0, kActRelu = 1, kActGelu = 2, kActTanh = 3 };


// As the relu and tanh kernels compute them (elementwise.cc, elementwise_math.cc), so that fused_linear gives
// matmul + add + activation bitwise: relu keeps NaN, tanh is TanhN (the rows' tanh, in Epilogue).
template <typename T>
T Activate(T v, int64_t act) {
  switch (act) {
    case kActRelu: return v < T(0) ? T(0) : v;
    case kActGelu: return T(0.5) * v * (T(1) + std::erf(v * T(0.70710678118654752440)));
    default: return v;
  }
}

/// Rows [i0, i1) of the [M, N] output o: o = act(o + bias), bias of stride bs. The bias first (float32 with a
/// contiguous bias: AddRows' vector loop, the same additions; GCC's -O2 cost model leaves the plain loop
/// scalar), then the activation over the rows at once as its kernel computes it: the tanh kernel's TanhN (each
/// element alone), the relu kernel's ReluRun for float32 (x < 0 ? 0 : x, NaN and -0 kept), else Activate.
template <typename T, int64_t Act>
void Epilogue(T* o, const T* b, int64_t bs, int64_t i0, int64_t i1, int64_t n) {
  T* rows = o + i0 * n;
  const int64_t count = (i1 - i0) * n;
  if (std::is_same_v<T, float> && bs == 1) {
    if constexpr (std::is_same_v<T, float>) AddRows(rows, b, i1 - i0, n);
  } else {
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = 0; j < n; ++j) o[i * n + j] += b[j * bs];
    }
  }
  if constexpr (Act == kActTanh) {
    TanhN(rows, rows, count);
  } else if constexpr (Act == kActRelu && std::is_same_v<T, float>) {
    ReluRun(rows, rows, count);
  } else if constexpr (Act != kActNone) {
    for (int64_t i = 0; i < count; ++i) rows[i] = Activate<T>(rows[i], Act);
  }
}

template <typename T>
void FusedLinear(const KernelCall& call) {
  CheckArity(call, 3, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef w = call.input(1);
  const TensorRef bias = call.input(2);
  const TensorRef out = call.output(0);
  const int r = out.rank();
  if (r < 2 || x.rank() != r || w.rank() != 2 || bias.rank() != 1) {
    Invalid(call, "expected x [..., M, K] (rank >= 2), w [K, N], bias [N] and out [..., M, N] of x's rank");
  }
  const int64_t k = w.dim(0), n = w.dim(1);
  bool shapes_ok = x.dim(r - 1) == k && out.dim(r - 1) == n && bias.dim(0) == n;
  for (int d = 0; d + 1 < r; ++d) shapes_ok = shapes_ok && x.dim(d) == out.dim(d);
  if (!shapes_ok) Invalid(call, "expected x [..., K], w [K, N], bias [N] and out [..., N] with x's leading dims");
  const int64_t act = RequireInt(call, OAR_OP_FUSED_LINEAR_ATTR_ACTIVATION);
  if (act < kActNone || act > kActTanh) {
    Invalid(call, "activation " + std::to_string(act) + " is not 0 (none), 1 (relu), 2 (gelu) or 3 (tanh)");
  }
  if (out.numel() == 0) return;
  CheckContiguous(call, out, "the output");
  const int64_t m = out.numel() / n;
  // The plain matmul (w broadcast over x's batch dims), then bias and activation in one pass.
  Problem p;
  p.rank = r;
  std::copy(out.shape().begin(), out.shape().end(), p.shape.begin());
  p.m = out.dim(r - 2);
  p.n = n;
  p.k = k;
  p.a.data = x.template data<char>();
  std::copy(x.strides().begin(), x.strides().end(), p.a.strides.begin());
  p.b.data = w.template data<char>();
  p.b.strides[r - 2] = w.stride(0);
  p.b.strides[r - 1] = w.stride(1);
  p.c.data = out.template data<char>();
  std::copy(out.strides().begin(), out.strides().end(), p.c.strides.begin());
  T* o = out.data<T>();
  if (k == 0) {
    std::fill(o, o + out.numel(), T(0));
  } else if constexpr (std::is_same_v<T, double>) {
    MatmulLoop<double>(p);
  } else {
    static const bool native = OneDnnSupports(DnnlType<T>());
    if (!native || !RunOneDnn(p, DnnlType<T>(), sizeof(T))) MatmulLoop<T>(p);
  }
  const T* b = bias.data<T>();
  const int64_t bs = bias.stride(0);
  ParallelFor(
      m,
      [&](int64_t i0, int64_t i1) {
        switch (act) {  // one loop per activation (and for a contiguous bias), so none and relu vectorise
          case kActRelu: return Epilogue<T, kActRelu>(o, b, bs, i0, i1, n);
          case kActGelu: return Epilogue<T, kActGelu>(o, b, bs, i0, i1, n);
          case kActTanh: return Epilogue<T, kActTanh>(o, b, bs, i0, i1, n);
          default: return Epilogue<T, kActNone>(o, b, bs, i0, i1, n);
        }
      },
      m * n * (act == kActNone || act == kActRelu ? 1 : 8));
}

}  // namespace

void AppendMatmulKernels(std::vector<HostKernel>* kernels) {
  kernels->push_back(
      {"matmul", {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32}, 3, &GuardedKernel<&Matmul<float>>});
  kernels->push_back(
      {"matmul", {OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64}, 3, &GuardedKernel<&Matmul<double>>});
  kernels->push_back(
      {"matmul", {OAR_DTYPE_FLOAT16, OAR_DTYPE_FLOAT16, OAR_DTYPE_FLOAT16}, 3, &GuardedKernel<&Matmul<Half>>});
  kernels->push_back(
      {"matmul", {OAR_DTYPE_BFLOAT16, OAR_DTYPE_BFLOAT16, OAR_DTYPE_BFLOAT16}, 3, &GuardedKernel<&Matmul<BFloat16>>});
  kernels->push_back({OAR_OP_FUSED_LINEAR, {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32}, 4,
                      &GuardedKernel<&FusedLinear<float>>});
  kernels->push_back({OAR_OP_FUSED_LINEAR, {OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64}, 4,
                      &GuardedKernel<&FusedLinear<double>>});
}

}  // namespace oar::host
