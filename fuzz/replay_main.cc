// The driver of the replay programs (NAME_replay): runs a fuzz target's LLVMFuzzerTestOneInput over every
// file named on the command line, or in a folder named there — the seed corpus and the committed crash
// reproducers — in the normal (gcc) build, so that each reproducer is a regression test. A failed property
// aborts, which CTest reports as a failure naming the file (printed before it runs).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p = argv[i];
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
      }
    } else {
      files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::fprintf(stderr, "replaying %s\n", f.c_str());
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs: OK\n", files.size());
  return files.empty() ? 1 : 0;
}
