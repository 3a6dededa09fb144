// Shared by the fuzz targets: what a rejection must look like.
#ifndef OAR_FUZZ_FUZZ_UTIL_H_
#define OAR_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace oar::fuzz {

/// A failed property: print it and abort, which libFuzzer (and the replay driver) report as a crash.
[[noreturn]] inline void Fail(std::string_view what) {
  std::fprintf(stderr, "fuzz property failed: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

/// Messages quote input briefly: one that grows with the input is a defect (and once was a crash).
inline void CheckMessage(std::string_view message, size_t limit = 4096) {
  if (message.empty()) Fail("an error with an empty message");
  if (message.size() > limit) Fail("an error message of " + std::to_string(message.size()) + " bytes");
}

}  // namespace oar::fuzz

#endif  // OAR_FUZZ_FUZZ_UTIL_H_
