// The TCP store's server side (core/distributed/store.h: StoreTable) fed arbitrary bytes from three clients
// in arbitrary chunks: it never crashes, answers only clients it has not hung up on, sends only whole,
// well-formed replies, leaves no complete request unhandled, and a set followed by a get round-trips.
// Input: a control byte (client = byte % 3, chunk length = byte / 4 + 1), then that many bytes, repeated.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/distributed/store.h"
#include "fuzz/fuzz_util.h"

namespace {

using oar::distributed::StoreTable;

uint32_t U32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// Every reply is 'k', 'c', or 'v', a 4-byte length and that many bytes.
void CheckReplies(std::string_view r) {
  size_t at = 0;
  while (at < r.size()) {
    if (r[at] == 'k' || r[at] == 'c') {
      ++at;
    } else if (r[at] == 'v' && r.size() - at >= 5 && r.size() - at - 5 >= U32(r, at + 1)) {
      at += 5 + U32(r, at + 1);
    } else {
      oar::fuzz::Fail("a malformed or partial reply");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int kClients = 3;
  StoreTable table;
  std::string in[kClients], out[kClients];
  bool open[kClients] = {true, true, true};
  const StoreTable::Send send = [&](int c, std::string_view bytes) {
    if (c < 0 || c >= kClients) oar::fuzz::Fail("a reply to a client that never connected");
    if (!open[c]) oar::fuzz::Fail("a reply to a client the server hung up on");
    out[c].append(bytes);
    return true;
  };
  for (size_t i = 0; i < size;) {
    const uint8_t control = data[i++];
    const int c = control % kClients;
    const size_t n = std::min<size_t>(control / 4 + 1, size - i);
    in[c].append(reinterpret_cast<const char*>(data + i), n);
    i += n;
    if (!open[c]) continue;
    if (!table.Consume(c, in[c], send)) {
      table.Drop(c);
      open[c] = false;
    } else if (in[c].size() >= 9 && in[c].size() >= 9 + static_cast<uint64_t>(U32(in[c], 1)) + U32(in[c], 5)) {
      oar::fuzz::Fail("a whole request left unhandled");
    }
  }
  for (const std::string& r : out) CheckReplies(r);

  // Round trip: a value made of the input, set by one client and read by another.
  const std::string value(reinterpret_cast<const char*>(data), std::min<size_t>(size, 256));
  StoreTable fresh;
  std::string replies[2];
  const StoreTable::Send keep = [&](int c, std::string_view bytes) { return replies[c].append(bytes), true; };
  std::string get = oar::distributed::StoreRequest('G', "key", {});
  std::string set = oar::distributed::StoreRequest('S', "key", value);
  if (!fresh.Consume(1, get, keep) || !fresh.Consume(0, set, keep) || !get.empty() || !set.empty()) {
    oar::fuzz::Fail("a well-formed request was refused or left over");
  }
  if (replies[0] != "k" || replies[1].size() != 5 + value.size() || replies[1].substr(5) != value) {
    oar::fuzz::Fail("a set followed by a get does not return the value to the waiting client");
  }
  return 0;
}
