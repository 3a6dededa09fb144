// The safetensors reader (core/tensor/safetensors.cc) on arbitrary bytes: it either accepts a file whose
// tensors exactly tile the data section, or throws oar::Error(kDataLoss) with a bounded message.
#include <cstdint>
#include <vector>

#include "core/base/error.h"
#include "core/tensor/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* begin = reinterpret_cast<const std::byte*>(data);
  try {
    const oar::SafetensorsFile file = oar::SafetensorsFile::Parse(std::vector<std::byte>(begin, begin + size), "fuzz");
    uint64_t covered = 0;
    const std::byte* section = nullptr;
    for (const oar::SafetensorsRecord& r : file.records()) {
      const unsigned __int128 want = static_cast<unsigned __int128>(r.shape.Product()) * oar::DTypeSize(r.dtype);
      if (want != r.nbytes) oar::fuzz::Fail("a record's size disagrees with its dtype and shape");
      if (section == nullptr) section = r.data;
      if (r.data != section + covered) oar::fuzz::Fail("records do not tile the data section");
      covered += r.nbytes;
      if (r.nbytes > 0) {
        volatile std::byte first = r.data[0], last = r.data[r.nbytes - 1];  // inside the buffer (ASan)
        (void)first;
        (void)last;
      }
    }
    if (section != nullptr && section + covered != file.records().back().data + file.records().back().nbytes) {
      oar::fuzz::Fail("records end before the last one");
    }
  } catch (const oar::Error& e) {
    if (e.code() != oar::ErrorCode::kDataLoss) oar::fuzz::Fail("a rejection that is not DATA_LOSS");
    oar::fuzz::CheckMessage(e.what());
  }
  return 0;
}
