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
  try {
    r = c.run(ctx);
  } catch (const CheckFailure& f) {
    r.status = Status::kFailed;
    r.message = f.message;
  } catch (const SkipCase& s) {
    r.status = Status::kSkipped;
    r.message = s.reason;
  } catch (const Error& e) {
    r.status = Status::kFailed;
    r.message = fmt::format("unexpected error: {}", e.ToString());
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

void AddOptions(CLI::App& app, Options& o) {
  app.add_option("--device", o.device, "Device to certify, e.g. cuda:0 (default: OAR_DEVICE or cpu:0)");
  app.add_option("--plugin", o.plugin, "Plugin file to certify (loaded first)");
  app.add_option("--device-index", o.device_index, "Device ordinal within --plugin")->check(CLI::NonNegativeNumber);
  app.add_option_function<std::string>(
      "--level",
      [&o](const std::string& v) {
        if (v.size() != 2 || (v[0] != 'L' && v[0] != 'l') || v[1] < '0' || v[1] > '3') {
          throw CLI::ValidationError("--level", "expected L0, L1, L2 or L3, got '" + v + "'");
        }
        o.level = v[1] - '0';
      },
      "Certification level, cumulative (L0 loadable, L1 inference, L2 training, L3 distributed); default L2");
  app.add_option("--filter", o.filter,
                 "Run only case ids matching this glob (several: GLOB1:GLOB2); the rest are NOT_SELECTED");
  app.add_flag("--list", o.list, "List the selected case ids and exit");
  app.add_option("--replay", o.replay, "Run one case in this process, printing everything");
  app.add_option("--jobs", o.jobs, "Worker processes")->check(CLI::Range(1, 64));
  app.add_option("--seed", o.seed, "Run seed (each case derives its own, recorded in the results)");
  app.add_option("--timeout", o.timeout_seconds, "Seconds before a case is killed and reported as TIMEOUT")
      ->check(CLI::PositiveNumber);
  app.add_option("--report-dir", o.report_dir, "Where results.jsonl, summary.json, junit.xml, support.* go");
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
    std::printf("%s %s (seed %llu, %.3fs)\n%s\n", std::string(StatusName(r.status)).c_str(), c->id.c_str(),
                static_cast<unsigned long long>(seed), r.seconds, r.message.c_str());
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
  int done = 0;
  auto finish = [&](Record r) {
    if (r.family.empty()) r.family = family_of(r.id);
    report.Add(r);
    ++done;
    if (IsFailure(r.result.status)) {
      std::fprintf(stderr, "%s %s: %s\n", std::string(StatusName(r.result.status)).c_str(), r.id.c_str(),
                   r.result.message.c_str());
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
      if (!w.current.empty() && !w.killed_for_timeout &&
          std::chrono::duration<double>(Clock::now() - w.started).count() > o.timeout_seconds) {
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
          r.result.message = fmt::format("did not finish within {} s; the worker was killed", o.timeout_seconds);
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
      break;  // indices shifted: poll again
    }
  }

  // Verdicts, counts, summary.
  Totals totals;
  std::map<std::string, std::map<std::string, int>> per_family;
  std::map<std::string, int> per_status;
  int level_cases[kMaxLevel + 1] = {}, level_failures[kMaxLevel + 1] = {}, level_passed[kMaxLevel + 1] = {};
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
    ++level_cases[r.level];
    level_failures[r.level] += IsFailure(s) ? 1 : 0;
    level_passed[r.level] += s == Status::kPassed ? 1 : 0;
  }
  nlohmann::json verdicts = nlohmann::json::object();
  bool pass = true, any_passed = false;
  for (int l = 0; l <= o.level; ++l) {
    std::string v;
    bool has_cases = false;
    for (const Case& c : AllCases()) has_cases |= c.level == l;
    if (!has_cases)
      v = "NOT_AVAILABLE";  // this runner version has no cases at that level yet
    else if (level_failures[l] > 0)
      v = "FAIL";
    else if (level_cases[l] == 0 && !o.filter.empty())
      v = "FILTERED_OUT";  // the filter selected none of it
    else if (level_passed[l] == 0)
      v = "NO_CASES_RUN";
    else
      v = o.filter.empty() ? "PASS" : "PASS_FILTERED";
    verdicts[fmt::format("L{}", l)] = v;
    pass = pass && (v == "PASS" || v == "PASS_FILTERED" || v == "FILTERED_OUT");
    any_passed = any_passed || v == "PASS" || v == "PASS_FILTERED";
  }
  pass = pass && any_passed;  // a run in which nothing passed is never a pass
  nlohmann::json summary = {
      {"runner_version", OAR_VERSION_STRING},
      {"abi", fmt::format("{}.{}", OAR_PLUGIN_ABI_MAJOR, OAR_PLUGIN_ABI_MINOR)},
      {"requested_level", fmt::format("L{}", o.level)},
      {"verdict", pass ? "PASS" : "FAIL"},
      {"levels", verdicts},
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
  report.WriteJUnit(o.junit.empty() ? o.report_dir / "junit.xml" : o.junit,
                    fmt::format("oar-conformance {}", summary["device"].get<std::string>()));
  report.WriteSupport(support);
  std::printf("conformance %s up to L%d: %s (", summary["device"].get<std::string>().c_str(), o.level,
              pass ? "PASS" : "FAIL");
  bool first = true;
  for (auto& [level, v] : verdicts.items()) {
    std::printf("%s%s %s", first ? "" : ", ", level.c_str(), v.get<std::string>().c_str());
    first = false;
  }
  std::printf("); reports in %s\n", o.report_dir.string().c_str());
  std::printf("%d passed, %d failed, %d skipped\n", totals.passed, totals.failed, totals.skipped);
  return pass ? 0 : 1;
}

}  // namespace oar::conformance
