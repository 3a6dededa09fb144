#include "core/ir/shape_infer.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "core/base/error.h"
#include "core/ir/dim_expr.h"
#include "core/ir/op_dialect.h"

namespace oar::ir {
namespace {

using ops::TensorMeta;
using Int = __int128;

// ---- the single-probe rule (the fallback) ----------------------------------------------------------------
//
// Each unknown is replaced by a distinct large "probe" extent, the rule runs, and results are mapped back:
// an extent equal to a symbol's probe is that symbol, any other extent derived from a probe is `?`, and
// small values are static. When two unknowns meet (broadcasting `?` against `?`), the rule runs again with
// one probe for all of them, and only extents that came from a single symbol keep it.

constexpr int64_t kProbeBase = int64_t{1} << 32;
constexpr int64_t kProbeStep = int64_t{1} << 16;
constexpr int64_t kDerivedFloor = int64_t{1} << 31;  // no real extent is this large in one dimension

std::vector<Type> ToTypes(IrContext& ctx, const std::vector<TensorMeta>& out, const auto& map_dim) {
  std::vector<Type> types;
  for (const TensorMeta& m : out) {
    Dims dims = m.shape;
    for (int64_t& d : dims) d = map_dim(d);
    types.push_back(ctx.TensorType(m.dtype, dims));
  }
  return types;
}

std::vector<Type> InferByProbes(IrContext& ctx, const ops::OpSchema& s, const std::vector<TensorMeta>& metas,
                                const ops::AttrValues& attrs) {
  if (s.kind == ops::OpKind::kView || s.kind == ops::OpKind::kComposite) {
    return ToTypes(ctx, s.Infer(metas, attrs), [](int64_t d) { return d; });  // view rules keep symbols
  }
  std::vector<std::pair<int64_t, int64_t>> probe_of;  // probe -> IR extent
  std::vector<TensorMeta> probed = metas;
  int64_t dynamic_count = 0;
  for (TensorMeta& m : probed) {
    for (int64_t& d : m.shape) {
      if (SymDim::IsStatic(d)) continue;
      const int64_t p = SymDim::IsSymbol(d) ? kProbeBase + 2 * SymDim::SymbolId(d) * kProbeStep
                                            : kProbeBase + (2 * dynamic_count++ + 1) * kProbeStep;
      probe_of.emplace_back(p, d);
      d = p;
    }
  }
  auto named = [&](const Error& e) {
    std::string msg = e.what();
    for (const auto& [p, d] : probe_of) {
      const std::string num = std::to_string(p);
      for (size_t at = msg.find(num); at != std::string::npos; at = msg.find(num, at)) msg.replace(at, num.size(), DimText(ctx, d));
    }
    return Error(e.code(), msg);
  };
  try {
    return ToTypes(ctx, s.Infer(probed, attrs), [&](int64_t d) {
      for (const auto& [p, ir] : probe_of) {
        if (d == p) return SymDim::IsSymbol(ir) ? ir : SymDim::kDynamic;
      }
      return d >= kDerivedFloor || d < 0 ? SymDim::kDynamic : d;
    });
  } catch (const Error& first) {
    std::vector<TensorMeta> same = metas;
    int64_t only = 0;  // the single symbol all unknowns share, else kDynamic
    bool first_unknown = true;
    for (TensorMeta& m : same) {
      for (int64_t& d : m.shape) {
        if (SymDim::IsStatic(d)) continue;
        only = first_unknown ? d : (only == d ? only : SymDim::kDynamic);
        first_unknown = false;
        d = kProbeBase;
      }
    }
    std::vector<TensorMeta> out;
    try {
      out = s.Infer(same, attrs);
    } catch (const Error&) {
      throw named(first);
    }
    return ToTypes(ctx, out, [&](int64_t d) {
      if (d == kProbeBase) return SymDim::IsSymbol(only) ? only : SymDim::kDynamic;
      return d >= kDerivedFloor || d < 0 ? SymDim::kDynamic : d;
    });
  }
}

// ---- broadcasting ops ------------------------------------------------------------------------------------

std::vector<Type> InferBroadcast(IrContext& ctx, const ops::OpSchema& s, const std::vector<TensorMeta>& metas,
                                 const ops::AttrValues& attrs) {
  // The dtype rule on all-ones shapes of the same ranks; the extents broadcast symbolically.
  std::vector<TensorMeta> ones = metas;
  int rank = 0;
  for (TensorMeta& m : ones) {
    rank = std::max(rank, m.shape.size());
    m.shape = Dims::Filled(m.shape.size(), 1);
  }
  std::vector<TensorMeta> out = s.Infer(ones, attrs);
  Dims shape = Dims::Filled(rank, 1);
  Dims so_far = metas[0].shape;
  for (size_t i = 0; i < metas.size(); ++i) {
    const Dims& x = metas[i].shape;
    for (int d = 0; d < x.size(); ++d) {
      int64_t& o = shape[rank - x.size() + d];
      try {
        o = DimBroadcast(ctx, o, x[d]);
      } catch (const Error& e) {
        auto text = [&](const Dims& dims) {
          std::string t = "[";
          for (int k = 0; k < dims.size(); ++k) t += (k ? ", " : "") + DimText(ctx, dims[k]);
          return t + "]";
        };
        Throw(ErrorCode::kInvalidArgument, "{}: argument '{}' of shape {} cannot be broadcast with shape {}: {}",
              s.name, s.InputName(i), text(x), text(so_far), e.what());
      }
    }
    so_far = shape;
  }
  for (TensorMeta& m : out) m.shape = shape;
  return ToTypes(ctx, out, [](int64_t d) { return d; });
}

// ---- fitting ---------------------------------------------------------------------------------------------

constexpr int kMaxVars = 5;
constexpr int64_t kGrid = 120;   // grid spacing; divisible by 1-6, 8, 10, 12, 15, ...
constexpr Int kMaxDen = 64;
constexpr int64_t kOffsets[] = {1, 2, 3, 5, 7, 11, 13};

struct Unknowns {
  std::vector<int64_t> extents;  // per variable: its IR extent (kDynamic for each `?`)
  std::vector<std::vector<int>> var_of;  // per operand and dimension: variable index or -1 (static)
};

Unknowns FindUnknowns(const std::vector<TensorMeta>& metas) {
  Unknowns u;
  for (const TensorMeta& m : metas) {
    std::vector<int>& row = u.var_of.emplace_back();
    for (int64_t d : m.shape) {
      if (SymDim::IsStatic(d)) {
        row.push_back(-1);
        continue;
      }
      auto it = SymDim::IsDynamic(d) ? u.extents.end() : std::find(u.extents.begin(), u.extents.end(), d);
      if (it == u.extents.end()) {
        row.push_back(static_cast<int>(u.extents.size()));
        u.extents.push_back(d);
      } else {
        row.push_back(static_cast<int>(it - u.extents.begin()));
      }
    }
  }
  return u;
}

class Fitter {
 public:
  Fitter(IrContext& ctx, const ops::OpSchema& s, const std::vector<TensorMeta>& metas, const ops::AttrValues& attrs,
         const Unknowns& u)
      : ctx_(ctx), s_(s), metas_(metas), attrs_(attrs), u_(u) {}

