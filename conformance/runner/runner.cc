#include "conformance/runner/runner.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>

#include "conformance/runner/case.h"
#include "core/runtime/dispatch.h"
#include "conformance/runner/report.h"
#include "core/base/logging.h"
#include "core/runtime/runtime.h"
#include "oar/plugin/cpp/dtype.hpp"

extern char** environ;

namespace oar::conformance {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxLevel = 3;
constexpr size_t kMaxBatch = 64;

uint64_t CaseSeed(uint64_t seed, const std::string& id) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the id, mixed with the run seed
  for (char c : id) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  uint64_t z = h ^ (seed * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  return z ^ (z >> 31);
}

const Case* FindCase(const std::string& id) {
  for (const Case& c : AllCases()) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

// ---- the device under test ----------------------------------------------------------------------

struct Target {
  Device device;
  runtime::DeviceContext* ctx = nullptr;
  std::string load_error;  // the plugin could not be loaded / the device does not exist
};

Target ResolveTarget(const Options& o) {
  runtime::Runtime::Options ro;
  if (!o.plugin.empty()) ro.plugin_files.push_back(o.plugin);
  runtime::Runtime::Configure(ro);
  runtime::Runtime& rt = runtime::Runtime::Get();
  rt.SetStrict(true);  // certification never falls back to cpu
  Target t;
  try {
    if (!o.plugin.empty()) {
      std::error_code ec;
      const auto wanted = std::filesystem::weakly_canonical(o.plugin, ec);
      const runtime::Runtime::Candidate* cand = nullptr;
      for (const auto& c : rt.candidates()) {
        if (c.path == wanted) cand = &c;
      }
      if (cand == nullptr || !cand->loaded) {
        t.load_error = fmt::format("plugin {} was not loaded: {}", o.plugin, cand ? cand->reason : "not found");
        return t;
      }
      for (const auto& type : rt.device_types()) {
        if (type->plugin().path() == wanted) t.device = Device(type->name(), o.device_index);
      }
    } else {
      t.device = Device(o.device.empty() ? rt.DefaultDevice().str() : o.device);
    }
    t.ctx = &rt.Context(t.device);
  } catch (const Error& e) {
    t.load_error = e.what();
  }
  return t;
}

CaseResult RunOne(const Case& c, Target& target, uint64_t seed) {
  CaseContext ctx{target.device, *target.ctx, seed};
  const auto start = Clock::now();
  CaseResult r;
  // The first kernel the case launches that the plugin does not claim: when the case then fails with
  // UNIMPLEMENTED (CPU fallback is off), it is SKIPPED naming that prerequisite (op cases decide this in
  // CheckOp, with the op under test excepted).
  std::string unclaimed;
  runtime::ScopedLaunchObserver observer([&](Device device, int op_id, std::span<const Tensor> inputs,
                                             std::span<const Tensor> outputs, bool done) {
    if (done || device != ctx.device || !unclaimed.empty() || !runtime::Runtime::Get().strict()) return;
    std::vector<DType> key;
    for (const Tensor& t : inputs) key.push_back(t.dtype());
    for (const Tensor& t : outputs) key.push_back(t.dtype());
    if (!Claims(ctx, runtime::OpName(op_id), key)) unclaimed = LaunchDescription(runtime::OpName(op_id), inputs, outputs);
  });
  try {
    r = c.run(ctx);
  } catch (const CheckFailure& f) {
    r.status = Status::kFailed;
    r.message = f.message;
  } catch (const SkipCase& s) {
    r.status = Status::kSkipped;
    r.message = s.reason;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kUnimplemented && !unclaimed.empty()) {
      r.status = Status::kSkipped;
      r.message = fmt::format("prerequisite not claimed: this case runs {}, which the plugin does not claim ({})",
                              unclaimed, e.what());
    } else {
      r.status = Status::kFailed;
      r.message = fmt::format("unexpected error: {}", e.ToString());
    }
  } catch (const std::exception& e) {
    r.status = Status::kFailed;
    r.message = fmt::format("unexpected exception: {}", e.what());
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

// ---- worker mode: run the given cases, one JSON line per event on result_fd ------------------------

void WriteLine(int fd, const std::string& line) {
  std::string s = line + "\n";
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

int RunWorker(const Options& o) {
  Target target = ResolveTarget(o);
  for (const std::string& id : o.cases) {
    const Case* c = FindCase(id);
    WriteLine(o.result_fd, nlohmann::json{{"event", "begin"}, {"id", id}}.dump());
    Record rec;
    rec.id = id;
    rec.seed = CaseSeed(o.seed, id);
    if (c == nullptr) {
      rec.result = {Status::kFailed, "unknown case id"};
    } else if (target.ctx == nullptr) {
      rec.level = c->level;
      rec.family = c->family;
      rec.result = {Status::kFailed, target.load_error};
    } else {
      rec.level = c->level;
      rec.family = c->family;
      rec.result = RunOne(*c, target, rec.seed);
    }
    WriteLine(o.result_fd, nlohmann::json{{"event", "end"}, {"record", rec.ToJson()}}.dump());
  }
  return 0;
}

// ---- parent: worker processes with crash and timeout attribution ---------------------------------

struct Worker {
  pid_t pid = -1;
  int fd = -1;
  std::deque<std::string> batch;  // cases not yet finished, in order
  std::string current;            // begun, not ended
  Clock::time_point started;
  std::string buffer;
  bool killed_for_timeout = false;
};

std::string SignalDescription(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  return "ended abnormally";
}

Worker Spawn(const std::vector<std::string>& self, const Options& o, std::deque<std::string> batch) {
  int fds[2];
  OAR_CHECK(::pipe(fds) == 0, kInternal, "conformance: pipe() failed: {}", std::strerror(errno));
  std::vector<std::string> args = self;
  auto add = [&](const std::string& a) { args.push_back(a); };
  add("--worker");
  add("--result-fd");
  add("3");
  if (!o.plugin.empty()) {
    add("--plugin");
    add(o.plugin);
    add("--device-index");
    add(std::to_string(o.device_index));
  } else if (!o.device.empty()) {
    add("--device");
    add(o.device);
  }
  add("--seed");
  add(std::to_string(o.seed));
  std::string list;
  for (const auto& id : batch) list += (list.empty() ? "" : ",") + id;
  if (!list.empty()) {  // a worker with no cases only loads the plugin (the probe)
    add("--cases");
    add(list);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  Worker w;
  const int rc = posix_spawn(&w.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  OAR_CHECK(rc == 0, kInternal, "conformance: cannot start worker {}: {}", args[0], std::strerror(rc));
  w.fd = fds[0];
  w.batch = std::move(batch);
  return w;
}

// Adds what the L1/L2 op cases observed to the declared matrix (op -> dtype -> cell): "declared" cells
// become "declared, N passed[, M refused]" (or "declared, FAILED F/N"), undeclared ones refused cleanly
// "refused", and undeclared ones that worked "WORKS, undeclared" (a warning: the declaration is
// incomplete).
void AddObservedSupport(const std::vector<Record>& records,
                        std::map<std::string, std::map<std::string, std::string>>& support) {
  struct Seen {
    int passed = 0, failed = 0, refused = 0, undeclared_works = 0;
  };
  std::map<std::string, std::map<std::string, Seen>> seen;
  for (const Record& r : records) {
    if (r.id.rfind("L1.op.", 0) != 0 && r.id.rfind("L2.op.", 0) != 0) continue;
    // Ids are L<n>.op.<op>.<dtype>.<variant>: the dtype is the fourth part (crash records have no dtype field).
    std::vector<std::string> parts;
    for (size_t b = 0, e; b <= r.id.size(); b = e + 1) {
      e = std::min(r.id.find('.', b), r.id.size());
      parts.push_back(r.id.substr(b, e - b));
    }
    if (parts.size() < 5) continue;
    Seen& s = seen[parts[2]][parts[3]];
    switch (r.result.status) {
      case Status::kPassed:
        ++s.passed;
        if (r.result.message.rfind("WARNING", 0) == 0) ++s.undeclared_works;
        break;
      case Status::kSkipped:
        ++s.refused;
        break;
      case Status::kNotSelected:
        break;
      default:
        ++s.failed;
    }
  }
  for (const auto& [op, row] : seen) {
    for (const auto& [dtype, s] : row) {
      if (dtype.empty() || s.passed + s.failed + s.refused == 0) continue;
      std::string& cell = support[op][dtype];
      if (cell.empty()) {
        cell = s.undeclared_works > 0 ? "WORKS, undeclared" : s.failed > 0 ? "undeclared, FAILED" : "refused";
      } else {
        cell = s.failed > 0 ? fmt::format("declared, FAILED {}/{}", s.failed, s.passed + s.failed + s.refused)
                            : fmt::format("declared, {} passed", s.passed);
        // Some keys of a declared (op, first dtype) may still be refused, e.g. a cast to a missing dtype.
        if (s.refused > 0) cell += fmt::format(", {} refused", s.refused);
      }
    }
  }
}

// The part of --timeout a case may take: model, training and distributed cases the whole of it;
// optimiser steps, finite differences (many forward passes) and the memory loop half; op and L0 cases
// (one small kernel each) a quarter, so that a hang in one of them costs seconds, not minutes.
double CaseTimeout(const std::string& id, double timeout) {
  const Case* c = FindCase(id);
  if (c == nullptr || c->family == "model" || c->level == 3) return timeout;
  if (id.rfind("L2.fdcheck.", 0) == 0 || id.rfind("L2.optim.", 0) == 0 || id.rfind("L1.memory.", 0) == 0) {
    return timeout / 2;
  }
  return timeout / 4;
}

// The command that replays one case exactly (same plugin or device, same run seed).
std::string ReplayCommand(const Options& o, const std::string& id) {
  const std::string target = !o.plugin.empty() ? fmt::format("--plugin {}{}", o.plugin,
                                                               o.device_index != 0 ? fmt::format(" --device-index {}", o.device_index) : "")
                                               : fmt::format("--device {}", o.device.empty() ? "cpu:0" : o.device);
  return fmt::format("oar conformance {} --replay {} --seed {}", target, id, o.seed);
}

// What a level tested, for its minimum: L1 PASSes only with the core kernels (kL1Core, float32) and at
// least one model forward pass passed; L2 only with at least one training curve passed.
constexpr const char* kL1Core[] = {"fill", "copy", "cast", "add", "mul", "matmul", "sum", "softmax"};

struct Coverage {
  bool applies = false;  // L1 and L2
  int keys = 0, keys_passed = 0, models = 0, models_passed = 0;
  std::vector<std::string> missing;  // what the minimum lacks
  std::string Text() const {
    std::string t = fmt::format("{} of {} kernel keys, {} of {} models", keys_passed, keys, models_passed, models);
    if (!missing.empty()) {
      t += "; missing for PASS:";
      for (const std::string& m : missing) t += " " + m + (&m == &missing.back() ? "" : ",");
    }
    return t;
  }
};

std::vector<Coverage> MeasureCoverage(const std::vector<Record>& records, int max_level) {
  std::vector<Coverage> out(max_level + 1);
  for (int l = 1; l <= std::min(max_level, 2); ++l) {
    Coverage& cov = out[l];
    cov.applies = true;
    const std::string op_prefix = fmt::format("L{}.op.", l);
    const std::string model_suffix = l == 1 ? ".forward" : ".training_curve";
    std::map<std::string, std::pair<int, int>> keys;  // "op.dtype" -> (passed, failed)
    for (const Case& c : AllCases()) {
      if (c.level == l && c.family == "model" && c.id.size() > model_suffix.size() &&
          c.id.compare(c.id.size() - model_suffix.size(), model_suffix.size(), model_suffix) == 0) {
        ++cov.models;
      }
    }
    for (const Record& r : records) {
      if (r.level != l || r.result.status == Status::kNotSelected) continue;
      if (r.id.rfind(op_prefix, 0) == 0) {
        const size_t a = op_prefix.size(), b = r.id.find('.', a), e = b == std::string::npos ? b : r.id.find('.', b + 1);
        if (e == std::string::npos) continue;
        auto& k = keys[r.id.substr(a, e - a)];
        k.first += r.result.status == Status::kPassed ? 1 : 0;
        k.second += IsFailure(r.result.status) ? 1 : 0;
      } else if (r.family == "model" && r.result.status == Status::kPassed && r.id.size() > model_suffix.size() &&
                 r.id.compare(r.id.size() - model_suffix.size(), model_suffix.size(), model_suffix) == 0) {
        ++cov.models_passed;
      }
    }
    cov.keys = static_cast<int>(keys.size());
    for (const auto& [key, pf] : keys) cov.keys_passed += pf.first > 0 && pf.second == 0 ? 1 : 0;
    if (l == 1) {
      for (const char* op : kL1Core) {
        auto it = keys.find(std::string(op) + ".float32");
        if (it == keys.end() || it->second.first == 0 || it->second.second > 0) cov.missing.push_back(std::string(op) + " float32");
      }
      if (cov.models_passed == 0) cov.missing.push_back("a model forward pass");
    } else if (cov.models_passed == 0) {
      cov.missing.push_back("a training curve");
    }
  }
  return out;
}

struct Totals {
  int passed = 0, failed = 0, skipped = 0, not_selected = 0;
};

}  // namespace

std::string_view StatusName(Status s) {
  switch (s) {
    case Status::kPassed:
      return "PASSED";
    case Status::kFailed:
      return "FAILED";
    case Status::kSkipped:
      return "SKIPPED";
    case Status::kNotSelected:
      return "NOT_SELECTED";
    case Status::kCrashed:
      return "CRASHED";
    case Status::kTimeout:
      return "TIMEOUT";
  }
  return "UNKNOWN";
}

[[noreturn]] void Fail(std::string message) { throw CheckFailure{std::move(message)}; }
void Expect(bool condition, const std::string& message) {
  if (!condition) Fail(message);
}

const std::vector<Case>& AllCases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> all;
    AddLevel0Cases(all);
    AddLevel1Cases(all);
    AddLevel2Cases(all);
    AddLevel3Cases(all);
    return all;
  }();
  return cases;
}

Verdicts DecideVerdicts(const std::vector<Record>& records, int max_level, bool filtered) {
  int level_cases[kMaxLevel + 1] = {}, level_failures[kMaxLevel + 1] = {}, level_passed[kMaxLevel + 1] = {};
  for (const Record& r : records) {
    if (r.result.status == Status::kNotSelected || r.level < 0 || r.level > kMaxLevel) continue;
    ++level_cases[r.level];
    level_failures[r.level] += IsFailure(r.result.status) ? 1 : 0;
    level_passed[r.level] += r.result.status == Status::kPassed ? 1 : 0;
  }
  Verdicts out;
  // Raw verdict of each level from its own cases.
  std::vector<std::string> raw(max_level + 1);
  for (int l = 0; l <= max_level; ++l) {
    bool has_cases = false;
    for (const Case& c : AllCases()) has_cases |= c.level == l;
    if (!has_cases)
      raw[l] = "NOT_AVAILABLE";  // this runner version has no cases at that level yet
    else if (level_failures[l] > 0)
      raw[l] = "FAIL";
    else if (level_cases[l] == 0 && filtered)
      raw[l] = "FILTERED_OUT";  // the filter selected none of it
    else if (level_passed[l] == 0)
      raw[l] = "NO_CASES_RUN";
    else
      raw[l] = filtered ? "PASS_FILTERED" : "PASS";
  }
  // How much each level tested: kernel keys (op, first dtype) of its op cases and its model cases.
  const std::vector<Coverage> coverage = MeasureCoverage(records, max_level);
  out.levels = nlohmann::json::object();
  out.coverage = nlohmann::json::object();
  bool partial_below = false;
  std::vector<std::string> final_verdicts;
  for (int l = 0; l <= max_level; ++l) {
    std::string v = raw[l];
    const Coverage& cov = coverage[l];
    // Minimums (a full run only; a filtered run is not a certification anyway): a level PASSes only
    // when what it is about was actually tested, else it is PARTIAL.
    if (v == "PASS" && !cov.missing.empty()) v = "PARTIAL";
    if (!out.blocked_by.empty() && v != "FILTERED_OUT") {
      v = "BLOCKED";  // never PASS above a failed level
    } else if (partial_below && v == "PASS") {
      v = "PARTIAL";  // a level is certified only on top of certified levels
    }
    if (out.blocked_by.empty() && (raw[l] == "FAIL" || raw[l] == "NOT_AVAILABLE" || raw[l] == "NO_CASES_RUN")) {
      out.blocked_by = fmt::format("L{}", l);
    }
    partial_below = partial_below || v == "PARTIAL";
    final_verdicts.push_back(v);
    out.levels[fmt::format("L{}", l)] = v;
    if (cov.applies) {
      out.coverage[fmt::format("L{}", l)] = {{"kernel_keys_passed", cov.keys_passed},
                                             {"kernel_keys", cov.keys},
                                             {"models_passed", cov.models_passed},
                                             {"models", cov.models},
                                             {"missing_for_pass", cov.missing},
                                             {"text", cov.Text()}};
    }
  }
  bool pass = true, any_passed = false, any_partial = false, any_failed = false;
  for (const std::string& v : final_verdicts) {
    const bool ok = v == "PASS" || v == "PASS_FILTERED" || v == "FILTERED_OUT";
    any_passed = any_passed || v == "PASS" || v == "PASS_FILTERED";
    any_partial = any_partial || v == "PARTIAL";
    any_failed = any_failed || !(ok || v == "PARTIAL");
    pass = pass && ok;
  }
  pass = pass && any_passed;  // a run in which nothing passed is never a pass
  out.overall = pass ? "PASS" : (!any_failed && any_partial) ? "PARTIAL" : "FAIL";
  return out;
}

void AddOptions(CLI::App& app, Options& o) {
  app.add_option("--device", o.device, "Device to certify, e.g. cuda:0 (default: OAR_DEVICE or cpu:0)");
  app.add_option("--plugin", o.plugin, "Plugin file to certify (loaded first)");
  app.add_option("--device-index", o.device_index, "Device ordinal within --plugin")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--level",
         [&o](const std::string& v) {
           if (v.size() != 2 || (v[0] != 'L' && v[0] != 'l') || v[1] < '0' || v[1] > '3') {
             throw CLI::ValidationError("--level", "expected L0, L1, L2 or L3, got '" + v + "'");
           }
           o.level = v[1] - '0';
         },
         "Certification level, cumulative (L0 loadable, L1 inference, L2 training, L3 distributed)")
      ->default_str("L2");
  app.add_option("--filter", o.filter,
                 "Run only case ids matching this glob (several: GLOB1:GLOB2); the rest are NOT_SELECTED "
                 "(default: every case)");
  app.add_flag("--list", o.list, "List the selected case ids and exit");
  app.add_option("--replay", o.replay,
                 "Run one case in this process and print everything: the kernels it launched with their "
                 "operands' shapes and strides, the first mismatching elements (use the --seed of the run)");
  app.add_option("--jobs", o.jobs, "Worker processes")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--seed", o.seed, "Run seed (each case derives its own from it and its id, recorded in the results)")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_seconds,
                 "Seconds before a model, training or distributed case is killed and reported as TIMEOUT; "
                 "optimiser, finite-difference and memory cases get half of it, op and L0 cases a quarter")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--budget", o.budget_seconds,
                 "Seconds for the whole run: when spent, the running cases are TIMEOUT and the rest FAILED as "
                 "not run (0: no budget)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--report-dir", o.report_dir, "Where results.jsonl, summary.json, junit.xml, support.* go")
      ->capture_default_str();
  app.add_option("--junit", o.junit, "JUnit XML path (default: <report-dir>/junit.xml)");
  app.add_flag("--worker", o.worker)->group("");
  app.add_option("--result-fd", o.result_fd)->group("");
  app.add_option("--cases", o.cases)->delimiter(',')->group("");
}

