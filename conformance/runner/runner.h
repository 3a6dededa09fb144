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
  double timeout_seconds = 120;         // --timeout SECONDS per case
  std::filesystem::path report_dir = "conformance-report";  // --report-dir DIR
  std::filesystem::path junit;          // --junit FILE (default: <report-dir>/junit.xml)
  // Internal: worker mode.
  bool worker = false;
  int result_fd = -1;
  std::vector<std::string> cases;
};

/// Add the runner's options to `app` (shared by `oar conformance` and `oar-conformance`).
void AddOptions(CLI::App& app, Options& options);

/// Run as configured; returns the process exit code (0 only when the requested level passes).
/// `self` is the command prefix that re-invokes this runner (e.g. {"/path/oar", "conformance"}).
int Run(const Options& options, const std::vector<std::string>& self);

}  // namespace oar::conformance

#endif  // OAR_CONFORMANCE_RUNNER_RUNNER_H_
