// Subcommands of the `oar` tool. Each registers itself on the CLI11 app and runs when selected.
#ifndef OAR_TOOLS_OAR_COMMANDS_H_
#define OAR_TOOLS_OAR_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace oar::cli {

/// `oar devices [--json]`: every device, every plugin and every skipped plugin with its reason.
void AddDevicesCommand(CLI::App& app);

/// `oar conformance ...`: the conformance runner (see conformance/runner/runner.h); sets `exit_code`.
void AddConformanceCommand(CLI::App& app, int& exit_code);

/// `oar ir verify|print|opt`: the PIR tools (core/ir, core/passes).
void AddIrCommands(CLI::App& app);

/// `oar predict` (the Predictor) and, with the examples, `oar export` (capture a model into a saved program).
void AddPredictCommands(CLI::App& app);

/// `oar train|eval|generate`: the example models (examples/models.h); built with OAR_BUILD_EXAMPLES.
void AddTrainCommands(CLI::App& app);

}  // namespace oar::cli

#endif  // OAR_TOOLS_OAR_COMMANDS_H_
