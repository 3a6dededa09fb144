// Quoting input in messages: never unbounded.
#ifndef OAR_CORE_BASE_TEXT_H_
#define OAR_CORE_BASE_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace oar {

/// `text` (input from a file, the environment, the command line) cut to at most `limit` bytes on a UTF-8
/// boundary, with "... (N bytes)" appended when cut: messages never quote unbounded input.
std::string BriefText(std::string_view text, size_t limit = 80);

}  // namespace oar

#endif  // OAR_CORE_BASE_TEXT_H_