  /// The rule's outputs with block values `values` (block_of maps variables to blocks); nullopt if it throws.
  std::optional<std::vector<TensorMeta>> Run(const std::vector<int>& block_of, const std::vector<int64_t>& values) {
    std::vector<TensorMeta> in = metas_;
    for (size_t i = 0; i < in.size(); ++i) {
      for (int d = 0; d < in[i].shape.size(); ++d) {
        const int v = u_.var_of[i][d];
        if (v >= 0) in[i].shape[d] = values[block_of[v]];
      }
    }
    try {
      return s_.Infer(in, attrs_);
    } catch (const Error&) {
      return std::nullopt;
    }
  }

  static int64_t GridValue(int block, int bit) { return kGrid * (2 + 3 * block + bit); }

  /// The fitted inference for partition `block_of` into `k` blocks; nullopt when the rule throws on the grid
  /// or the outputs change rank or dtype between points.
  std::optional<SymbolicInference> Fit(const std::vector<int>& block_of, int k) {
    // Block representatives: a symbol or expression when the block has one (the one with the smallest text).
    std::vector<int64_t> rep(k, SymDim::kDynamic);
    for (size_t v = 0; v < u_.extents.size(); ++v) {
      int64_t& r = rep[block_of[v]];
      const int64_t e = u_.extents[v];
      if (SymDim::IsDynamic(e)) continue;
      if (SymDim::IsDynamic(r) || DimText(ctx_, e) < DimText(ctx_, r)) r = e;
    }
    // Grid points, then check points (must succeed), then small points (may be refused).
    std::vector<std::vector<int64_t>> points;
    for (int mask = 0; mask < (1 << k); ++mask) {
      std::vector<int64_t>& p = points.emplace_back(k);
      for (int j = 0; j < k; ++j) p[j] = GridValue(j, (mask >> j) & 1);
    }
    const size_t grid_end = points.size();
    for (size_t o = 0; o < std::size(kOffsets); ++o) {
      std::vector<int64_t>& p = points.emplace_back(k);
      for (int j = 0; j < k; ++j) p[j] = GridValue(j, 0) + kOffsets[(o + j) % std::size(kOffsets)] + 17 * j;
    }
    const size_t check_end = points.size();
    for (int s = 0; s < 2; ++s) {
      std::vector<int64_t>& p = points.emplace_back(k);
      for (int j = 0; j < k; ++j) p[j] = s == 0 ? 2 + j : 5 + 2 * j;
    }
    std::vector<std::optional<std::vector<TensorMeta>>> outs;
    for (size_t i = 0; i < points.size(); ++i) {
      outs.push_back(Run(block_of, points[i]));
      if (i < check_end && !outs.back()) return std::nullopt;
      if (outs.back() && !SameLayout(*outs.back(), *outs[0])) {
        if (i < check_end) return std::nullopt;
        outs.back().reset();  // a small point in another regime (a squeeze of 1) says nothing
      }
    }
    SymbolicInference r;
    for (size_t o = 0; o < outs[0]->size(); ++o) {
      const TensorMeta& m = (*outs[0])[o];
      Dims dims = m.shape;
      for (int d = 0; d < dims.size(); ++d) {
        std::vector<std::optional<int64_t>> f;
        for (const auto& out : outs) f.push_back(out ? std::optional<int64_t>((*out)[o].shape[d]) : std::nullopt);
        dims[d] = FitExtent(points, grid_end, f, rep, k);
      }
      r.types.push_back(ctx_.TensorType(m.dtype, dims));
    }
    for (size_t v = 0; v < u_.extents.size(); ++v) {
      const int64_t e = u_.extents[v];
      const int64_t rp = rep[block_of[v]];
      if (!SymDim::IsDynamic(e) && e != rp) r.equal.emplace_back(rp, e);
    }
    return r;
  }

