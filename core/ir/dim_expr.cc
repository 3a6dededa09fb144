#include "core/ir/dim_expr.h"

#include <algorithm>
#include <iterator>
#include <numeric>

#include "core/base/error.h"

namespace oar::ir {
namespace {

int64_t CheckedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  OAR_CHECK(!__builtin_add_overflow(a, b, &r), kOutOfRange, "symbolic extent: {} + {} overflows int64", a, b);
  return r;
}
int64_t CheckedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  OAR_CHECK(!__builtin_mul_overflow(a, b, &r), kOutOfRange, "symbolic extent: {} * {} overflows int64", a, b);
  return r;
}
int64_t FloorDivInt(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Bounds on a polynomial's size, so that hostile text ((A+B+...)*(A+B+...)*...) cannot take unbounded
// time or memory; no real shape needs more.
constexpr size_t kMaxTerms = 64;
constexpr size_t kMaxDegree = 16;

void AddTerm(DimPoly& p, const std::vector<int64_t>& monomial, int64_t coef) {
  if (coef == 0) return;
  OAR_CHECK_ARG(monomial.size() <= kMaxDegree, "symbolic extent: a term of degree {} (at most {})", monomial.size(),
                kMaxDegree);
  auto [it, fresh] = p.terms.emplace(monomial, coef);
  if (fresh) {
    OAR_CHECK_ARG(p.terms.size() <= kMaxTerms, "symbolic extent: more than {} terms", kMaxTerms);
    return;
  }
  it->second = CheckedAdd(it->second, coef);
  if (it->second == 0) p.terms.erase(it);
}

bool IsLeafOrCall(const IrContext& ctx, int64_t d) {
  const DimExprNode* n = DimNode(ctx, d);
  return n == nullptr || n->op == DimOp::kMin || n->op == DimOp::kMax || n->op == DimOp::kBroadcast;
}

// An operand of `/`: parenthesised unless it is a number, a symbol or a function call.
std::string DivOperand(const IrContext& ctx, int64_t d) {
  const std::string t = DimText(ctx, d);
  return IsLeafOrCall(ctx, d) ? t : "(" + t + ")";
}

std::string MonomialText(const IrContext& ctx, const std::vector<int64_t>& atoms, bool alone) {
  std::vector<std::string> parts;
  for (int64_t a : atoms) {
    const DimExprNode* n = DimNode(ctx, a);
    const bool paren = n != nullptr && n->op == DimOp::kFloorDiv && !alone;
    parts.push_back(paren ? "(" + DimText(ctx, a) + ")" : DimText(ctx, a));
  }
  std::sort(parts.begin(), parts.end());
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : "*") + p;
  return s;
}

std::string PolyText(const IrContext& ctx, const DimPoly& p) {
  struct Term {
    std::string mono;
    int64_t coef;
    size_t degree;
  };
  std::vector<Term> terms;
  int64_t constant = 0;
  for (const auto& [mono, coef] : p.terms) {
    if (mono.empty()) {
      constant = coef;
      continue;
    }
    const uint64_t mag = coef < 0 ? 0 - static_cast<uint64_t>(coef) : static_cast<uint64_t>(coef);
    const std::string m = MonomialText(ctx, mono, mag == 1 && mono.size() == 1);
    terms.push_back({mag == 1 ? m : std::to_string(mag) + "*" + m, coef, mono.size()});
  }
  // Higher degrees first, then by text.
  std::sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) {
    return a.degree != b.degree ? a.degree > b.degree : a.mono < b.mono;
  });
  std::string s;
  for (const Term& t : terms) s += (t.coef < 0 ? "-" : s.empty() ? "" : "+") + t.mono;
  if (constant != 0 || s.empty()) {
    const uint64_t mag = constant < 0 ? 0 - static_cast<uint64_t>(constant) : static_cast<uint64_t>(constant);
    s += (constant < 0 ? "-" : s.empty() ? "" : "+") + std::to_string(mag);
  }
  return s;
}

void PutI64(std::string& key, int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); }

int64_t InternCall(IrContext& ctx, DimOp op, int64_t a, int64_t b, bool commutative) {
  if (commutative) {
    const std::string ta = DimText(ctx, a);
    const std::string tb = DimText(ctx, b);
    if (tb < ta || (tb == ta && b < a)) std::swap(a, b);
  }
  std::string key(1, static_cast<char>('A' + static_cast<int>(op)));
  PutI64(key, a);
  PutI64(key, b);
  std::string text;
  switch (op) {
    case DimOp::kFloorDiv: text = DivOperand(ctx, a) + "/" + DivOperand(ctx, b); break;
    case DimOp::kMin: text = "min(" + DimText(ctx, a) + "," + DimText(ctx, b) + ")"; break;
    case DimOp::kMax: text = "max(" + DimText(ctx, a) + "," + DimText(ctx, b) + ")"; break;
    case DimOp::kBroadcast: text = "bcast(" + DimText(ctx, a) + "," + DimText(ctx, b) + ")"; break;
    case DimOp::kPoly: break;
  }
  DimExprNode node;
  node.op = op;
  node.operands = {a, b};
  return ctx.InternDimExpr(std::move(key), std::move(node), std::move(text));
}

