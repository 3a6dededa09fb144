#include "core/ir/context.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_set>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ir/dim_expr.h"
#include "core/ir/storage.h"

namespace oar::ir {

struct IrContext::Impl {
  // Storage is never moved once created (deque), so handles stay valid.
  std::deque<detail::TypeStorage> types;
  std::deque<detail::AttrStorage> attrs;
  std::unordered_map<std::string, const detail::TypeStorage*> type_index;
  std::unordered_map<std::string, const detail::AttrStorage*> attr_index;
  std::vector<std::string> symbols;                        // by symbol id: the name, or an expression's text
  std::vector<std::unique_ptr<const DimExprNode>> exprs;   // by symbol id: null for a named symbol
  std::unordered_map<std::string, int64_t> symbol_index;
  std::unordered_map<std::string, int64_t> expr_index;     // uniquing key -> extent
  std::unordered_set<std::string> strings;
  std::unordered_map<std::string_view, const OpInfo*> ops;
  int64_t next_fresh = 0;
};

namespace {

// Uniquing keys: a compact binary encoding of the storage's fields.
void Put(std::string& key, const void* p, size_t n) { key.append(static_cast<const char*>(p), n); }
template <typename T> void Put(std::string& key, T v) { Put(key, &v, sizeof v); }
void PutDims(std::string& key, const Dims& d) {
  Put<int32_t>(key, d.size());
  for (int64_t x : d) Put(key, x);
}

}  // namespace

namespace {
struct DialectLoaders {
  std::mutex mutex;
  std::vector<DialectLoader> loaders;
};
DialectLoaders& Loaders() {
  static DialectLoaders* l = new DialectLoaders;  // never destroyed: contexts may be made during exit
  return *l;
}
}  // namespace

void RegisterDialectLoader(DialectLoader loader) {
  DialectLoaders& l = Loaders();
  std::lock_guard lock(l.mutex);
  if (std::find(l.loaders.begin(), l.loaders.end(), loader) == l.loaders.end()) l.loaders.push_back(loader);
}

IrContext::IrContext() : impl_(std::make_unique<Impl>()) {
  RegisterBuiltinDialect(*this);
  RegisterControlFlowDialect(*this);
  RegisterOpDialect(*this);
  RegisterKernelDialect(*this);
  std::vector<DialectLoader> loaders;
  {
    DialectLoaders& l = Loaders();
    std::lock_guard lock(l.mutex);
    loaders = l.loaders;
  }
  for (DialectLoader load : loaders) load(*this);
}

IrContext::~IrContext() = default;

Type IrContext::TensorType(DType dtype, const Dims& dims) {
  OAR_CHECK_ARG(DTypeSize(dtype) != 0, "tensor type: invalid dtype {}", static_cast<int>(dtype));
  for (int64_t d : dims) {
    OAR_CHECK_ARG(!SymDim::IsSymbol(d) || SymDim::SymbolId(d) < static_cast<int64_t>(impl_->symbols.size()),
                  "tensor type: extent {} is not a symbol of this context", d);
  }
  std::string key;
  Put<uint8_t>(key, static_cast<uint8_t>(TypeKind::kTensor));
  Put(key, dtype);
  PutDims(key, dims);
  auto it = impl_->type_index.find(key);
  if (it != impl_->type_index.end()) return Type(it->second);
  detail::TypeStorage& s = impl_->types.emplace_back();
  s.ctx = this;
  s.kind = TypeKind::kTensor;
  s.dtype = dtype;
  s.dims = dims;
  impl_->type_index.emplace(std::move(key), &s);
  return Type(&s);
}

Type IrContext::ScalarType(DType dtype) {
  OAR_CHECK_ARG(DTypeSize(dtype) != 0, "scalar type: invalid dtype {}", static_cast<int>(dtype));
  std::string key;
  Put<uint8_t>(key, static_cast<uint8_t>(TypeKind::kScalar));
  Put(key, dtype);
  auto it = impl_->type_index.find(key);
  if (it != impl_->type_index.end()) return Type(it->second);
  detail::TypeStorage& s = impl_->types.emplace_back();
  s.ctx = this;
  s.kind = TypeKind::kScalar;
  s.dtype = dtype;
  impl_->type_index.emplace(std::move(key), &s);
  return Type(&s);
}

Type IrContext::VectorType(std::span<const Type> elements) {
  std::string key;
  Put<uint8_t>(key, static_cast<uint8_t>(TypeKind::kVector));
  for (Type t : elements) Put(key, t.storage());
  auto it = impl_->type_index.find(key);
  if (it != impl_->type_index.end()) return Type(it->second);
  detail::TypeStorage& s = impl_->types.emplace_back();
  s.ctx = this;
  s.kind = TypeKind::kVector;
  s.elements.assign(elements.begin(), elements.end());
  impl_->type_index.emplace(std::move(key), &s);
  return Type(&s);
}

namespace {
// The uniqued attribute of `kind` whose encoded fields are `key` (built from AttrKey(kind)); `fill` sets the
// fields of a new one.
template <typename Fill>
Attribute Unique(IrContext::Impl& impl, IrContext* ctx, AttrKind kind, std::string key, Fill fill) {
  auto it = impl.attr_index.find(key);
  if (it != impl.attr_index.end()) return Attribute(it->second);
  detail::AttrStorage& s = impl.attrs.emplace_back();
  s.ctx = ctx;
  s.kind = kind;
  fill(s);
  impl.attr_index.emplace(std::move(key), &s);
  return Attribute(&s);
}
std::string AttrKey(AttrKind kind) { return std::string(1, static_cast<char>(kind)); }
}  // namespace

Attribute IrContext::BoolAttr(bool v) {
  std::string key = AttrKey(AttrKind::kBool);
  Put(key, v);
  return Unique(*impl_, this, AttrKind::kBool, std::move(key), [&](detail::AttrStorage& s) {
    s.b = v;
  });
}
Attribute IrContext::IntAttr(int64_t v) {
  std::string key = AttrKey(AttrKind::kInt);
  Put(key, v);
  return Unique(*impl_, this, AttrKind::kInt, std::move(key), [&](detail::AttrStorage& s) {
    s.i = v;
  });
}
Attribute IrContext::FloatAttr(double v) {
  std::string key = AttrKey(AttrKind::kFloat);
  Put(key, std::bit_cast<uint64_t>(v));  // -0.0 and each NaN payload stay distinct
  return Unique(*impl_, this, AttrKind::kFloat, std::move(key), [&](detail::AttrStorage& s) {
    s.f = v;
  });
}
Attribute IrContext::StringAttr(std::string_view v) {
  std::string key = AttrKey(AttrKind::kString);
  key += v;
  return Unique(*impl_, this, AttrKind::kString, std::move(key), [&](detail::AttrStorage& s) {
    s.s = v;
  });
}
Attribute IrContext::ArrayAttr(std::span<const Attribute> elements) {
  std::string key = AttrKey(AttrKind::kArray);
  for (Attribute a : elements) Put(key, a.storage());
  return Unique(*impl_, this, AttrKind::kArray, std::move(key), [&](detail::AttrStorage& s) {
    s.elements.assign(elements.begin(), elements.end());
  });
}
Attribute IrContext::IntArrayAttr(std::span<const int64_t> values) {
  std::vector<Attribute> elements;
  elements.reserve(values.size());
  for (int64_t v : values) elements.push_back(IntAttr(v));
  return ArrayAttr(elements);
}
Attribute IrContext::DTypeAttr(DType t) {
  OAR_CHECK_ARG(DTypeSize(t) != 0, "dtype attribute: invalid dtype {}", static_cast<int>(t));
  std::string key = AttrKey(AttrKind::kDType);
  Put(key, t);
  return Unique(*impl_, this, AttrKind::kDType, std::move(key), [&](detail::AttrStorage& s) {
    s.dtype = t;
  });
}
Attribute IrContext::DeviceAttr(std::string_view name) {
  std::string key = AttrKey(AttrKind::kDevice);
  key += name;
  return Unique(*impl_, this, AttrKind::kDevice, std::move(key), [&](detail::AttrStorage& s) {
    s.s = name;
  });
}
Attribute IrContext::ShapeAttr(const Dims& dims) {
  std::string key = AttrKey(AttrKind::kShape);
  PutDims(key, dims);
  return Unique(*impl_, this, AttrKind::kShape, std::move(key), [&](detail::AttrStorage& s) {
    s.dims = dims;
  });
}
Attribute IrContext::TypeAttr(Type t) {
  std::string key = AttrKey(AttrKind::kType);
  Put(key, t.storage());
  return Unique(*impl_, this, AttrKind::kType, std::move(key), [&](detail::AttrStorage& s) {
    s.type = t;
  });
}

int64_t IrContext::Symbol(std::string_view name) {
  const bool ident = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                     });
  OAR_CHECK_ARG(ident, "symbolic extent '{}' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", name.substr(0, 64));
  auto it = impl_->symbol_index.find(std::string(name));
  if (it != impl_->symbol_index.end()) return it->second;
  const int64_t d = SymDim::FromSymbolId(static_cast<int64_t>(impl_->symbols.size()));
  impl_->symbols.emplace_back(name);
  impl_->exprs.emplace_back();
  impl_->symbol_index.emplace(std::string(name), d);
  return d;
}

