// 2-D convolution host kernels: conv2d, conv2d_grad_input and conv2d_grad_weight (NCHW, groups,
// stride, symmetric padding, dilation; docs/ops.md).
//
// The three ops share one problem: x [N, C, H, W], w [O, C/groups, kH, kW] and y [N, O, Ho, Wo]; each op
// reads two of them and writes the third. float32 goes to oneDNN's forward, backward-data and
// backward-weights primitives: they are created with `any` layouts, so oneDNN picks its blocked
// formats, and the operands are reordered from (or to) the caller's strides around the call. Each
// primitive comes with its reorders in an LRU keyed by the problem and the operands' strides.
// float16 and bfloat16 go through dense float32 copies (one rounding per result); float64, which
// oneDNN does not convolve, and any problem oneDNN refuses, run a direct loop parallel over output
// planes (or weight slices), so no two threads write the same element.
#include <algorithm>
#include <array>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "plugins/common/dnnl_util.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/pack.h"
#include "plugins/common/strided.h"

namespace oar::host {
namespace {

using Dims = dnnl::memory::dims;

enum class ConvKind { kForward = 0, kGradInput = 1, kGradWeight = 2 };

struct ConvShape {
  int64_t n, c, h, w;  // x
  int64_t o, kh, kw;   // w: [o, c / groups, kh, kw]
  int64_t ho, wo;      // y: [n, o, ho, wo]
  int64_t groups;
  int64_t sh, sw, ph, pw, dh, dw;
};

/// One of x, w, y: data and element strides of its four dimensions.
struct Operand {
  char* data = nullptr;
  std::array<int64_t, 4> strides{};
};

struct ConvProblem {
  ConvShape s;
  Operand x, w, y;
  ConvKind kind;