bool Contains(const IrContext& ctx, int64_t haystack, int64_t needle, DimOp op) {
  if (haystack == needle) return true;
  const DimExprNode* n = DimNode(ctx, haystack);
  if (n == nullptr || n->op != op) return false;
  return Contains(ctx, n->operands[0], needle, op) || Contains(ctx, n->operands[1], needle, op);
}

}  // namespace

// ---- DimPoly ----------------------------------------------------------------------------------------------

DimPoly DimPoly::Constant(int64_t c) {
  DimPoly p;
  AddTerm(p, {}, c);
  return p;
}

DimPoly DimPoly::Of(const IrContext& ctx, int64_t extent) {
  OAR_CHECK_ARG(!SymDim::IsDynamic(extent), "symbolic extent: '?' has no value to compute with");
  if (SymDim::IsStatic(extent)) return Constant(extent);
  const DimExprNode* n = DimNode(ctx, extent);
  if (n != nullptr && n->op == DimOp::kPoly) return n->poly;
  DimPoly p;
  p.terms.emplace(std::vector<int64_t>{extent}, 1);
  return p;
}

std::optional<int64_t> DimPoly::AsConstant() const {
  if (terms.empty()) return 0;
  if (terms.size() == 1 && terms.begin()->first.empty()) return terms.begin()->second;
  return std::nullopt;
}

bool DimPoly::DivisibleBy(int64_t d) const {
  return std::all_of(terms.begin(), terms.end(), [&](const auto& t) { return t.second % d == 0; });
}

DimPoly operator+(const DimPoly& a, const DimPoly& b) {
  DimPoly r = a;
  for (const auto& [m, c] : b.terms) AddTerm(r, m, c);
  return r;
}

DimPoly operator-(const DimPoly& a, const DimPoly& b) {
  DimPoly r = a;
  for (const auto& [m, c] : b.terms) AddTerm(r, m, CheckedMul(c, -1));
  return r;
}

DimPoly operator*(const DimPoly& a, const DimPoly& b) {
  DimPoly r;
  for (const auto& [ma, ca] : a.terms) {
    for (const auto& [mb, cb] : b.terms) {
      std::vector<int64_t> m;
      std::merge(ma.begin(), ma.end(), mb.begin(), mb.end(), std::back_inserter(m));
      AddTerm(r, m, CheckedMul(ca, cb));
    }
  }
  return r;
}

// ---- constructors -----------------------------------------------------------------------------------------

int64_t DimFromPoly(IrContext& ctx, const DimPoly& p, std::string_view where) {
  if (const std::optional<int64_t> c = p.AsConstant()) {
    OAR_CHECK_ARG(*c >= 0, "{}: extent {} is negative", where, *c);
    return *c;
  }
  if (p.terms.size() == 1 && p.terms.begin()->second == 1 && p.terms.begin()->first.size() == 1) {
    return p.terms.begin()->first[0];
  }
  std::string key = "P";
  for (const auto& [m, c] : p.terms) {
    PutI64(key, c);
    PutI64(key, static_cast<int64_t>(m.size()));
    for (int64_t a : m) PutI64(key, a);
  }
  DimExprNode node;
  node.op = DimOp::kPoly;
  node.poly = p;
  return ctx.InternDimExpr(std::move(key), std::move(node), PolyText(ctx, p));
}

int64_t DimAdd(IrContext& ctx, int64_t a, int64_t b) {
  if (SymDim::IsDynamic(a) || SymDim::IsDynamic(b)) return SymDim::kDynamic;
  return DimFromPoly(ctx, DimPoly::Of(ctx, a) + DimPoly::Of(ctx, b), "add");
}

int64_t DimSub(IrContext& ctx, int64_t a, int64_t b) {
  if (SymDim::IsDynamic(a) || SymDim::IsDynamic(b)) return SymDim::kDynamic;
  return DimFromPoly(ctx, DimPoly::Of(ctx, a) - DimPoly::Of(ctx, b), "subtract");
}

