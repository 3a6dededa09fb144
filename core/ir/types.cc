#include "core/ir/types.h"

#include <algorithm>

#include "core/base/error.h"
#include "core/ir/storage.h"

namespace oar::ir {

TypeKind Type::kind() const { return s_->kind; }
DType Type::dtype() const { return s_->dtype; }
const Dims& Type::dims() const {
  OAR_CHECK(s_->kind == TypeKind::kTensor, kInternal, "dims() of a non-tensor type");
  return s_->dims;
}
bool Type::HasStaticShape() const {
  return IsTensor() && std::all_of(s_->dims.begin(), s_->dims.end(), [](int64_t d) { return SymDim::IsStatic(d); });
}
std::span<const Type> Type::elements() const { return s_->elements; }
const IrContext& Type::context() const { return *s_->ctx; }

AttrKind Attribute::kind() const { return s_->kind; }

namespace {
void Expect(const detail::AttrStorage* s, AttrKind k) {
  OAR_CHECK(s->kind == k, kInternal, "attribute is {}, not {}", AttrKindName(s->kind), AttrKindName(k));
}
}  // namespace

bool Attribute::AsBool() const { Expect(s_, AttrKind::kBool); return s_->b; }
int64_t Attribute::AsInt() const { Expect(s_, AttrKind::kInt); return s_->i; }
double Attribute::AsFloat() const { Expect(s_, AttrKind::kFloat); return s_->f; }
const std::string& Attribute::AsString() const {
  OAR_CHECK(s_->kind == AttrKind::kString || s_->kind == AttrKind::kDevice, kInternal, "attribute is {}, not string",
            AttrKindName(s_->kind));
  return s_->s;
}
std::span<const Attribute> Attribute::AsArray() const { Expect(s_, AttrKind::kArray); return s_->elements; }
DType Attribute::AsDType() const { Expect(s_, AttrKind::kDType); return s_->dtype; }
const Dims& Attribute::AsShape() const { Expect(s_, AttrKind::kShape); return s_->dims; }
Type Attribute::AsType() const { Expect(s_, AttrKind::kType); return s_->type; }

std::vector<int64_t> Attribute::AsInts(std::string_view what) const {
  OAR_CHECK_ARG(s_->kind == AttrKind::kArray, "{}: expected an array of integers, got {}", what, AttrKindName(s_->kind));
  std::vector<int64_t> out;
  out.reserve(s_->elements.size());
  for (Attribute a : s_->elements) {
    OAR_CHECK_ARG(a.kind() == AttrKind::kInt, "{}: expected an array of integers, got an element of kind {}", what,
                  AttrKindName(a.kind()));
    out.push_back(a.AsInt());
  }
  return out;
}

std::string_view AttrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kBool: return "bool";
    case AttrKind::kInt: return "int";
    case AttrKind::kFloat: return "float";
    case AttrKind::kString: return "string";
    case AttrKind::kArray: return "array";
    case AttrKind::kDType: return "dtype";
    case AttrKind::kDevice: return "device";
    case AttrKind::kShape: return "shape";
    case AttrKind::kType: return "type";
  }
  return "?";
}

namespace {
struct DTypeName { DType t; std::string_view name; };
constexpr DTypeName kDTypeNames[] = {
    {DType::kFloat32, "f32"}, {DType::kFloat64, "f64"}, {DType::kFloat16, "f16"}, {DType::kBFloat16, "bf16"},
    {DType::kInt8, "i8"},     {DType::kUInt8, "u8"},    {DType::kInt32, "i32"},   {DType::kInt64, "i64"},
    {DType::kBool, "i1"},
};
}  // namespace

std::string_view DTypeIrName(DType t) {
  for (const auto& e : kDTypeNames) {
    if (e.t == t) return e.name;
  }
  return "invalid";
}

DType DTypeFromIrName(std::string_view name) {
  for (const auto& e : kDTypeNames) {
    if (e.name == name) return e.t;
  }
  return DType::kInvalid;
}

}  // namespace oar::ir
