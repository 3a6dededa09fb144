// Symbolic extent expressions (the `shape` part of PIR): a derived extent such as `B*S`, `S+1`, `(S+1)/2`,
// `min(S,T)` or `bcast(S,T)` is an extent like a named symbol, uniqued in the IrContext and encoded in the
// same int64 (SymDim::IsSymbol is true for it), so it flows through `Dims`, types and attributes unchanged.
//
// Canonical form. Sums, differences and products are kept as a polynomial with int64 coefficients over
// atoms; an atom is a named symbol or a node that is not polynomial: floor division, min, max and
// broadcast. Every constructor simplifies (constant folding, like terms, x*1, x+0, x/1, min(x,x),
// bcast(x,1), ...) and orders commutative operands by their text, so two expressions that simplify to the
// same form are the same extent (compared with ==) and print the same in any context.
//
// Text form (types, shape attributes):
//   extent := '?' | sum        sum := ['-'] term (('+' | '-') term)*      term := factor (('*' | '/') factor)*
//   factor := integer | symbol | '(' sum ')' | ('min' | 'max' | 'bcast') '(' sum ',' sum ')'
// `/` is floor division. `bcast(a,b)` is the extent of broadcasting a against b: a when b is 1, b when a
// is 1, and a when they are equal (anything else is an error at run time).
#ifndef OAR_CORE_IR_DIM_EXPR_H_
#define OAR_CORE_IR_DIM_EXPR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/context.h"

namespace oar::ir {

/// The kind of a non-leaf symbolic extent.
enum class DimOp : uint8_t { kPoly, kFloorDiv, kMin, kMax, kBroadcast };

/// A polynomial with int64 coefficients over atoms (extents that are named symbols or non-polynomial
/// nodes). The key of each term is its monomial: atom extents in ascending order (repeated for powers);
/// the empty monomial is the constant term. Zero coefficients are never stored.
struct DimPoly {
  std::map<std::vector<int64_t>, int64_t> terms;

  static DimPoly Constant(int64_t c);
  /// The polynomial of an extent: a static value, an atom, or the terms of a polynomial node. `?` is an
  /// error (kInvalidArgument).
  static DimPoly Of(const IrContext& ctx, int64_t extent);
  /// The constant value when the polynomial has no other term.
  std::optional<int64_t> AsConstant() const;
  /// Every coefficient (and the constant) is divisible by `d`.
  bool DivisibleBy(int64_t d) const;

  /// Arithmetic; throws kOutOfRange when a coefficient overflows int64.
  friend DimPoly operator+(const DimPoly& a, const DimPoly& b);
  friend DimPoly operator-(const DimPoly& a, const DimPoly& b);
  friend DimPoly operator*(const DimPoly& a, const DimPoly& b);
};

/// The stored form of a non-leaf symbolic extent (owned by the IrContext).
struct DimExprNode {
  DimOp op = DimOp::kPoly;
  DimPoly poly;                   ///< kPoly
  std::vector<int64_t> operands;  ///< kFloorDiv: {numerator, denominator}; kMin/kMax/kBroadcast: two, ordered
};

/// The canonical extent of a polynomial: a static value, an atom, or a uniqued polynomial node. A negative
/// constant is an error (kInvalidArgument) naming `where`.
int64_t DimFromPoly(IrContext& ctx, const DimPoly& p, std::string_view where = "symbolic extent");

/// Extent arithmetic on extents (static, symbols or expressions; `?` in, `?` out).
int64_t DimAdd(IrContext& ctx, int64_t a, int64_t b);
int64_t DimSub(IrContext& ctx, int64_t a, int64_t b);
int64_t DimMul(IrContext& ctx, int64_t a, int64_t b);
/// Floor division; a static zero divisor is an error.
int64_t DimFloorDiv(IrContext& ctx, int64_t a, int64_t b);
/// Exact division: like DimFloorDiv, but a static remainder is an error naming both extents.
int64_t DimExactDiv(IrContext& ctx, int64_t a, int64_t b);
int64_t DimMin(IrContext& ctx, int64_t a, int64_t b);
int64_t DimMax(IrContext& ctx, int64_t a, int64_t b);
/// The broadcast of two extents; two different static extents, neither 1, are an error.
int64_t DimBroadcast(IrContext& ctx, int64_t a, int64_t b);

/// The text of an extent as the printer writes it ("?", "3", "B", "B*S+1").
std::string DimText(const IrContext& ctx, int64_t extent);
/// The node of a non-leaf symbolic extent; nullptr for static, `?` and named symbols.
const DimExprNode* DimNode(const IrContext& ctx, int64_t extent);
/// The named symbols an extent depends on (each once, in ascending order).
std::vector<int64_t> DimSymbols(const IrContext& ctx, int64_t extent);
/// The value of an extent under values for its named symbols; nullopt when one is unbound, the extent is
/// `?`, or it is undefined there (division by zero, broadcasting 2 against 3).
std::optional<int64_t> DimEvaluate(const IrContext& ctx, int64_t extent,
                                   const std::function<std::optional<int64_t>(int64_t symbol)>& value);
/// The extent with each named symbol replaced by `map(symbol)` (which returns the symbol to keep it),
/// simplified again.
int64_t DimSubstitute(IrContext& ctx, int64_t extent, const std::function<int64_t(int64_t symbol)>& map);

}  // namespace oar::ir

#endif  // OAR_CORE_IR_DIM_EXPR_H_