  Operand* operand(int role) { return role == 0 ? &x : role == 1 ? &w : &y; }
  /// The extents of x (role 0), w (1) or y (2).
  std::array<int64_t, 4> dims(int role) const {
    if (role == 0) return {s.n, s.c, s.h, s.w};
    if (role == 1) return {s.o, s.c / s.groups, s.kh, s.kw};
    return {s.n, s.o, s.ho, s.wo};
  }
};

/// Which of x (0), w (1), y (2) the op writes.
constexpr int OutputRole(ConvKind kind) {
  return kind == ConvKind::kForward ? 2 : kind == ConvKind::kGradInput ? 0 : 1;
}

/// The input index of x (0), w (1) or y (2) when the op reads it: w is always input 1 and y input 0.
constexpr int InputIndex(ConvKind kind, int role) {
  return role == 1 ? 1 : role == 2 ? 0 : (kind == ConvKind::kForward ? 0 : 1);
}

/// Row-major element strides of four extents.
std::array<int64_t, 4> Dense4(const std::array<int64_t, 4>& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

/// The output extent of a window walk: (in + 2 pad - dil (k - 1) - 1) / stride + 1, and 0 when even the
/// first window does not fit.
int64_t OutExtent(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

/// The range [lo, hi) of output positions o whose input position o * stride - pad + offset is in [0, in).
std::pair<int64_t, int64_t> ValidOutputs(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t offset) {
  const int64_t first = pad - offset;          // o * stride >= first
  const int64_t last = in - 1 + pad - offset;  // o * stride <= last
  const int64_t lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  return {lo, std::max(lo, hi)};
}

ConvProblem ParseConv(const KernelCall& call, ConvKind kind) {
  CheckArity(call, 2, 1);
  const TensorRef* x = nullptr;
  const TensorRef* w = nullptr;
  const TensorRef* y = nullptr;
  const TensorRef in0 = call.input(0), in1 = call.input(1), out = call.output(0);
  switch (kind) {
    case ConvKind::kForward:
      x = &in0, w = &in1, y = &out;
      break;
    case ConvKind::kGradInput:
      y = &in0, w = &in1, x = &out;
      break;
    case ConvKind::kGradWeight:
      y = &in0, x = &in1, w = &out;
      break;
  }
  for (const TensorRef* t : {x, w, y}) {
    if (t->rank() != 4) Invalid(call, "every operand must have rank 4 (NCHW)");
  }
  const std::span<const int64_t> stride = RequireInts(call, "stride", 2);
  const std::span<const int64_t> padding = RequireInts(call, "padding", 2);
  const std::span<const int64_t> dilation = RequireInts(call, "dilation", 2);
  const int64_t groups = RequireInt(call, "groups");
  if (stride[0] < 1 || stride[1] < 1 || dilation[0] < 1 || dilation[1] < 1 || padding[0] < 0 || padding[1] < 0) {
    Invalid(call, "stride and dilation must be >= 1 and padding >= 0");
  }
  ConvShape s{x->dim(0), x->dim(1), x->dim(2), x->dim(3), w->dim(0),  w->dim(2),  w->dim(3),   y->dim(2),
              y->dim(3), groups,    stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]};
  if (groups < 1 || s.c % groups != 0 || s.o % groups != 0) {
    Invalid(call, "groups (" + std::to_string(groups) + ") must be >= 1 and divide the channels " +
                      std::to_string(s.c) + " and " + std::to_string(s.o));
  }
  if (w->dim(1) != s.c / groups) {
    Invalid(call, "the weight's dimension 1 must be C / groups = " + std::to_string(s.c / groups));
  }
  if (y->dim(0) != s.n || y->dim(1) != s.o) Invalid(call, "the output gradient / output must be [N, O, Ho, Wo]");
  const int64_t ho = OutExtent(s.h, s.kh, s.sh, s.ph, s.dh), wo = OutExtent(s.w, s.kw, s.sw, s.pw, s.dw);
  if (s.ho != ho || s.wo != wo) {
    Invalid(call, "the spatial output extents must be " + std::to_string(ho) + " x " + std::to_string(wo) + ", got " +
                      std::to_string(s.ho) + " x " + std::to_string(s.wo));
  }
  ConvProblem p{s, {}, {}, {}, kind};
  for (auto [t, o] : {std::pair{x, &p.x}, std::pair{w, &p.w}, std::pair{y, &p.y}}) {
    o->data = t->data<char>();
    for (int d = 0; d < 4; ++d) o->strides[d] = t->stride(d);
  }
  return p;
}

// ---- direct loops (float64, and any fallback) ---------------------------------------------------

/// y[n, o] planes: for every (c, kh, kw) tap, add w * the shifted input rows to the plane.
template <typename S>
void DirectForward(const ConvProblem& p) {
  const ConvShape& s = p.s;
  const int64_t cg = s.c / s.groups, og = s.o / s.groups;
  const S* x = reinterpret_cast<const S*>(p.x.data);
  const S* w = reinterpret_cast<const S*>(p.w.data);
  S* y = reinterpret_cast<S*>(p.y.data);
  const auto& xs = p.x.strides;
  const auto& ws = p.w.strides;
  ParallelFor(
      s.n * s.o,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t n = t / s.o, o = t % s.o, g = o / og;
          S* plane = y + t * s.ho * s.wo;
          std::fill(plane, plane + s.ho * s.wo, S(0));
          for (int64_t c = 0; c < cg; ++c) {
            const S* xc = x + n * xs[0] + (g * cg + c) * xs[1];
            for (int64_t i = 0; i < s.kh; ++i) {
              const auto [hlo, hhi] = ValidOutputs(s.ho, s.h, s.sh, s.ph, i * s.dh);
              for (int64_t j = 0; j < s.kw; ++j) {
                const S wv = w[o * ws[0] + c * ws[1] + i * ws[2] + j * ws[3]];
                const auto [wlo, whi] = ValidOutputs(s.wo, s.w, s.sw, s.pw, j * s.dw);
                const int64_t step = s.sw * xs[3];
                for (int64_t oh = hlo; oh < hhi; ++oh) {
                  const int64_t base = (oh * s.sh - s.ph + i * s.dh) * xs[2] + (j * s.dw - s.pw) * xs[3];
                  S* yr = plane + oh * s.wo;
                  for (int64_t ow = wlo; ow < whi; ++ow) yr[ow] += wv * xc[base + ow * step];
                }
              }
            }
          }
        }
      },
      s.n * s.o * s.ho * s.wo * cg * s.kh * s.kw);
}

/// x[n, c] planes: scatter w * every output gradient row back onto the input rows it came from.
template <typename S>
void DirectGradInput(const ConvProblem& p) {
  const ConvShape& s = p.s;
  const int64_t cg = s.c / s.groups, og = s.o / s.groups;
  S* x = reinterpret_cast<S*>(p.x.data);
  const S* w = reinterpret_cast<const S*>(p.w.data);
  const S* y = reinterpret_cast<const S*>(p.y.data);
  const auto& ws = p.w.strides;
  const auto& ys = p.y.strides;
  ParallelFor(
      s.n * s.c,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t n = t / s.c, c = t % s.c, g = c / cg;
          S* plane = x + t * s.h * s.w;
          std::fill(plane, plane + s.h * s.w, S(0));
          for (int64_t o = g * og; o < (g + 1) * og; ++o) {
            const S* yo = y + n * ys[0] + o * ys[1];
            for (int64_t i = 0; i < s.kh; ++i) {
              const auto [hlo, hhi] = ValidOutputs(s.ho, s.h, s.sh, s.ph, i * s.dh);
              for (int64_t j = 0; j < s.kw; ++j) {
                const S wv = w[o * ws[0] + (c - g * cg) * ws[1] + i * ws[2] + j * ws[3]];
                const auto [wlo, whi] = ValidOutputs(s.wo, s.w, s.sw, s.pw, j * s.dw);
                for (int64_t oh = hlo; oh < hhi; ++oh) {
                  const int64_t base = (oh * s.sh - s.ph + i * s.dh) * s.w + (j * s.dw - s.pw);
                  const S* yr = yo + oh * ys[2];
                  for (int64_t ow = wlo; ow < whi; ++ow) plane[base + ow * s.sw] += wv * yr[ow * ys[3]];
                }
              }
            }
          }
        }
      },
      s.n * s.c * s.ho * s.wo * (s.o / s.groups) * s.kh * s.kw);
}

