// Bounded JSON helpers for files the user hands us (safetensors headers, checkpoint configs).
//
// nlohmann::json parses iteratively, but copying, comparing and dump() recurse: a 100,000-deep `[[[...`
// overflows the stack the first time such a value is copied or quoted in a message. These helpers refuse
// deep nesting at parse time and quote values in bounded form. Callers link nlohmann_json themselves.
#ifndef OAR_CORE_BASE_JSON_H_
#define OAR_CORE_BASE_JSON_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/base/text.h"

namespace oar {

/// Nesting limit of ParseJson: serde_json (which the safetensors reference implementation uses) stops at
/// 128; no file we read needs more than a handful.
inline constexpr int kMaxJsonDepth = 64;

/// Parse `text`. On failure returns nullopt and sets `*problem` to a short reason: the parser's message
/// (quoted input cut to a few dozen characters) or "arrays/objects nest deeper than N levels".
std::optional<nlohmann::json> ParseJson(std::string_view text, std::string* problem, int max_depth = kMaxJsonDepth);

/// `j` written as JSON for an error message, cut to about `limit` characters ("..." marks a cut; nesting
/// beyond a few levels prints as [...] or {...}). Never recurses more than a few levels, never throws.
std::string BriefJson(const nlohmann::json& j, size_t limit = 80);

/// `text` with every byte that is not part of well-formed UTF-8 written as the four characters \xNN
/// (uppercase hex), so that it can go into JSON: file paths and plugin strings are arbitrary bytes.
std::string EscapeInvalidUtf8(std::string_view text);

/// EscapeInvalidUtf8 applied to every string and object key in `j` (for JSON we build ourselves; it
/// recurses once per level of nesting).
void EscapeInvalidUtf8(nlohmann::json* j);

}  // namespace oar

#endif  // OAR_CORE_BASE_JSON_H_