int64_t DimMul(IrContext& ctx, int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (SymDim::IsDynamic(a) || SymDim::IsDynamic(b)) return SymDim::kDynamic;
  return DimFromPoly(ctx, DimPoly::Of(ctx, a) * DimPoly::Of(ctx, b), "multiply");
}

int64_t DimFloorDiv(IrContext& ctx, int64_t a, int64_t b) {
  OAR_CHECK_ARG(b != 0, "symbolic extent: division of {} by zero", DimText(ctx, a));
  if (b == 1) return a;
  if (SymDim::IsDynamic(a) || SymDim::IsDynamic(b)) return SymDim::kDynamic;
  if (a == b) return 1;
  if (SymDim::IsStatic(a) && SymDim::IsStatic(b)) return a / b;
  const DimPoly p = DimPoly::Of(ctx, a);
  if (SymDim::IsStatic(b)) {
    // (x/e)/b = x/(e*b) for positive e and b.
    if (const DimExprNode* n = DimNode(ctx, a); n != nullptr && n->op == DimOp::kFloorDiv &&
                                                SymDim::IsStatic(n->operands[1])) {
      return DimFloorDiv(ctx, n->operands[0], CheckedMul(n->operands[1], b));
    }
    // p = b*q + r with every coefficient of r in [0, b): p/b = q + r/b, and r/b = 0 when r is a constant.
    DimPoly q, r;
    for (const auto& [m, c] : p.terms) {
      const int64_t qc = FloorDivInt(c, b);
      AddTerm(q, m, qc);
      AddTerm(r, m, c - qc * b);
    }
    if (r.AsConstant()) return DimFromPoly(ctx, q, "divide");
    const int64_t rest = InternCall(ctx, DimOp::kFloorDiv, DimFromPoly(ctx, r, "divide"), b, false);
    return DimFromPoly(ctx, q + DimPoly::Of(ctx, rest), "divide");
  }
  // A symbolic divisor that is an atom dividing every term.
  const DimPoly pb = DimPoly::Of(ctx, b);
  if (pb.terms.size() == 1 && pb.terms.begin()->second == 1 && pb.terms.begin()->first.size() == 1) {
    const int64_t atom = pb.terms.begin()->first[0];
    DimPoly q;
    bool all = true;
    for (const auto& [m, c] : p.terms) {
      auto it = std::find(m.begin(), m.end(), atom);
      if (it == m.end()) {
        all = false;
        break;
      }
      std::vector<int64_t> rest = m;
      rest.erase(rest.begin() + (it - m.begin()));
      AddTerm(q, rest, c);
    }
    if (all) return DimFromPoly(ctx, q, "divide");
  }
  return InternCall(ctx, DimOp::kFloorDiv, a, b, false);
}

int64_t DimExactDiv(IrContext& ctx, int64_t a, int64_t b) {
  if (SymDim::IsStatic(a) && SymDim::IsStatic(b) && b != 0) {
    OAR_CHECK_ARG(a % b == 0, "symbolic extent: {} is not divisible by {}", a, b);
  }
  return DimFloorDiv(ctx, a, b);
}

namespace {
int64_t MinMax(IrContext& ctx, int64_t a, int64_t b, bool is_min) {
  if (SymDim::IsDynamic(a) || SymDim::IsDynamic(b)) return SymDim::kDynamic;
  if (a == b) return a;
  if (SymDim::IsStatic(a) && SymDim::IsStatic(b)) return is_min ? std::min(a, b) : std::max(a, b);
  // Extents whose difference is a constant are ordered.
  if (const std::optional<int64_t> diff = (DimPoly::Of(ctx, a) - DimPoly::Of(ctx, b)).AsConstant()) {
    return (*diff <= 0) == is_min ? a : b;
  }
  return InternCall(ctx, is_min ? DimOp::kMin : DimOp::kMax, a, b, true);
}
}  // namespace

int64_t DimMin(IrContext& ctx, int64_t a, int64_t b) { return MinMax(ctx, a, b, true); }
int64_t DimMax(IrContext& ctx, int64_t a, int64_t b) { return MinMax(ctx, a, b, false); }

int64_t DimBroadcast(IrContext& ctx, int64_t a, int64_t b) {
  if (a == b || b == 1) return a;
  if (a == 1) return b;
  if (SymDim::IsStatic(a) && SymDim::IsStatic(b)) {
    Throw(ErrorCode::kInvalidArgument, "extents {} and {} cannot be broadcast (they differ and neither is 1)", a, b);
  }
  if (SymDim::IsStatic(a)) return a;  // b must be 1 or a
  if (SymDim::IsStatic(b)) return b;
  if (SymDim::IsDynamic(a) || SymDim::IsDynamic(b)) return SymDim::kDynamic;
  if (Contains(ctx, a, b, DimOp::kBroadcast)) return a;
  if (Contains(ctx, b, a, DimOp::kBroadcast)) return b;
  return InternCall(ctx, DimOp::kBroadcast, a, b, true);
}

