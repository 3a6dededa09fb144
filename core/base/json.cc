#include "core/base/json.h"

#include <fmt/format.h>

namespace oar {
namespace {

struct TooDeep {};

constexpr int kBriefDepth = 3;

void Brief(const nlohmann::json& j, std::string* out, size_t limit, int depth) {
  if (out->size() >= limit) return;
  const bool array = j.is_array();
  if (array || j.is_object()) {
    if (j.empty()) {
      *out += array ? "[]" : "{}";
      return;
    }
    if (depth >= kBriefDepth) {
      *out += array ? "[...]" : "{...}";
      return;
    }
    *out += array ? '[' : '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (out->size() >= limit) {
        *out += ", ...";
        break;
      }
      if (!first) *out += ", ";
      first = false;
      if (!array) *out += nlohmann::json(BriefText(it.key(), limit)).dump(-1, ' ', false,
                                                                           nlohmann::json::error_handler_t::replace) +
                          ": ";
      Brief(it.value(), out, limit, depth + 1);
    }
    *out += array ? ']' : '}';
    return;
  }
  if (j.is_string()) {
    *out += nlohmann::json(BriefText(j.get_ref<const std::string&>(), limit))
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  *out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // a scalar: short
}

}  // namespace

std::optional<nlohmann::json> ParseJson(std::string_view text, std::string* problem, int max_depth) {
  // The callback sees how many containers enclose each one that opens; throwing stops the parse (the
  // partial value is freed iteratively).
  const nlohmann::json::parser_callback_t limit_depth = [max_depth](int depth, nlohmann::json::parse_event_t event,
                                                                    nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start ||
         event == nlohmann::json::parse_event_t::array_start) &&
        depth >= max_depth) {
      throw TooDeep{};
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), limit_depth);
  } catch (const TooDeep&) {
    *problem = fmt::format("arrays/objects nest deeper than {} levels", max_depth);
  } catch (const nlohmann::json::exception& e) {
    *problem = BriefText(e.what(), 200);  // its "last read: ..." may quote a huge token
  }
  return std::nullopt;
}

std::string BriefJson(const nlohmann::json& j, size_t limit) {
  std::string out;
  Brief(j, &out, limit, 0);
  return out;
}


std::string EscapeInvalidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  auto cont = [&](size_t i) { return i < n && (p[i] & 0xC0) == 0x80; };
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    size_t len = 0;  // length of a well-formed sequence starting at i, 0 if none (RFC 3629 table)
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = cont(i + 1) ? 2 : 0;
    } else if (c >= 0xE0 && c <= 0xEF) {
      const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      len = i + 1 < n && p[i + 1] >= lo && p[i + 1] <= hi && cont(i + 2) ? 3 : 0;
    } else if (c >= 0xF0 && c <= 0xF4) {
      const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      len = i + 1 < n && p[i + 1] >= lo && p[i + 1] <= hi && cont(i + 2) && cont(i + 3) ? 4 : 0;
    }
    if (len == 0) {
      out += fmt::format("\\x{:02X}", c);
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

void EscapeInvalidUtf8(nlohmann::json* j) {
  if (j->is_string()) {
    *j = EscapeInvalidUtf8(j->get_ref<const std::string&>());
  } else if (j->is_array()) {
    for (nlohmann::json& e : *j) EscapeInvalidUtf8(&e);
  } else if (j->is_object()) {
    nlohmann::json fixed = nlohmann::json::object();
    for (auto it = j->begin(); it != j->end(); ++it) {
      nlohmann::json value = std::move(it.value());
      EscapeInvalidUtf8(&value);
      fixed[EscapeInvalidUtf8(it.key())] = std::move(value);
    }
    *j = std::move(fixed);
  }
}

}  // namespace oar
