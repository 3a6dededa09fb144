#include "conformance/runner/determinism.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/base/error.h"

namespace oar::conformance {
namespace {

std::string Strip(std::string_view s) {
  std::string out;
  for (char ch : s) {
    if (!std::isspace(static_cast<unsigned char>(ch))) out += ch;
  }
  return out;
}

std::string KeyText(std::span<const DType> key) {
  std::string s;
  for (DType d : key) s += (s.empty() ? "" : ",") + std::string(DTypeName(d));
  return s;
}

}  // namespace

bool KernelPattern::Matches(std::string_view op_name, std::span<const DType> dtypes) const {
  if (op != op_name) return false;
  return !key || std::equal(key->begin(), key->end(), dtypes.begin(), dtypes.end());
}

std::vector<KernelPattern> ParseKernelList(std::string_view text, std::string_view attribute) {
  std::vector<KernelPattern> list;
  const std::string all = Strip(text);
  size_t start = 0;
  while (start <= all.size()) {
    const size_t end = std::min(all.find(';', start), all.size());
    const std::string entry = all.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) continue;  // "a;;b" and a trailing ';' are harmless
    KernelPattern p;
    p.text = entry;
    const size_t open = entry.find('(');
    p.op = entry.substr(0, open);
    const bool op_ok = !p.op.empty() && std::islower(static_cast<unsigned char>(p.op[0])) &&
                       std::all_of(p.op.begin(), p.op.end(), [](char ch) {
                         return std::islower(static_cast<unsigned char>(ch)) || std::isdigit(static_cast<unsigned char>(ch)) ||
                                ch == '_';
                       });
    OAR_CHECK_ARG(op_ok, "device attribute '{}': entry '{}' does not start with an op name ([a-z][a-z0-9_]*)",
                  attribute, entry);
    if (open != std::string::npos) {
      OAR_CHECK_ARG(entry.back() == ')' && entry.find('(', open + 1) == std::string::npos,
                    "device attribute '{}': entry '{}' must be op or op(dtype,...)", attribute, entry);
      std::vector<DType> key;
      const std::string inner = entry.substr(open + 1, entry.size() - open - 2);
      size_t s = 0;
      while (s <= inner.size() && !inner.empty()) {
        const size_t e = std::min(inner.find(',', s), inner.size());
        const std::string name = inner.substr(s, e - s);
        s = e + 1;
        try {
          key.push_back(ParseDType(name));
        } catch (const Error&) {
          OAR_CHECK_ARG(false, "device attribute '{}': entry '{}' names an unknown dtype '{}'", attribute, entry, name);
        }
      }
      OAR_CHECK_ARG(!key.empty(), "device attribute '{}': entry '{}' has an empty dtype key", attribute, entry);
      p.key = std::move(key);
    }
    list.push_back(std::move(p));
  }
  return list;
}

DeterminismDeclarations DeterminismDeclarations::Read(const runtime::DeviceContext& ctx) {
  DeterminismDeclarations d;
  const runtime::AttrValue* det = ctx.FindAttribute(kDeterministicAttribute);
  d.device_wide = det != nullptr && det->type == OAR_ATTR_BOOL && det->b;
  for (auto [name, list] : {std::pair{kDeterministicKernelsAttribute, &d.deterministic},
                            std::pair{kNondeterministicKernelsAttribute, &d.nondeterministic}}) {
    const runtime::AttrValue* a = ctx.FindAttribute(name);
    if (a == nullptr) continue;
    OAR_CHECK_ARG(a->type == OAR_ATTR_STRING, "device attribute '{}' must be a STRING (a kernel list), got type {}",
                  name, a->type);
    *list = ParseKernelList(a->s, name);
  }
  return d;
}

bool DeterminismDeclarations::Reproducible(std::string_view op, std::span<const DType> key, std::string* why) const {
  const std::string kernel = fmt::format("{}({})", op, KeyText(key));
  for (const KernelPattern& p : nondeterministic) {
    if (p.Matches(op, key)) {
      *why = fmt::format("'{}' lists {} (kernel {})", kNondeterministicKernelsAttribute, p.text, kernel);
      return false;
    }
  }
  for (const KernelPattern& p : deterministic) {
    if (p.Matches(op, key)) {
      *why = fmt::format("'{}' lists {} (kernel {})", kDeterministicKernelsAttribute, p.text, kernel);
      return true;
    }
  }
  *why = device_wide ? fmt::format("the device declares '{}' (kernel {})", kDeterministicAttribute, kernel)
                     : fmt::format("the device does not declare '{}' and no kernel list names {}",
                                   kDeterministicAttribute, kernel);
  return device_wide;
}

}  // namespace oar::conformance
