// oar — command-line entry point.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/base/logging.h"
#include "core/compiler/compiler.h"
#include "core/runtime/runtime.h"
#include "oar/plugin/version.h"
#include "tools/oar/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"oar — plugin-based deep-learning framework core", "oar"};
  app.set_version_flag("--version", fmt::format("oar {} (plugin ABI {}.{})", OAR_VERSION_STRING, OAR_PLUGIN_ABI_MAJOR,
                                                OAR_PLUGIN_ABI_MINOR));
  std::vector<std::string> plugins;
  app.add_option("--plugin", plugins,
                 "Load this plugin file first (repeatable); then OAR_PLUGIN_PATH and the "
                 "install folder are searched");
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Log plugin discovery (same as OAR_LOG_LEVEL=debug)");
  app.require_subcommand(1);
  oar::compiler::RegisterCinn();  // the cinn pass and dialect, for `oar ir` and `oar predict --cinn`
  oar::cli::AddDevicesCommand(app);
  int exit_code = 0;
  oar::cli::AddConformanceCommand(app, exit_code);
  oar::cli::AddIrCommands(app);
  oar::cli::AddPredictCommands(app);
#ifdef OAR_HAVE_EXAMPLES
  oar::cli::AddTrainCommands(app);
#endif

  app.parse_complete_callback([&] {
    if (verbose) oar::log::SetThreshold(oar::log::Level::kDebug);
    oar::runtime::Runtime::Options options;
    for (const std::string& p : plugins) options.plugin_files.emplace_back(p);
    oar::runtime::Runtime::Configure(options);
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    exit_code = app.exit(e);
  } catch (const oar::Error& e) {
    std::fprintf(stderr, "oar: error: %s\n", e.ToString().c_str());
    exit_code = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oar: internal error: %s\n", e.what());
    exit_code = 3;
  }
  oar::runtime::Runtime::DrainAtExit();
  return exit_code;
}
