// Test helper: run `oar conformance ARGS` into a fresh report dir and parse what it wrote.
#ifndef OAR_CONFORMANCE_RUNNER_RUN_RUNNER_TESTING_H_
#define OAR_CONFORMANCE_RUNNER_RUN_RUNNER_TESTING_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace oar::conformance {

namespace fs = std::filesystem;

struct RunOutput {
  int exit_code;
  nlohmann::json summary;
  std::map<std::string, nlohmann::json> results;  // by case id
  std::string junit;
  std::string support_csv;
  std::string log;  // stdout and stderr
};

inline RunOutput RunRunner(const std::string& args, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("oar_conformance_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  const std::string cmd = std::string(OAR_BIN_DIR) + "/oar conformance " + args + " --report-dir " + dir.string() +
                          " > " + (dir.string() + ".log") + " 2>&1";
  const int status = std::system(cmd.c_str());
  RunOutput out{WIFEXITED(status) ? WEXITSTATUS(status) : -1, {}, {}, {}, {}, {}};
  std::ifstream log(dir.string() + ".log");
  out.log.assign(std::istreambuf_iterator<char>(log), {});
  std::ifstream summary(dir / "summary.json");
  if (summary) out.summary = nlohmann::json::parse(summary);
  std::ifstream results(dir / "results.jsonl");
  for (std::string line; std::getline(results, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(out.results.count(j["id"].get<std::string>()), 0u) << "reported twice: " << j["id"];
    out.results[j["id"].get<std::string>()] = j;
  }
  std::ifstream junit(dir / "junit.xml");
  out.junit.assign(std::istreambuf_iterator<char>(junit), {});
  std::ifstream csv(dir / "support.csv");
  out.support_csv.assign(std::istreambuf_iterator<char>(csv), {});
  fs::remove_all(dir);
  return out;
}

}  // namespace oar::conformance

#endif  // OAR_CONFORMANCE_RUNNER_RUN_RUNNER_TESTING_H_
