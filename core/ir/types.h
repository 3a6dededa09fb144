// PIR types and attributes: immutable values uniqued in an IrContext, compared by pointer.
//
// A tensor type is a dtype plus one extent per dimension. Each extent is static (>= 0), dynamic (`?`,
// unknown and unrelated to any other) or a named symbol (`B`, `seq`): every dimension that carries the same
// symbol has the same run-time extent. Extents are encoded in one int64 (see SymDim), so they fit in the
// core's `Dims` and flow through the op schemas' shape inference unchanged.
#ifndef OAR_CORE_IR_TYPES_H_
#define OAR_CORE_IR_TYPES_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor/dims.h"
#include "core/tensor/dtype.h"

namespace oar::ir {

class IrContext;

// ---- Extents ---------------------------------------------------------------------------------------------

/// An extent encoded in int64: >= 0 static, kDynamic for `?`, <= kFirstSymbol for the symbol
/// (kFirstSymbol - id) interned in an IrContext.
struct SymDim {
  static constexpr int64_t kDynamic = -1;
  static constexpr int64_t kFirstSymbol = -2;
  static bool IsStatic(int64_t d) { return d >= 0; }
  static bool IsDynamic(int64_t d) { return d == kDynamic; }
  static bool IsSymbol(int64_t d) { return d <= kFirstSymbol; }
  static int64_t FromSymbolId(int64_t id) { return kFirstSymbol - id; }
  static int64_t SymbolId(int64_t d) { return kFirstSymbol - d; }
};

// ---- Types -----------------------------------------------------------------------------------------------

enum class TypeKind : uint8_t {
  kTensor,  ///< tensor<[2, ?, B], f32>
  kScalar,  ///< f32, i64, i1 — a host scalar (loop counters, shape values)
  kVector,  ///< vec<T, ...> — an ordered list of values (variadic operands after combine)
};

namespace detail {
struct TypeStorage;
struct AttrStorage;
}  // namespace detail

/// A handle to a uniqued type; a null Type is "no type". Cheap to copy; equal types are the same pointer.
class Type {
 public:
  Type() = default;
  explicit Type(const detail::TypeStorage* s) : s_(s) {}
  explicit operator bool() const { return s_ != nullptr; }
  friend bool operator==(Type a, Type b) { return a.s_ == b.s_; }
  const detail::TypeStorage* storage() const { return s_; }

  TypeKind kind() const;
  bool IsTensor() const { return s_ && kind() == TypeKind::kTensor; }
  /// Tensor and scalar types: the element type.
  DType dtype() const;
  /// Tensor types: the extents (SymDim encoding).
  const Dims& dims() const;
  int rank() const { return dims().size(); }
  /// Tensor types: every extent is static.
  bool HasStaticShape() const;
  /// Vector types: the element types.
  std::span<const Type> elements() const;
  const IrContext& context() const;

 private:
  const detail::TypeStorage* s_ = nullptr;
};

// ---- Attributes ------------------------------------------------------------------------------------------

enum class AttrKind : uint8_t { kBool, kInt, kFloat, kString, kArray, kDType, kDevice, kShape, kType };

/// A handle to a uniqued attribute value.
class Attribute {
 public:
  Attribute() = default;
  explicit Attribute(const detail::AttrStorage* s) : s_(s) {}
  explicit operator bool() const { return s_ != nullptr; }
  friend bool operator==(Attribute a, Attribute b) { return a.s_ == b.s_; }
  const detail::AttrStorage* storage() const { return s_; }

  AttrKind kind() const;
  bool AsBool() const;
  int64_t AsInt() const;
  double AsFloat() const;
  /// kString and kDevice: the text ("cpu:0" for a device).
  const std::string& AsString() const;
  std::span<const Attribute> AsArray() const;
  DType AsDType() const;
  /// kShape: extents in the SymDim encoding.
  const Dims& AsShape() const;
  Type AsType() const;
  /// An array of kInt attributes as int64 values; throws kInvalidArgument naming `what` otherwise.
  std::vector<int64_t> AsInts(std::string_view what) const;

 private:
  const detail::AttrStorage* s_ = nullptr;
};

/// "kBool" -> "bool" etc., for messages.
std::string_view AttrKindName(AttrKind kind);

/// Short IR name of a dtype ("f32", "bf16", "i1") and its inverse (kInvalid when unknown).
std::string_view DTypeIrName(DType t);
DType DTypeFromIrName(std::string_view name);

}  // namespace oar::ir

#endif  // OAR_CORE_IR_TYPES_H_
