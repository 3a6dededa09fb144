// config.json of an example checkpoint (examples/checkpoint_config.cc): accepted configs round-trip
// through the writer; everything else is oar::Error(kDataLoss) with a bounded message.
#include <cstdint>
#include <span>

#include "core/base/error.h"
#include "examples/checkpoint_config.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const oar::examples::CheckpointConfig c = oar::examples::ParseCheckpointConfig(bytes, "fuzz/config.json");
    const std::string text = oar::examples::CheckpointConfigText(c.kind, c.seed, c.model);
    const oar::examples::CheckpointConfig back = oar::examples::ParseCheckpointConfig(
        std::as_bytes(std::span(text.data(), text.size())), "round trip");
    if (back.kind != c.kind || back.seed != c.seed || back.model != c.model) oar::fuzz::Fail("no round trip");
  } catch (const oar::Error& e) {
    if (e.code() != oar::ErrorCode::kDataLoss) oar::fuzz::Fail("a rejection that is not DATA_LOSS");
    oar::fuzz::CheckMessage(e.what());
  }
  return 0;
}