// ---- queries ----------------------------------------------------------------------------------------------

const DimExprNode* DimNode(const IrContext& ctx, int64_t extent) {
  return SymDim::IsSymbol(extent) ? ctx.SymbolExpr(extent) : nullptr;
}

std::string DimText(const IrContext& ctx, int64_t extent) {
  if (SymDim::IsStatic(extent)) return std::to_string(extent);
  if (SymDim::IsDynamic(extent)) return "?";
  return ctx.SymbolName(extent);
}

namespace {
void CollectSymbols(const IrContext& ctx, int64_t d, std::vector<int64_t>& out) {
  if (!SymDim::IsSymbol(d)) return;
  const DimExprNode* n = DimNode(ctx, d);
  if (n == nullptr) {
    out.push_back(d);
  } else if (n->op == DimOp::kPoly) {
    for (const auto& [m, c] : n->poly.terms) {
      for (int64_t a : m) CollectSymbols(ctx, a, out);
    }
  } else {
    for (int64_t o : n->operands) CollectSymbols(ctx, o, out);
  }
}
}  // namespace

std::vector<int64_t> DimSymbols(const IrContext& ctx, int64_t extent) {
  std::vector<int64_t> out;
  CollectSymbols(ctx, extent, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<int64_t> DimEvaluate(const IrContext& ctx, int64_t extent,
                                   const std::function<std::optional<int64_t>(int64_t symbol)>& value) {
  if (SymDim::IsStatic(extent)) return extent;
  if (SymDim::IsDynamic(extent)) return std::nullopt;
  const DimExprNode* n = DimNode(ctx, extent);
  if (n == nullptr) return value(extent);
  if (n->op == DimOp::kPoly) {
    int64_t sum = 0;
    for (const auto& [m, c] : n->poly.terms) {
      int64_t term = c;
      for (int64_t a : m) {
        const std::optional<int64_t> v = DimEvaluate(ctx, a, value);
        if (!v || __builtin_mul_overflow(term, *v, &term)) return std::nullopt;
      }
      if (__builtin_add_overflow(sum, term, &sum)) return std::nullopt;
    }
    return sum;
  }
  const std::optional<int64_t> a = DimEvaluate(ctx, n->operands[0], value);
  const std::optional<int64_t> b = DimEvaluate(ctx, n->operands[1], value);
  if (!a || !b) return std::nullopt;
  switch (n->op) {
    case DimOp::kFloorDiv:
      if (*b == 0) return std::nullopt;
      return FloorDivInt(*a, *b);
    case DimOp::kMin: return std::min(*a, *b);
    case DimOp::kMax: return std::max(*a, *b);
    case DimOp::kBroadcast:
      if (*a == *b || *b == 1) return *a;
      if (*a == 1) return *b;
      return std::nullopt;
    case DimOp::kPoly: break;
  }
  return std::nullopt;
}

int64_t DimSubstitute(IrContext& ctx, int64_t extent, const std::function<int64_t(int64_t symbol)>& map) {
  if (!SymDim::IsSymbol(extent)) return extent;
  const DimExprNode* n = DimNode(ctx, extent);
  if (n == nullptr) return map(extent);
  if (n->op == DimOp::kPoly) {
    const DimPoly p = n->poly;  // copy
    DimPoly sum;  // intermediate sums may have negative constants: accumulate as a polynomial
    for (const auto& [m, c] : p.terms) {
      int64_t term = 1;
      for (int64_t a : m) term = DimMul(ctx, term, DimSubstitute(ctx, a, map));
      if (SymDim::IsDynamic(term)) return SymDim::kDynamic;
      sum = sum + DimPoly::Of(ctx, term) * DimPoly::Constant(c);
    }
    return DimFromPoly(ctx, sum, "substitute");
  }
  const DimOp op = n->op;
  const int64_t a = DimSubstitute(ctx, n->operands[0], map);
  const int64_t b = DimSubstitute(ctx, n->operands[1], map);
  switch (op) {
    case DimOp::kFloorDiv: return DimFloorDiv(ctx, a, b);
    case DimOp::kMin: return DimMin(ctx, a, b);
    case DimOp::kMax: return DimMax(ctx, a, b);
    case DimOp::kBroadcast: return DimBroadcast(ctx, a, b);
    case DimOp::kPoly: break;
  }
  return extent;
}

}  // namespace oar::ir
