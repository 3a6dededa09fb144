// The conformance runner: selects cases, runs them in worker processes (a crash or hang is attributed to
// the case that was running and the run continues), streams results.jsonl, and writes summary.json,
// junit.xml and the support matrix. Used by `oar conformance` and `oar-conformance`.
#ifndef OAR_CONFORMANCE_RUNNER_RUNNER_H_
#define OAR_CONFORMANCE_RUNNER_RUNNER_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "conformance/runner/report.h"

namespace oar::conformance {

struct Options {
  std::string device;                   // --device NAME
  std::string plugin;                   // --plugin PATH
  int device_index = 0;                 // --device-index I (with --plugin)
  int level = 2;                        // --level L0..L3 (cumulative)
  std::string filter;                   // --filter GLOB (case ids)
  bool list = false;                    // --list
  std::string replay;                   // --replay CASE_ID (in-process, verbose)
  int jobs = 1;                         // --jobs N worker processes
  uint64_t seed = 0;                    // --seed S
  double timeout_seconds = 120;         // --timeout SECONDS for the heaviest cases (others get a share)
  double budget_seconds = 0;            // --budget SECONDS for the whole run (0: none)
  std::filesystem::path report_dir = "conformance-report";  // --report-dir DIR
  std::filesystem::path junit;          // --junit FILE (default: <report-dir>/junit.xml)
  // Internal: worker mode.
  bool worker = false;
  int result_fd = -1;
  std::vector<std::string> cases;
};

/// The verdicts of a run (docs/conformance.md, "Verdicts"): per level PASS, PASS_FILTERED, PARTIAL (passed,
/// but below the level's documented minimum), FAIL, BLOCKED (a lower level failed: never PASS above it),
/// NOT_AVAILABLE, NO_CASES_RUN or FILTERED_OUT; overall PASS, PARTIAL or FAIL.
struct Verdicts {
  nlohmann::json levels;    // {"L0": "PASS", ...}
  nlohmann::json coverage;  // {"L1": {"kernel_keys_passed", "kernel_keys", "models_passed", "models", ...}}
  std::string overall;
  std::string blocked_by;   // the lowest failed level, "" when none
};
Verdicts DecideVerdicts(const std::vector<Record>& records, int max_level, bool filtered);

/// Add the runner's options to `app` (shared by `oar conformance` and `oar-conformance`).
void AddOptions(CLI::App& app, Options& options);

/// Run as configured; returns the process exit code (0 only when the requested level passes).
/// `self` is the command prefix that re-invokes this runner (e.g. {"/path/oar", "conformance"}).
int Run(const Options& options, const std::vector<std::string>& self);

}  // namespace oar::conformance

#endif  // OAR_CONFORMANCE_RUNNER_RUNNER_H_
