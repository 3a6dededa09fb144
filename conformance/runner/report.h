// Conformance reports: results.jsonl (streamed, one record per case, flushed as each case finishes, so it
// survives a crash of the runner), summary.json, junit.xml and the support matrix (CSV + Markdown).
#ifndef OAR_CONFORMANCE_RUNNER_REPORT_H_
#define OAR_CONFORMANCE_RUNNER_REPORT_H_

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "conformance/runner/case.h"

namespace oar::conformance {

/// One finished (or not selected) case as reported.
struct Record {
  std::string id;
  int level = 0;
  std::string family;
  uint64_t seed = 0;
  CaseResult result;
  nlohmann::json ToJson() const;
  static Record FromJson(const nlohmann::json& j);
};

class ReportWriter {
 public:
  /// Creates `dir` and opens results.jsonl for streaming.
  explicit ReportWriter(const std::filesystem::path& dir);
  ~ReportWriter();
  void Add(const Record& record);
  const std::vector<Record>& records() const { return records_; }

  /// The three end-of-run files. `summary` is written as given.
  void WriteSummary(const nlohmann::json& summary) const;
  /// `properties` (the verdicts and what each level covered) go in the suite's <properties>.
  void WriteJUnit(const std::filesystem::path& path, const std::string& suite_name,
                  const std::vector<std::pair<std::string, std::string>>& properties = {}) const;
  /// Declared support: op -> dtype -> "declared"; written as support.csv and support.md.
  void WriteSupport(const std::map<std::string, std::map<std::string, std::string>>& matrix) const;

 private:
  std::filesystem::path dir_;
  std::FILE* results_ = nullptr;
  std::vector<Record> records_;
};

/// SHA-256 of a file as lower-case hex ("" when unreadable).
std::string Sha256File(const std::filesystem::path& path);

}  // namespace oar::conformance

#endif  // OAR_CONFORMANCE_RUNNER_REPORT_H_