const DimExprNode* IrContext::SymbolExpr(int64_t d) const {
  const int64_t id = SymDim::SymbolId(d);
  if (!SymDim::IsSymbol(d) || id >= static_cast<int64_t>(impl_->exprs.size())) return nullptr;
  return impl_->exprs[id].get();
}

int64_t IrContext::InternDimExpr(std::string key, DimExprNode node, std::string text) {
  auto it = impl_->expr_index.find(key);
  if (it != impl_->expr_index.end()) return it->second;
  const int64_t d = SymDim::FromSymbolId(static_cast<int64_t>(impl_->symbols.size()));
  impl_->symbols.push_back(std::move(text));
  impl_->exprs.push_back(std::make_unique<const DimExprNode>(std::move(node)));
  impl_->expr_index.emplace(std::move(key), d);
  return d;
}

const std::string& IrContext::SymbolName(int64_t d) const {
  const int64_t id = SymDim::SymbolId(d);
  OAR_CHECK(SymDim::IsSymbol(d) && id < static_cast<int64_t>(impl_->symbols.size()), kInternal,
            "extent {} is not a symbol of this context", d);
  return impl_->symbols[id];
}

int64_t IrContext::NewSymbol() {
  for (;;) {
    const std::string name = fmt::format("s{}", impl_->next_fresh++);
    if (!impl_->symbol_index.contains(name)) return Symbol(name);
  }
}

