#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "core/ir/dialect.h"
#include "core/ir/text.h"

namespace oar::ir {
namespace {

std::string Extent(const IrContext& ctx, int64_t d) {
  if (SymDim::IsStatic(d)) return std::to_string(d);
  if (SymDim::IsDynamic(d)) return "?";
  return ctx.SymbolName(d);
}

std::string Extents(const IrContext& ctx, const Dims& dims) {
  std::string s = "[";
  for (int i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + Extent(ctx, dims[i]);
  return s + "]";
}

std::string Float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  std::string s = fmt::format("{}", v);  // shortest text that reads back as exactly v
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c >= 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

class Printer {
 public:
  explicit Printer(const IrContext& ctx) : ctx_(ctx) {}

  void Op(const Operation& op, int indent) {
    Indent(indent);
    const uint32_t n = op.num_results();
    for (uint32_t i = 0; i < n; ++i) out_ += (i ? ", " : "") + Define(op.result(i));
    if (n > 0) out_ += " = ";
    out_ += op.name();
    out_ += '(';
    for (uint32_t i = 0; i < op.num_operands(); ++i) out_ += (i ? ", " : "") + Use(op.operand(i));
    out_ += ')';
    if (op.num_regions() > 0) {
      out_ += " (";
      for (uint32_t r = 0; r < op.num_regions(); ++r) {
        if (r) out_ += ", ";
        RegionText(op.region(r), indent);
      }
      out_ += ')';
    }
    std::vector<const NamedAttribute*> shown;
    for (const NamedAttribute& a : op.attributes()) {
      const AttrDef* def = op.info().FindAttr(a.name);
      if (def == nullptr || def->default_value != a.value) shown.push_back(&a);
    }
    if (!shown.empty()) {
      out_ += " {";
      bool first = true;
      for (const NamedAttribute* pa : shown) {
        const NamedAttribute& a = *pa;
        out_ += first ? "" : ", ";
        first = false;
        out_ += a.name;
        out_ += " = ";
        out_ += PrintAttribute(ctx_, a.value);
      }
      out_ += '}';
    }
    out_ += " : (";
    for (uint32_t i = 0; i < op.num_operands(); ++i) out_ += (i ? ", " : "") + TypeText(op.operand(i));
    out_ += ") -> ";
    if (n == 1) {
      out_ += TypeText(op.result(0));
    } else {
      out_ += '(';
      for (uint32_t i = 0; i < n; ++i) out_ += (i ? ", " : "") + TypeText(op.result(i));
      out_ += ')';
    }
    out_ += '\n';
  }

  std::string Take() { return std::move(out_); }

 private:
  void RegionText(const Region& region, int indent) {
    out_ += "{\n";
    for (size_t b = 0; b < region.size(); ++b) {
      const Block& block = region.block(b);
      if (block.num_arguments() > 0 || region.size() > 1) {
        Indent(indent);
        out_ += "^bb";
        if (region.size() > 1) out_ += std::to_string(b);
        out_ += '(';
        for (size_t a = 0; a < block.num_arguments(); ++a) {
          out_ += (a ? ", " : "") + Define(block.argument(a)) + ": " + PrintType(ctx_, block.argument(a).type());
        }
        out_ += "):\n";
      }
      for (Operation* op : block) Op(*op, indent + 1);
    }
    Indent(indent);
    out_ += '}';
  }

  std::string Define(Value v) {
    const std::string name = "%" + std::to_string(next_++);
    names_[v.impl()] = name;
    return name;
  }
  std::string Use(Value v) {
    if (!v) return "%<null>";
    auto it = names_.find(v.impl());
    return it != names_.end() ? it->second : "%<undefined>";
  }
  std::string TypeText(Value v) { return v ? PrintType(ctx_, v.type()) : "<null>"; }
  void Indent(int n) { out_.append(static_cast<size_t>(2 * n), ' '); }

  const IrContext& ctx_;
  std::string out_;
  std::unordered_map<const void*, std::string> names_;
  int64_t next_ = 0;
};

}  // namespace

std::string PrintType(const IrContext& ctx, Type t) {
  if (!t) return "<null>";
  switch (t.kind()) {
    case TypeKind::kTensor: return fmt::format("tensor<{}, {}>", Extents(ctx, t.dims()), DTypeIrName(t.dtype()));
    case TypeKind::kScalar: return std::string(DTypeIrName(t.dtype()));
    case TypeKind::kVector: {
      std::string s = "vec<";
      bool first = true;
      for (Type e : t.elements()) {
        s += (first ? "" : ", ") + PrintType(ctx, e);
        first = false;
      }
      return s + ">";
    }
  }
  return "<?>";
}

std::string PrintAttribute(const IrContext& ctx, Attribute a) {
  switch (a.kind()) {
    case AttrKind::kBool: return a.AsBool() ? "true" : "false";
    case AttrKind::kInt: return std::to_string(a.AsInt());
    case AttrKind::kFloat: return Float(a.AsFloat());
    case AttrKind::kString: return Quote(a.AsString());
    case AttrKind::kArray: {
      std::string s = "[";
      bool first = true;
      for (Attribute e : a.AsArray()) {
        s += (first ? "" : ", ") + PrintAttribute(ctx, e);
        first = false;
      }
      return s + "]";
    }
    case AttrKind::kDType: return std::string(DTypeIrName(a.AsDType()));
    case AttrKind::kDevice: return "device<" + Quote(a.AsString()) + ">";
    case AttrKind::kShape: return "shape<" + Extents(ctx, a.AsShape()) + ">";
    case AttrKind::kType: return "type<" + PrintType(ctx, a.AsType()) + ">";
  }
  return "<?>";
}

std::string Print(const Operation& op) {
  Printer p(op.context());
  p.Op(op, 0);
  return p.Take();
}

std::string Print(const Program& program) { return Print(*program.module()); }

}  // namespace oar::ir