/// w[o, c] slices: each tap is the dot product of an output gradient plane with the shifted input.
template <typename S>
void DirectGradWeight(const ConvProblem& p) {
  const ConvShape& s = p.s;
  const int64_t cg = s.c / s.groups, og = s.o / s.groups;
  const S* x = reinterpret_cast<const S*>(p.x.data);
  S* w = reinterpret_cast<S*>(p.w.data);
  const S* y = reinterpret_cast<const S*>(p.y.data);
  const auto& xs = p.x.strides;
  const auto& ys = p.y.strides;
  ParallelFor(
      s.o * cg,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t o = t / cg, c = t % cg, g = o / og;
          for (int64_t i = 0; i < s.kh; ++i) {
            const auto [hlo, hhi] = ValidOutputs(s.ho, s.h, s.sh, s.ph, i * s.dh);
            for (int64_t j = 0; j < s.kw; ++j) {
              const auto [wlo, whi] = ValidOutputs(s.wo, s.w, s.sw, s.pw, j * s.dw);
              S acc = 0;
              for (int64_t n = 0; n < s.n; ++n) {
                const S* xc = x + n * xs[0] + (g * cg + c) * xs[1];
                const S* yo = y + n * ys[0] + o * ys[1];
                for (int64_t oh = hlo; oh < hhi; ++oh) {
                  const int64_t base = (oh * s.sh - s.ph + i * s.dh) * xs[2] + (j * s.dw - s.pw) * xs[3];
                  const S* yr = yo + oh * ys[2];
                  for (int64_t ow = wlo; ow < whi; ++ow) acc += yr[ow * ys[3]] * xc[base + ow * s.sw * xs[3]];
                }
              }
              w[((o * cg + c) * s.kh + i) * s.kw + j] = acc;
            }
          }
        }
      },
      s.o * cg * s.kh * s.kw * s.n * s.ho * s.wo);
}