Dialect& IrContext::AddDialect(std::unique_ptr<Dialect> dialect) {
  OAR_CHECK(FindDialect(dialect->name()) == nullptr, kAlreadyExists, "dialect '{}' is already registered",
            dialect->name());
  dialects_.push_back(std::move(dialect));
  return *dialects_.back();
}

Dialect* IrContext::FindDialect(std::string_view name) const {
  for (const auto& d : dialects_) {
    if (d->name() == name) return d.get();
  }
  return nullptr;
}

const OpInfo* IrContext::FindOp(std::string_view full_name) const {
  auto it = impl_->ops.find(full_name);
  return it == impl_->ops.end() ? nullptr : it->second;
}

const OpInfo& IrContext::GetOp(std::string_view full_name) const {
  if (const OpInfo* info = FindOp(full_name)) return *info;
  const size_t dot = full_name.find('.');
  const Dialect* d = dot == std::string_view::npos ? nullptr : FindDialect(full_name.substr(0, dot));
  if (d == nullptr) {
    std::string known;
    for (const auto& x : dialects_) known += (known.empty() ? "" : ", ") + x->name();
    Throw(ErrorCode::kNotFound, "unknown op '{}': no dialect '{}' (registered dialects: {})",
          full_name.substr(0, 128), full_name.substr(0, std::min<size_t>(dot, 64)), known);
  }
  std::string known;
  for (const auto& op : d->ops()) known += (known.empty() ? "" : ", ") + op->name;
  Throw(ErrorCode::kNotFound, "unknown op '{}'; dialect '{}' has: {}", full_name.substr(0, 128), d->name(), known);
}

std::string_view IrContext::Intern(std::string_view s) { return *impl_->strings.emplace(s).first; }

void IrContext::IndexOp(const OpInfo* info) {
  OAR_CHECK(impl_->ops.emplace(info->name, info).second, kAlreadyExists, "op '{}' is registered twice", info->name);
}

}  // namespace oar::ir
