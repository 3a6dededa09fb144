// oar-conformance — the conformance runner as its own executable (same options as `oar conformance`).
#include <cstdio>
#include <filesystem>

#include "conformance/runner/runner.h"
#include "core/base/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Certify an Oar device plugin (levels L0-L3)", "oar-conformance"};
  oar::conformance::Options options;
  oar::conformance::AddOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  try {
    return oar::conformance::Run(options, {std::filesystem::read_symlink("/proc/self/exe").string()});
  } catch (const oar::Error& e) {
    std::fprintf(stderr, "oar-conformance: error: %s\n", e.ToString().c_str());
    return 2;
  }
}