 private:
  static bool SameLayout(const std::vector<TensorMeta>& a, const std::vector<TensorMeta>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].dtype != b[i].dtype || a[i].shape.size() != b[i].shape.size()) return false;
    }
    return true;
  }

  // One result extent from its values at every point (nullopt: the rule refused that small point).
  int64_t FitExtent(const std::vector<std::vector<int64_t>>& points, size_t grid_end,
                    const std::vector<std::optional<int64_t>>& f, const std::vector<int64_t>& rep, int k) {
    const bool constant = std::all_of(f.begin(), f.end(), [&](const auto& v) { return !v || *v == *f[0]; });
    if (constant) return *f[0] >= 0 ? *f[0] : SymDim::kDynamic;
    // Newton form on the grid: f = sum_S d_S prod_{i in S} (x_i - a_i) / kGrid, d_S the finite differences.
    std::vector<Int> diff(grid_end);
    for (size_t m = 0; m < grid_end; ++m) diff[m] = *f[m];
    for (int i = 0; i < k; ++i) {
      for (size_t m = 0; m < grid_end; ++m) {
        if ((m >> i) & 1) diff[m] -= diff[m ^ (size_t{1} << i)];
      }
    }
    // Monomial numerators over the common denominator kGrid^k.
    std::vector<Int> num(grid_end, 0);
    bool overflow = false;
    auto mul = [&](Int a, Int b) {
      Int r = 0;
      overflow = overflow || __builtin_mul_overflow(a, b, &r);
      return r;
    };
    for (size_t S = 0; S < grid_end; ++S) {
      if (diff[S] == 0) continue;
      for (size_t M = S;; M = (M - 1) & S) {  // every subset M of S
        Int c = diff[S];
        for (int i = 0; i < k; ++i) {
          if (((S >> i) & 1) && !((M >> i) & 1)) c = mul(c, -Int{GridValue(i, 0)});
          if (!((S >> i) & 1)) c = mul(c, kGrid);
        }
        overflow = overflow || __builtin_add_overflow(num[M], c, &num[M]);
        if (M == 0) break;
      }
    }
    if (overflow) return SymDim::kDynamic;
    Int den = 1;
    for (int i = 0; i < k; ++i) den *= kGrid;
    auto gcd = [](Int a, Int b) {
      while (b != 0) a = std::exchange(b, a % b);
      return a;
    };
    Int g = den;
    for (Int c : num) g = gcd(g, c < 0 ? -c : c);
    den /= g;
    for (Int& c : num) c /= g;
    if (den > kMaxDen) return SymDim::kDynamic;
    for (size_t M = 0; M < grid_end; ++M) {
      if (num[M] == 0) continue;
      if (num[M] > std::numeric_limits<int64_t>::max() || num[M] < std::numeric_limits<int64_t>::min()) {
        return SymDim::kDynamic;
      }
      for (int i = 0; i < k; ++i) {
        if (((M >> i) & 1) && SymDim::IsDynamic(rep[i])) return SymDim::kDynamic;  // depends on a `?`
      }
    }
    auto eval = [&](const std::vector<int64_t>& x) -> std::optional<Int> {
      Int sum = 0;
      for (size_t M = 0; M < grid_end; ++M) {
        Int t = num[M];
        for (int i = 0; i < k; ++i) {
          if ((M >> i) & 1) t = mul(t, x[i]);
        }
        if (__builtin_add_overflow(sum, t, &sum)) return std::nullopt;
      }
      if (overflow) return std::nullopt;
      return sum;
    };
    auto floor_div = [](Int a, Int b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); };
    int64_t offset = -1;
    for (Int r = 0; r < den; ++r) {
      bool ok = true;
      for (size_t p = grid_end; ok && p < points.size(); ++p) {
        if (!f[p]) continue;
        const std::optional<Int> n = eval(points[p]);
        ok = n && floor_div(*n + r, den) == *f[p];
      }
      if (!ok) continue;
      if (offset >= 0) return SymDim::kDynamic;  // two offsets fit the points: not determined
      offset = static_cast<int64_t>(r);
    }
    if (offset < 0) return SymDim::kDynamic;
    try {
      DimPoly p = DimPoly::Constant(offset);
      for (size_t M = 0; M < grid_end; ++M) {
        if (num[M] == 0) continue;
        DimPoly t = DimPoly::Constant(static_cast<int64_t>(num[M]));
        for (int i = 0; i < k; ++i) {
          if ((M >> i) & 1) t = t * DimPoly::Of(ctx_, rep[i]);
        }
        p = p + t;
      }
      if (den == 1) return DimFromPoly(ctx_, p);
      return DimFloorDiv(ctx_, DimFromPoly(ctx_, p), static_cast<int64_t>(den));
    } catch (const Error&) {
      return SymDim::kDynamic;  // a negative constant or an overflow: not an extent expression
    }
  }

  IrContext& ctx_;
  const ops::OpSchema& s_;
  const std::vector<TensorMeta>& metas_;
  const ops::AttrValues& attrs_;
  const Unknowns& u_;
};

