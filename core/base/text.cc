#include "core/base/text.h"

#include <fmt/format.h>

namespace oar {

std::string BriefText(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not mid-character
  return fmt::format("{}... ({} bytes)", text.substr(0, cut), text.size());
}

}  // namespace oar
