#include "conformance/runner/report.h"

#include <fstream>


#include "core/base/digest.h"
#include "core/base/error.h"
#include "oar/plugin/cpp/dtype.hpp"

namespace oar::conformance {
namespace {

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters even when escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') out += '?';
        else out += c;
    }
  }
  return out;
}

Status StatusFromName(const std::string& name) {
  for (Status s : {Status::kPassed, Status::kFailed, Status::kSkipped, Status::kNotSelected, Status::kCrashed,
                   Status::kTimeout}) {
    if (StatusName(s) == name) return s;
  }
  return Status::kFailed;
}

}  // namespace

nlohmann::json Record::ToJson() const {
  nlohmann::json j = {{"id", id},
                      {"level", fmt::format("L{}", level)},
                      {"family", family},
                      {"status", StatusName(result.status)},
                      {"seed", seed},
                      {"message", result.message},
                      {"seconds", result.seconds}};
  if (!result.dtype.empty()) j["dtype"] = result.dtype;
  if (!result.shape.empty()) j["shape"] = result.shape;
  if (result.numeric) {
    j["tolerance"] = {{"atol", result.atol}, {"rtol", result.tolerance}};
  } else if (result.tolerance != 0) {
    j["tolerance"] = result.tolerance;
  }
  if (!result.fallbacks.empty()) j["cpu_fallbacks"] = result.fallbacks;
  if (result.numeric || result.max_abs_error != 0 || result.tolerance != 0) {
    j["max_abs_error"] = result.max_abs_error;
    j["max_rel_error"] = result.max_rel_error;
  }
  return j;
}

Record Record::FromJson(const nlohmann::json& j) {
  Record r;
  r.id = j.at("id").get<std::string>();
  r.level = std::stoi(j.at("level").get<std::string>().substr(1));
  r.family = j.value("family", "");
  r.seed = j.value("seed", uint64_t{0});
  r.result.status = StatusFromName(j.at("status").get<std::string>());
  r.result.message = j.value("message", "");
  r.result.dtype = j.value("dtype", "");
  r.result.shape = j.value("shape", "");
  if (j.contains("tolerance") && j["tolerance"].is_object()) {
    r.result.numeric = true;
    r.result.atol = j["tolerance"].value("atol", 0.0);
    r.result.tolerance = j["tolerance"].value("rtol", 0.0);
  } else {
    r.result.tolerance = j.value("tolerance", 0.0);
  }
  r.result.max_abs_error = j.value("max_abs_error", 0.0);
  r.result.max_rel_error = j.value("max_rel_error", 0.0);
  r.result.seconds = j.value("seconds", 0.0);
  if (j.contains("cpu_fallbacks") && j["cpu_fallbacks"].is_object()) {
    r.result.fallbacks = j["cpu_fallbacks"].get<std::map<std::string, uint64_t>>();
  }
  return r;
}

ReportWriter::ReportWriter(const std::filesystem::path& dir) : dir_(dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  OAR_CHECK(!ec, kPermissionDenied, "conformance: cannot create report folder {}: {}", dir.string(), ec.message());
  results_ = std::fopen((dir / "results.jsonl").c_str(), "w");
  OAR_CHECK(results_ != nullptr, kPermissionDenied, "conformance: cannot write {}", (dir / "results.jsonl").string());
}

ReportWriter::~ReportWriter() {
  if (results_ != nullptr) std::fclose(results_);
}

void ReportWriter::Add(const Record& record) {
  records_.push_back(record);
  const std::string line = record.ToJson().dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), results_);
  std::fflush(results_);
}

void ReportWriter::WriteSummary(const nlohmann::json& summary) const {
  std::ofstream(dir_ / "summary.json") << summary.dump(2) << "\n";
}

void ReportWriter::WriteJUnit(const std::filesystem::path& path, const std::string& suite_name,
                              const std::vector<std::pair<std::string, std::string>>& properties) const {
  int failures = 0, skipped = 0, tests = 0;
  double seconds = 0;
  for (const Record& r : records_) {
    ++tests;
    failures += IsFailure(r.result.status) ? 1 : 0;
    skipped += (r.result.status == Status::kSkipped || r.result.status == Status::kNotSelected) ? 1 : 0;
    seconds += r.result.seconds;
  }
  std::ofstream out(path);
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out << fmt::format("<testsuites tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3f}\">\n", tests, failures,
                     skipped, seconds);
  out << fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3f}\">\n",
                     XmlEscape(suite_name), tests, failures, skipped, seconds);
  if (!properties.empty()) {
    out << "    <properties>\n";
    for (const auto& [name, value] : properties) {
      out << fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", XmlEscape(name), XmlEscape(value));
    }
    out << "    </properties>\n";
  }
  for (const Record& r : records_) {
    const size_t dot = r.id.rfind('.');
    out << fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">", XmlEscape(r.id.substr(0, dot)),
                       XmlEscape(r.id.substr(dot + 1)), r.result.seconds);
    switch (r.result.status) {
      case Status::kFailed:
      case Status::kCrashed:
      case Status::kTimeout:
        out << fmt::format("<failure type=\"{}\" message=\"{}\"/>", StatusName(r.result.status), XmlEscape(r.result.message));
        break;
      case Status::kSkipped:
      case Status::kNotSelected:
        out << fmt::format("<skipped message=\"{}: {}\"/>", StatusName(r.result.status), XmlEscape(r.result.message));
        break;
      case Status::kPassed: break;
    }
    out << "</testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
}

void ReportWriter::WriteSupport(const std::map<std::string, std::map<std::string, std::string>>& matrix) const {
  std::vector<std::string> dtypes;
  for (int t = 1; t < OAR_DTYPE_COUNT_; ++t) dtypes.emplace_back(sdk::DTypeName(t));
  std::ofstream csv(dir_ / "support.csv");
  std::ofstream md(dir_ / "support.md");
  csv << "op";
  md << "| op |";
  for (const auto& d : dtypes) {
    csv << "," << d;
    md << " " << d << " |";
  }
  csv << "\n";
  md << "\n|---|";
  for (size_t i = 0; i < dtypes.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& [op, row] : matrix) {
    csv << op;
    md << "| " << op << " |";
    for (const auto& d : dtypes) {
      auto it = row.find(d);
      const std::string cell = it == row.end() ? "" : it->second;
      csv << "," << (cell.find(',') == std::string::npos ? cell : "\"" + cell + "\"");  // RFC 4180 quoting
      md << " " << cell << " |";
    }
    csv << "\n";
    md << "\n";
  }
}

std::string Sha256File(const std::filesystem::path& path) { return Sha256FileHex(path); }

}  // namespace oar::conformance