int Run(const Options& o, const std::vector<std::string>& self) {
  if (o.worker) return RunWorker(o);
  OAR_CHECK_ARG(o.device.empty() || o.plugin.empty(), "conformance: give --device or --plugin, not both");

  // Select.
  std::vector<const Case*> selected;
  std::vector<const Case*> not_selected;
  std::vector<std::string> globs;  // ':'-separated, as GoogleTest's --gtest_filter
  for (size_t start = 0; start <= o.filter.size() && !o.filter.empty();) {
    const size_t end = std::min(o.filter.find(':', start), o.filter.size());
    OAR_CHECK_ARG(end > start,
                  "conformance: --filter '{}' has an empty glob at character {} (expected "
                  "GLOB or GLOB1:GLOB2:...)",
                  o.filter, start);
    globs.push_back(o.filter.substr(start, end - start));
    start = end + 1;
  }
  for (const Case& c : AllCases()) {
    const bool in_level = c.level <= o.level;
    const bool matches = globs.empty() || std::any_of(globs.begin(), globs.end(), [&](const std::string& g) {
                           return fnmatch(g.c_str(), c.id.c_str(), 0) == 0;
                         });
    (in_level && matches ? selected : not_selected).push_back(&c);
  }
  if (o.list) {
    for (const Case* c : selected) std::printf("L%d %s\n", c->level, c->id.c_str());
    return 0;
  }

  // Load the plugin in a throw-away worker first: a plugin that crashes while loading must fail L0, not
  // take the runner (and its reports) down with it.
  std::string probe_error;
  if (!o.plugin.empty() && o.replay.empty()) {
    Worker probe = Spawn(self, o, {});
    char buf[256];
    while (::read(probe.fd, buf, sizeof buf) > 0) {
    }
    int status = 0;
    ::waitpid(probe.pid, &status, 0);
    ::close(probe.fd);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      probe_error = fmt::format("the plugin process {} while loading {}", SignalDescription(status), o.plugin);
    }
  }
  Target target;
  if (probe_error.empty()) {
    target = ResolveTarget(o);
  } else {
    target.load_error = probe_error;
  }
  if (!o.replay.empty()) {
    const Case* c = FindCase(o.replay);
    OAR_CHECK(c != nullptr, kNotFound, "conformance: no case '{}' (use --list)", o.replay);
    if (target.ctx == nullptr) Throw(ErrorCode::kNotFound, "conformance: {}", target.load_error);
    const uint64_t seed = CaseSeed(o.seed, c->id);
    const CaseResult r = RunOne(*c, target, seed);
    std::printf("%s %s (case seed %llu from run seed %llu, %.3fs)\n%s\n", std::string(StatusName(r.status)).c_str(),
                c->id.c_str(), static_cast<unsigned long long>(seed), static_cast<unsigned long long>(o.seed), r.seconds,
                r.message.c_str());
    if (!r.detail.empty()) std::printf("kernels launched on %s, with their operands:\n%s", target.device.str().c_str(),
                                       r.detail.c_str());
    for (const auto& [op, n] : r.fallbacks) std::printf("cpu fallback: %s x%llu\n", op.c_str(), static_cast<unsigned long long>(n));
    return r.status == Status::kPassed || r.status == Status::kSkipped ? 0 : 1;
  }

  ReportWriter report(o.report_dir);
  for (const Case* c : not_selected) {
    Record r{c->id, c->level, c->family, CaseSeed(o.seed, c->id), {}};
    r.result.status = Status::kNotSelected;
    r.result.message = c->level > o.level ? fmt::format("above the requested level L{}", o.level) : "filtered out";
    report.Add(r);
  }
  auto family_of = [](const std::string& id) {
    const Case* c = FindCase(id);
    return c ? c->family : "";
  };
  auto level_of = [](const std::string& id) {
    const Case* c = FindCase(id);
    return c ? c->level : 0;
  };

  // Run: split the selection into batches, keep `jobs` workers busy.
  std::deque<std::deque<std::string>> queue;
  const size_t per_worker = std::max<size_t>(1, std::min(kMaxBatch, (selected.size() + o.jobs - 1) / o.jobs));
  for (size_t i = 0; i < selected.size(); i += per_worker) {
    std::deque<std::string> batch;
    for (size_t j = i; j < std::min(selected.size(), i + per_worker); ++j) batch.push_back(selected[j]->id);
    queue.push_back(std::move(batch));
  }
  std::vector<Worker> workers;
  const auto run_start = Clock::now();
  int done = 0;
  auto finish = [&](Record r) {
    if (r.family.empty()) r.family = family_of(r.id);
    report.Add(r);
    ++done;
    if (IsFailure(r.result.status)) {
      std::fprintf(stderr, "%s %s: %s\n  replay: %s\n", std::string(StatusName(r.result.status)).c_str(),
                   r.id.c_str(), r.result.message.c_str(), ReplayCommand(o, r.id).c_str());
    }
  };
  if (!probe_error.empty()) {
    queue.clear();
    for (const Case* c : selected) {
      Record r{c->id, c->level, c->family, CaseSeed(o.seed, c->id), {}};
      r.result.status = Status::kFailed;
      r.result.message = probe_error;
      finish(std::move(r));
    }
  }
  while (!queue.empty() || !workers.empty()) {
    while (!queue.empty() && static_cast<int>(workers.size()) < o.jobs) {
      workers.push_back(Spawn(self, o, std::move(queue.front())));
      queue.pop_front();
    }
    std::vector<pollfd> fds;
    for (const Worker& w : workers) fds.push_back({w.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 200);
    for (size_t i = 0; i < workers.size(); ++i) {
      Worker& w = workers[i];
      bool eof = false;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        const ssize_t n = ::read(w.fd, buf, sizeof buf);
        if (n <= 0)
          eof = true;
        else
          w.buffer.append(buf, static_cast<size_t>(n));
      }
      for (size_t nl; (nl = w.buffer.find('\n')) != std::string::npos;) {
        const std::string line = w.buffer.substr(0, nl);
        w.buffer.erase(0, nl + 1);
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded()) continue;
        if (j.value("event", "") == "begin") {
          w.current = j.value("id", "");
          w.started = Clock::now();
        } else if (j.value("event", "") == "end") {
          Record r = Record::FromJson(j.at("record"));
          if (!w.batch.empty() && w.batch.front() == r.id) w.batch.pop_front();
          w.current.clear();
          finish(std::move(r));
        }
      }
      const bool over_budget = o.budget_seconds > 0 &&
                               std::chrono::duration<double>(Clock::now() - run_start).count() > o.budget_seconds;
      if (!w.current.empty() && !w.killed_for_timeout &&
          (over_budget ||
           std::chrono::duration<double>(Clock::now() - w.started).count() > CaseTimeout(w.current, o.timeout_seconds))) {
        ::kill(w.pid, SIGKILL);
        w.killed_for_timeout = true;
      }
      if (!eof) continue;
      int status = 0;
      ::waitpid(w.pid, &status, 0);
      ::close(w.fd);
      if (!w.current.empty()) {
        Record r{w.current, level_of(w.current), "", CaseSeed(o.seed, w.current), {}};
        r.result.seconds = std::chrono::duration<double>(Clock::now() - w.started).count();
        if (w.killed_for_timeout) {
          r.result.status = Status::kTimeout;
          r.result.message =
              o.budget_seconds > 0 && std::chrono::duration<double>(Clock::now() - run_start).count() > o.budget_seconds
                  ? fmt::format("still running when the --budget of {} s for the whole run was spent; the worker was killed",
                                o.budget_seconds)
                  : fmt::format("did not finish within {} s (its share of --timeout {}); the worker was killed",
                                CaseTimeout(w.current, o.timeout_seconds), o.timeout_seconds);
        } else {
          r.result.status = Status::kCrashed;
          r.result.message = fmt::format("the worker process {} while running this case", SignalDescription(status));
        }
        if (!w.batch.empty() && w.batch.front() == w.current) w.batch.pop_front();
        finish(std::move(r));
      } else if (!w.batch.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        // Died between cases (e.g. while loading the plugin): blame the next case so the run can go on.
        Record r{w.batch.front(), level_of(w.batch.front()), "", CaseSeed(o.seed, w.batch.front()), {}};
        r.result.status = Status::kCrashed;
        r.result.message = fmt::format("the worker process {} before this case began", SignalDescription(status));
        w.batch.pop_front();
        finish(std::move(r));
      }
      if (!w.batch.empty()) queue.push_front(std::move(w.batch));
      workers.erase(workers.begin() + static_cast<long>(i));
      if (o.budget_seconds > 0 &&
          std::chrono::duration<double>(Clock::now() - run_start).count() > o.budget_seconds) {
        for (auto& batch : queue) {  // the budget is spent: what is left is not run, and the run fails
          for (const std::string& id : batch) {
            Record r{id, level_of(id), "", CaseSeed(o.seed, id), {}};
            r.result.status = Status::kFailed;
            r.result.message = fmt::format("not run: the --budget of {} s for the whole run was spent", o.budget_seconds);
            finish(std::move(r));
          }
        }
        queue.clear();
      }
      break;  // indices shifted: poll again
    }
  }

  // Verdicts, counts, summary.
  Totals totals;
  std::map<std::string, std::map<std::string, int>> per_family;
  std::map<std::string, int> per_status;
  for (const Record& r : report.records()) {
    const Status s = r.result.status;
    per_status[std::string(StatusName(s))]++;
    per_family[r.family][std::string(StatusName(s))]++;
    if (s == Status::kNotSelected) {
      ++totals.not_selected;
      continue;
    }
    if (s == Status::kPassed)
      ++totals.passed;
    else if (s == Status::kSkipped)
      ++totals.skipped;
    else
      ++totals.failed;
  }
  const Verdicts decided = DecideVerdicts(report.records(), o.level, !o.filter.empty());
  const nlohmann::json& verdicts = decided.levels;
  const nlohmann::json& coverage_json = decided.coverage;
  const std::string& overall = decided.overall;
  const std::string& below = decided.blocked_by;
  const bool pass = overall == "PASS";
  nlohmann::json summary = {
      {"runner_version", OAR_VERSION_STRING},
      {"abi", fmt::format("{}.{}", OAR_PLUGIN_ABI_MAJOR, OAR_PLUGIN_ABI_MINOR)},
      {"requested_level", fmt::format("L{}", o.level)},
      {"verdict", overall},
      {"levels", verdicts},
      {"coverage", coverage_json},
      {"seed", o.seed},
      {"filter", o.filter},
      {"counts",
       {{"passed", totals.passed},
        {"failed", totals.failed},
        {"skipped", totals.skipped},
        {"not_selected", totals.not_selected}}},
      {"by_status", per_status},
      {"by_family", per_family},
      {"device", target.device.valid() ? target.device.str() : o.device},
      {"tolerances", {{"path", TolerancesPath()}, {"sha256", Sha256File(TolerancesPath())}}},
  };
  std::map<std::string, std::map<std::string, std::string>> support;
  if (target.ctx != nullptr) {
    const runtime::Plugin& p = target.ctx->plugin();
    summary["plugin"] = {{"name", p.name()},
                         {"path", p.path().string()},
                         {"sha256", Sha256File(p.path())},
                         {"version", p.version()},
                         {"vendor", p.vendor()},
                         {"abi", fmt::format("{}.{}", p.abi_major(), p.abi_minor())}};
    nlohmann::json attrs = nlohmann::json::object();
    for (const auto& a : target.ctx->attributes()) attrs[a.name] = a.ToString();
    summary["device_attributes"] = attrs;
    for (int op : p.kernels().Ops()) {
      for (const runtime::KernelEntry& e : p.kernels().Variants(op)) {
        if (e.num_dtypes > 0) support[runtime::OpName(op)][std::string(sdk::DTypeName(e.dtypes[0]))] = "declared";
      }
    }
    AddObservedSupport(report.records(), support);
  } else {
    summary["plugin"] = {{"path", o.plugin},
                         {"sha256", o.plugin.empty() ? "" : Sha256File(o.plugin)},
                         {"load_error", target.load_error}};
  }
  report.WriteSummary(summary);
  std::vector<std::pair<std::string, std::string>> properties = {{"verdict", overall}};
  for (auto& [level, v] : verdicts.items()) {
    properties.emplace_back(level, v.get<std::string>());
    if (coverage_json.contains(level)) properties.emplace_back(level + ".coverage", coverage_json[level]["text"].get<std::string>());
  }
  report.WriteJUnit(o.junit.empty() ? o.report_dir / "junit.xml" : o.junit,
                    fmt::format("oar-conformance {}", summary["device"].get<std::string>()), properties);
  report.WriteSupport(support);
  std::printf("conformance %s up to L%d: %s (", summary["device"].get<std::string>().c_str(), o.level,
              overall.c_str());
  bool first = true;
  for (auto& [level, v] : verdicts.items()) {
    std::printf("%s%s %s", first ? "" : ", ", level.c_str(), v.get<std::string>().c_str());
    if (v == "BLOCKED") std::printf(" by %s", below.c_str());
    if (coverage_json.contains(level)) std::printf(" [%s]", coverage_json[level]["text"].get<std::string>().c_str());
    first = false;
  }
  std::printf("); reports in %s\n", o.report_dir.string().c_str());
  std::printf("%d passed, %d failed, %d skipped\n", totals.passed, totals.failed, totals.skipped);
  return pass ? 0 : overall == "PARTIAL" ? 2 : 1;
}

}  // namespace oar::conformance
