// IrContext: owns every uniqued type, attribute and symbol name, and the registry of dialects and ops.
// Everything created from a context lives as long as the context. A context is not thread-safe: build and
// transform one program per thread, or guard the context.
#ifndef OAR_CORE_IR_CONTEXT_H_
#define OAR_CORE_IR_CONTEXT_H_

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ir/types.h"

namespace oar::ir {

class Dialect;
struct OpInfo;
struct DimExprNode;

class IrContext {
 public:
  struct Impl;  // opaque
  /// A context with the builtin, cf and op dialects registered.
  IrContext();
  ~IrContext();
  IrContext(const IrContext&) = delete;
  IrContext& operator=(const IrContext&) = delete;

  // ---- types ----
  /// tensor<dims, dtype>; dims in the SymDim encoding (symbols must come from this context).
  Type TensorType(DType dtype, const Dims& dims);
  Type ScalarType(DType dtype);
  Type VectorType(std::span<const Type> elements);

  // ---- attributes ----
  Attribute BoolAttr(bool v);
  Attribute IntAttr(int64_t v);
  Attribute FloatAttr(double v);
  Attribute StringAttr(std::string_view v);
  Attribute ArrayAttr(std::span<const Attribute> elements);
  Attribute IntArrayAttr(std::span<const int64_t> values);
  Attribute DTypeAttr(DType t);
  /// A device by name ("kunlun_sim:0"); the name is stored as written, checked by kernel selection.
  Attribute DeviceAttr(std::string_view name);
  Attribute ShapeAttr(const Dims& dims);
  Attribute TypeAttr(Type t);

  // ---- symbolic extents ----
  /// The SymDim value of symbol `name` (interned on first use). Names are identifiers: [A-Za-z_][A-Za-z0-9_]*.
  int64_t Symbol(std::string_view name);
  /// The name of a symbolic extent (SymDim::IsSymbol(d)); for an expression extent (dim_expr.h), its text.
  const std::string& SymbolName(int64_t d) const;
  /// The expression behind a symbolic extent; nullptr for a named symbol (see dim_expr.h).
  const DimExprNode* SymbolExpr(int64_t d) const;
  /// Interns a canonical expression node (built by dim_expr.cc, which simplifies first) under its text;
  /// equal keys give the same extent.
  int64_t InternDimExpr(std::string key, DimExprNode node, std::string text);
  /// A fresh symbol "s<N>" not used before in this context.
  int64_t NewSymbol();

  // ---- dialects ----
  /// Register a dialect (owned by the context); throws kAlreadyExists on a second dialect of that name.
  Dialect& AddDialect(std::unique_ptr<Dialect> dialect);
  /// nullptr when unknown.
  Dialect* FindDialect(std::string_view name) const;
  /// "dialect.op" -> its info; nullptr when no registered dialect defines it.
  const OpInfo* FindOp(std::string_view full_name) const;
  /// Like FindOp, but throws kNotFound naming the op and the known ops of its dialect.
  const OpInfo& GetOp(std::string_view full_name) const;
  const std::vector<std::unique_ptr<Dialect>>& dialects() const { return dialects_; }

  /// Interned copy of `s` (attribute names, op names): stable for the context's lifetime.
  std::string_view Intern(std::string_view s);

 private:
  friend class Dialect;
  void IndexOp(const OpInfo* info);

  std::unique_ptr<Impl> impl_;
  std::vector<std::unique_ptr<Dialect>> dialects_;
};

/// Registers the dialects of a layer above (cinn from core/compiler) into a context.
using DialectLoader = void (*)(IrContext& ctx);
/// Every IrContext made after this call also gets `loader`'s dialects (so their text parses anywhere);
/// registering the same loader twice has no effect. Contexts made earlier are not changed.
void RegisterDialectLoader(DialectLoader loader);

}  // namespace oar::ir

#endif  // OAR_CORE_IR_CONTEXT_H_
