#include <filesystem>

#include "conformance/runner/runner.h"
#include "tools/oar/commands.h"

namespace oar::cli {

void AddConformanceCommand(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("conformance", "Certify a device plugin: levels L0-L3, reports for CI");
  auto options = std::make_shared<conformance::Options>();
  conformance::AddOptions(*cmd, *options);
  cmd->callback([options, &exit_code] {
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    exit_code = conformance::Run(*options, {self, "conformance"});
  });
}

}  // namespace oar::cli
