// The PIR text parser and verifier (core/ir): any input is either refused with a short
// INVALID_ARGUMENT naming file:line:col or the op, or it is a program whose printed form parses back and
// prints identically (the round-trip property golden tests rely on).
#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/error.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  oar::ir::IrContext ctx;
  std::string printed;
  try {
    auto program = oar::ir::ParseProgram(ctx, text, "fuzz.oir");
    oar::ir::Verify(*program);
    printed = oar::ir::Print(*program);
  } catch (const oar::Error& e) {
    if (e.code() != oar::ErrorCode::kInvalidArgument && e.code() != oar::ErrorCode::kOutOfRange) {
      oar::fuzz::Fail(std::string("an unexpected error code: ") + e.what());
    }
    oar::fuzz::CheckMessage(e.what(), 4096);
    return 0;
  }
  try {
    oar::ir::IrContext again;
    auto reparsed = oar::ir::ParseProgram(again, printed, "printed.oir");
    oar::ir::Verify(*reparsed);
    if (oar::ir::Print(*reparsed) != printed) oar::fuzz::Fail("print(parse(print(p))) != print(p)");
  } catch (const oar::Error& e) {
    oar::fuzz::Fail(std::string("a printed program does not parse back: ") + e.what());
  }
  return 0;
}
