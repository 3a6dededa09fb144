#include "core/ir/dialect.h"

#include <algorithm>

#include "core/base/error.h"
#include "core/ir/context.h"

namespace oar::ir {

bool IsDiscardableAttr(std::string_view name) { return name.find('.') != std::string_view::npos; }

const AttrDef* OpInfo::FindAttr(std::string_view n) const {
  for (const AttrDef& a : attrs) {
    if (a.name == n) return &a;
  }
  return nullptr;
}

const OpInfo& Dialect::AddOp(OpInfo info) {
  info.name = name_ + "." + info.name;
  info.dialect = this;
  for (AttrDef& a : info.attrs) a.name = ctx_.Intern(a.name);
  ops_.push_back(std::make_unique<OpInfo>(std::move(info)));
  ctx_.IndexOp(ops_.back().get());
  return *ops_.back();
}

std::vector<NamedAttribute> CompleteAttributes(IrContext& /*ctx*/, const OpInfo& info, std::vector<NamedAttribute> attrs) {
  for (NamedAttribute& a : attrs) {
    if (IsDiscardableAttr(a.name)) continue;  // annotations of passes, not the op's own
    const AttrDef* def = info.FindAttr(a.name);
    if (def == nullptr) {
      std::string known;
      for (const AttrDef& d : info.attrs) known += (known.empty() ? "" : ", ") + std::string(d.name);
      Throw(ErrorCode::kInvalidArgument, "{}: unknown attribute '{}' (known: {})", info.name, a.name.substr(0, 64),
            known.empty() ? "none" : known);
    }
    a.name = def->name;
    OAR_CHECK_ARG(a.value.kind() == def->kind, "{}: attribute '{}' must be {}, got {}", info.name, a.name,
                  AttrKindName(def->kind), AttrKindName(a.value.kind()));
    if (def->kind == AttrKind::kArray && !def->any_elements) {
      for (Attribute e : a.value.AsArray()) {
        OAR_CHECK_ARG(e.kind() == def->element_kind, "{}: attribute '{}' must be an array of {}, got an element of kind {}",
                      info.name, a.name, AttrKindName(def->element_kind), AttrKindName(e.kind()));
      }
    }
  }
  for (size_t i = 0; i < attrs.size(); ++i) {
    for (size_t j = i + 1; j < attrs.size(); ++j) {
      OAR_CHECK_ARG(attrs[i].name != attrs[j].name, "{}: attribute '{}' is given twice", info.name, attrs[i].name);
    }
  }
  for (const AttrDef& d : info.attrs) {
    const bool present = std::any_of(attrs.begin(), attrs.end(), [&](const NamedAttribute& a) { return a.name == d.name; });
    if (present) continue;
    OAR_CHECK_ARG(static_cast<bool>(d.default_value), "{}: required attribute '{}' ({}) is missing", info.name, d.name,
                  AttrKindName(d.kind));
    attrs.push_back({d.name, d.default_value});
  }
  std::sort(attrs.begin(), attrs.end(), [](const NamedAttribute& a, const NamedAttribute& b) { return a.name < b.name; });
  return attrs;
}

}  // namespace oar::ir