template <typename S>
void DirectConv(const ConvProblem& p) {
  switch (p.kind) {
    case ConvKind::kForward:
      DirectForward<S>(p);
      break;
    case ConvKind::kGradInput:
      DirectGradInput<S>(p);
      break;
    case ConvKind::kGradWeight:
      DirectGradWeight<S>(p);
      break;
  }
}

// ---- oneDNN (float32) ---------------------------------------------------------------------------

/// A primitive with the layouts it chose and the reorders between them and the caller's.
struct ConvPrimitive {
  bool ok = false;  // false: oneDNN refused the problem (the direct loop runs instead)
  dnnl::primitive prim;
  // The roles of x, w, y in this primitive (DNNL_ARG_SRC or DNNL_ARG_DIFF_SRC, ...), the caller's
  // descriptors and the primitive's, and whether a reorder sits between them.
  std::array<int, 3> arg{};
  std::array<dnnl::memory::desc, 3> user, inner;
  std::array<bool, 3> reorder{};
  std::array<dnnl::reorder, 3> reorders;
  dnnl::memory::desc scratchpad;
};

/// The caller's descriptor of an operand with `dims` (4-D) and element strides; w with groups becomes
/// oneDNN's 5-D [G, O/G, C/G, kH, kW]. Strides of extent-1 dimensions are irrelevant: make them dense.
dnnl::memory::desc UserDesc(const Dims& dims, const std::array<int64_t, 4>& strides, int64_t groups) {
  Dims st(strides.begin(), strides.end());
  int64_t dense = 1;
  for (int d = 3; d >= 0; --d) {
    if (dims[d] == 1) st[d] = dense;
    dense *= dims[d];
  }
  if (groups == 1) return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, st);
  return dnnl::memory::desc({groups, dims[0] / groups, dims[1], dims[2], dims[3]}, dnnl::memory::data_type::f32,
                            {dims[0] / groups * st[0], st[0], st[1], st[2], st[3]});
}

std::shared_ptr<const ConvPrimitive> MakeConvPrimitive(const ConvShape& s, ConvKind kind,
                                                       const std::array<dnnl::memory::desc, 3>& user) {
  using dnnl::memory;
  auto made = std::make_shared<ConvPrimitive>();
  made->user = user;
  const auto any = [](const memory::desc& md) {
    return memory::desc(md.dims(), md.data_type(), memory::format_tag::any);
  };
  const memory::desc x_any = any(user[0]), w_any = any(user[1]), y_any = any(user[2]);
  const Dims strides{s.sh, s.sw}, dil{s.dh - 1, s.dw - 1}, pad{s.ph, s.pw};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-call scratchpads: safe to run concurrently
  const dnnl::engine& engine = DnnlEngine();
  try {
    const dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x_any,
                                        w_any, y_any, strides, dil, pad, pad),
        attr, engine);
    std::array<memory::desc, 3> inner;
    switch (kind) {
      case ConvKind::kForward:
        made->prim = dnnl::convolution_forward(fwd);
        made->arg = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
        inner = {fwd.src_desc(), fwd.weights_desc(), fwd.dst_desc()};
        made->scratchpad = fwd.scratchpad_desc();
        break;
      case ConvKind::kGradInput: {
        const dnnl::convolution_backward_data::primitive_desc bwd(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, x_any, w_any, y_any, strides,
                                                  dil, pad, pad),
            attr, engine, fwd);
        made->prim = dnnl::convolution_backward_data(bwd);
        made->arg = {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST};
        inner = {bwd.diff_src_desc(), bwd.weights_desc(), bwd.diff_dst_desc()};
        made->scratchpad = bwd.scratchpad_desc();
        break;
      }
      case ConvKind::kGradWeight: {
        const dnnl::convolution_backward_weights::primitive_desc bwd(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_any, w_any, y_any, strides,
                                                     dil, pad, pad),
            attr, engine, fwd);
        made->prim = dnnl::convolution_backward_weights(bwd);
        made->arg = {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST};
        inner = {bwd.src_desc(), bwd.diff_weights_desc(), bwd.diff_dst_desc()};
        made->scratchpad = bwd.scratchpad_desc();
        break;
      }
    }
    const int output = OutputRole(kind);
    for (int k = 0; k < 3; ++k) {
      made->inner[k] = inner[k];
      made->reorder[k] = inner[k] != user[k];
      if (!made->reorder[k]) continue;
      made->reorders[k] = k == output ? dnnl::reorder(dnnl::reorder::primitive_desc(engine, inner[k], engine, user[k]))
                                      : dnnl::reorder(dnnl::reorder::primitive_desc(engine, user[k], engine, inner[k]));
    }
    made->ok = true;
  } catch (const dnnl::error&) {
    made->ok = false;
  }
  return made;
}