// Set partitions of n items as restricted growth strings, coarser ones later.
void Partitions(int n, std::vector<std::vector<int>>& out) {
  std::vector<int> a(n, 0);
  std::function<void(int, int)> rec = [&](int i, int blocks) {
    if (i == n) {
      out.push_back(a);
      return;
    }
    for (int b = 0; b <= blocks; ++b) {
      a[i] = b;
      rec(i + 1, std::max(blocks, b + 1));
    }
  };
  rec(0, 0);
  auto count = [](const std::vector<int>& p) { return p.empty() ? 0 : *std::max_element(p.begin(), p.end()) + 1; };
  std::stable_sort(out.begin(), out.end(), [&](const auto& x, const auto& y) { return count(x) > count(y); });
}

}  // namespace

SymbolicInference InferSymbolic(IrContext& ctx, const ops::OpSchema& s, std::span<const Type> operand_types,
                                const std::vector<NamedAttribute>& attributes) {
  std::vector<TensorMeta> metas;
  bool all_static = true;
  for (size_t i = 0; i < operand_types.size(); ++i) {
    const Type t = operand_types[i];
    OAR_CHECK_ARG(t.IsTensor(), "{}: operand {} ('{}') must be a tensor", s.name, i, s.InputName(i));
    metas.push_back({t.dtype(), t.dims()});
    all_static = all_static && t.HasStaticShape();
  }
  const ops::AttrValues attrs = SchemaAttrValues(s, attributes);
  SymbolicInference r;
  if (all_static) {
    r.types = ToTypes(ctx, s.Infer(metas, attrs), [](int64_t d) { return d; });
    return r;
  }
  if (s.kind == ops::OpKind::kBinary || s.kind == ops::OpKind::kCompare || s.kind == ops::OpKind::kWhere) {
    r.types = InferBroadcast(ctx, s, metas, attrs);
    return r;
  }
  const Unknowns u = FindUnknowns(metas);
  const int n = static_cast<int>(u.extents.size());
  if (n <= kMaxVars) {
    Fitter fitter(ctx, s, metas, attrs, u);
    std::vector<int> finest(n);
    std::iota(finest.begin(), finest.end(), 0);
    std::vector<int64_t> base(n);
    for (int j = 0; j < n; ++j) base[j] = Fitter::GridValue(j, 0);
    if (fitter.Run(finest, base)) {
      if (std::optional<SymbolicInference> fit = fitter.Fit(finest, n)) return *fit;
    } else {
      // The finest merging of unknowns that the rule accepts; two of the same fineness are ambiguous.
      std::vector<std::vector<int>> parts;
      Partitions(n, parts);
      std::optional<std::vector<int>> chosen;
      int chosen_blocks = -1;
      bool ambiguous = false;
      for (const std::vector<int>& p : parts) {
        const int k = *std::max_element(p.begin(), p.end()) + 1;
        if (k == n) continue;
        if (chosen && k < chosen_blocks) break;
        std::vector<int64_t> values(k);
        for (int j = 0; j < k; ++j) values[j] = Fitter::GridValue(j, 0);
        if (!fitter.Run(p, values)) continue;
        if (chosen) {
          ambiguous = true;
          break;
        }
        chosen = p;
        chosen_blocks = k;
      }
      if (chosen && !ambiguous) {
        if (std::optional<SymbolicInference> fit = fitter.Fit(*chosen, chosen_blocks)) return *fit;
      }
    }
  }
  r.types = InferByProbes(ctx, s, metas, attrs);
  return r;
}

}  // namespace oar::ir