/// Run the problem (float32 operands) through oneDNN; false when oneDNN refuses it.
bool OneDnnConv(const ConvProblem& p) {
  static LruCache<ConvPrimitive>& cache = *new LruCache<ConvPrimitive>(64);  // never destroyed: see DnnlEngine()
  const ConvShape& s = p.s;
  std::vector<int64_t> words = {static_cast<int64_t>(p.kind),
                                s.n,
                                s.c,
                                s.h,
                                s.w,
                                s.o,
                                s.kh,
                                s.kw,
                                s.ho,
                                s.wo,
                                s.groups,
                                s.sh,
                                s.sw,
                                s.ph,
                                s.pw,
                                s.dh,
                                s.dw};
  for (const Operand* o : {&p.x, &p.w, &p.y}) words.insert(words.end(), o->strides.begin(), o->strides.end());
  const auto prim = cache.FindOrMake(KeyOf(words), [&]() -> std::shared_ptr<const ConvPrimitive> {
    std::array<dnnl::memory::desc, 3> user;
    try {
      for (int k = 0; k < 3; ++k) {
        const std::array<int64_t, 4> d = p.dims(k);
        user[k] = UserDesc(Dims(d.begin(), d.end()),
                           (k == 0   ? p.x
                            : k == 1 ? p.w
                                     : p.y)
                               .strides,
                           k == 1 ? s.groups : 1);
      }
    } catch (const dnnl::error&) {
      return std::make_shared<ConvPrimitive>();  // not ok
    }
    return MakeConvPrimitive(s, p.kind, user);
  });
  if (!prim->ok) return false;

  const dnnl::engine& engine = DnnlEngine();
  dnnl::stream& stream = DnnlStream();
  const int output = OutputRole(p.kind);
  const std::array<char*, 3> data = {p.x.data, p.w.data, p.y.data};
  std::array<dnnl::memory, 3> user_mem, inner_mem;
  std::unordered_map<int, dnnl::memory> args;
  for (int k = 0; k < 3; ++k) {
    user_mem[k] = dnnl::memory(prim->user[k], engine, data[k]);
    inner_mem[k] = prim->reorder[k] ? dnnl::memory(prim->inner[k], engine) : user_mem[k];
    if (prim->reorder[k] && k != output) prim->reorders[k].execute(stream, user_mem[k], inner_mem[k]);
    args.emplace(prim->arg[k], inner_mem[k]);
  }
  args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(prim->scratchpad, engine));
  prim->prim.execute(stream, args);
  if (prim->reorder[output]) prim->reorders[output].execute(stream, inner_mem[output], user_mem[output]);
  stream.wait();
  return true;
}

/// float32 problem: oneDNN (after packing broadcast inputs, whose stride-0 layouts it does not take),
/// or the direct loop when oneDNN refuses it.
void ConvF32(ConvProblem p) {
  std::array<std::vector<float>, 3> packed;
  for (int k = 0; k < 3; ++k) {
    if (k == OutputRole(p.kind)) continue;
    Operand* o = p.operand(k);
    const std::array<int64_t, 4> dims = p.dims(k);
    bool broadcast = false;
    for (int d = 0; d < 4; ++d) broadcast |= o->strides[d] == 0 && dims[d] > 1;
    if (!broadcast) continue;
    packed[k].resize(dims[0] * dims[1] * dims[2] * dims[3]);
    const std::array<int64_t, 4> dense = Dense4(dims);
    const auto l = Collapse<2>(dims, {std::span<const int64_t>(dense), std::span<const int64_t>(o->strides)}, {4, 4});
    ForEach<2>(l, {reinterpret_cast<char*>(packed[k].data()), o->data},
               [](const std::array<char*, 2>& q, int64_t n, const std::array<int64_t, 2>& st) {
                 for (int64_t i = 0; i < n; ++i) {
                   reinterpret_cast<float*>(q[0])[i] = *reinterpret_cast<const float*>(q[1] + i * st[1]);
                 }
               });
    o->data = reinterpret_cast<char*>(packed[k].data());
    o->strides = dense;
  }
  if (!OneDnnConv(p)) DirectConv<float>(p);
}

// ---- the kernels --------------------------------------------------------------------------------

template <typename T, ConvKind kKind>
void Conv(const KernelCall& call) {
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>});
  ConvProblem p = ParseConv(call, kKind);
  constexpr int kOutput = OutputRole(kKind);
  const TensorRef out = call.output(0);
  const int64_t numel = out.numel();
  if (numel == 0) return;
  CheckContiguous(call, out, "the output");
  p.operand(kOutput)->strides = Dense4(p.dims(kOutput));           // any strides of extent-1 dims: made dense
  if (call.input(0).numel() == 0 || call.input(1).numel() == 0) {  // an empty sum everywhere
    std::fill(out.data<T>(), out.data<T>() + numel, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, double>) {
    DirectConv<double>(p);
  } else if constexpr (std::is_same_v<T, float>) {
    ConvF32(p);
  } else {
    // 16-bit: dense float32 copies of the inputs, a float32 result, one rounding per element.
    std::array<std::vector<float>, 3> buffers;
    for (int k = 0; k < 3; ++k) {
      const std::array<int64_t, 4> dims = p.dims(k);
      buffers[k].resize(dims[0] * dims[1] * dims[2] * dims[3]);
      if (k != kOutput) PackDense<T, float>(call.input(InputIndex(kKind, k)), buffers[k].data());
      p.operand(k)->data = reinterpret_cast<char*>(buffers[k].data());
      p.operand(k)->strides = Dense4(dims);
    }
    ConvF32(p);
    ConvertDense<float, T>(buffers[kOutput].data(), out.data<T>(), numel);
  }
}

template <typename... Ts>
void AddAll(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, "conv2d", {kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>},
             &GuardedKernel<&Conv<Ts, ConvKind::kForward>>),
   ...);
  (AddKernel(kernels, "conv2d_grad_input", {kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>},
             &GuardedKernel<&Conv<Ts, ConvKind::kGradInput>>),
   ...);
  (AddKernel(kernels, "conv2d_grad_weight", {kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>},
             &GuardedKernel<&Conv<Ts, ConvKind::kGradWeight>>),
   ...);
}

}  // namespace

void AppendConvKernels(std::vector<HostKernel>* kernels) { AddAll(kernels, FloatTypes{}); }

}  // namespace oar::host
