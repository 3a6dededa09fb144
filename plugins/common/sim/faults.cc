#include "plugins/common/sim/faults.h"

#include <algorithm>

#include "plugins/common/sim/config.h"

namespace oar::sim {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

[[noreturn]] void Malformed(std::string_view spec, const std::string& problem) {
  Throw(OAR_STATUS_INVALID_ARGUMENT,
        "OAR_SIM_FAULTS='" + Brief(spec) + "': " + Brief(problem, 2000) +
            " (expected kind[:key=value,...] with kind alloc|launch|copy|device_lost, scenarios separated by ';' "
            "or ','; see docs/simulators.md)");
}

// The simulators a `plugin=` key can name; a typo (plugin=kunlun) would otherwise never fire.
constexpr std::string_view kSimulators[] = {"kunlun_sim", "ascend_sim"};

std::string Joined(const auto& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

void SetOption(std::string_view spec, FaultScenario* s, std::string_view option,
               const std::set<std::string>* known_ops) {
  const size_t eq = option.find('=');
  if (eq == std::string_view::npos) Malformed(spec, "option '" + Brief(option) + "' is not key=value");
  const std::string key(Trim(option.substr(0, eq)));
  const std::string value(Trim(option.substr(eq + 1)));
  auto bad = [&](const std::string& expected) {
    Malformed(spec,
              "in scenario '" + Brief(s->text) + "', " + Brief(key) + "='" + Brief(value) + "' is not " + expected);
  };
  auto kind_only = [&](FaultKind kind, const char* kind_name) {
    if (s->kind != kind)
      Malformed(spec, "in scenario '" + Brief(s->text) + "', key '" + Brief(key) + "' only applies to " + kind_name);
  };
  if (key == "after") {
    const auto v = ParseUnsigned(value);
    if (!v) bad("a non-negative integer");
    s->after = *v;
  } else if (key == "rate") {
    const auto v = ParseProbability(value);
    if (!v) bad("a probability in [0, 1]");
    s->rate = *v;
  } else if (key == "seed") {
    const auto v = ParseUnsigned(value);
    if (!v) bad("a non-negative integer");
    s->seed = *v;
  } else if (key == "count") {
    const auto v = ParseUnsigned(value);
    if (!v || *v == 0) bad("a positive integer");
    s->count = *v;
  } else if (key == "device") {
    const auto v = ParseUnsigned(value, 63);
    if (!v) bad("a device ordinal in 0..63");
    s->device = static_cast<int32_t>(*v);
  } else if (key == "plugin") {
    if (std::find(std::begin(kSimulators), std::end(kSimulators), value) == std::end(kSimulators)) {
      bad("a simulator name (" + Joined(kSimulators) + ")");
    }
    s->plugin = value;
  } else if (key == "op") {
    kind_only(FaultKind::kLaunch, "launch");
    if (value.empty() || (known_ops != nullptr && !known_ops->count(value))) {
      bad("the name of an op the simulators run kernels for" +
          (known_ops != nullptr ? " (" + Joined(*known_ops) + ")" : std::string()));
    }
    s->op = value;
  } else if (key == "mode") {
    kind_only(FaultKind::kLaunch, "launch");
    if (value != "async" && value != "sync") bad("async or sync");
    s->sync = value == "sync";
  } else if (key == "dir") {
    kind_only(FaultKind::kCopy, "copy");
    if (value != "h2d" && value != "d2h" && value != "d2d" && value != "p2p") bad("h2d, d2h, d2d or p2p");
    s->dir = value;
  } else if (key == "code") {
    kind_only(FaultKind::kCopy, "copy");
    if (value == "data_loss") {
      s->code = OAR_STATUS_DATA_LOSS;
    } else if (value == "internal") {
      s->code = OAR_STATUS_INTERNAL;
    } else {
      bad("data_loss or internal");
    }
  } else {
    Malformed(spec, "in scenario '" + Brief(s->text) + "', unknown key '" + Brief(key) +
                        "' (keys: after, rate, seed, count, device, plugin; op and mode for launch; dir and code "
                        "for copy)");
  }
}

}  // namespace

std::vector<FaultScenario> ParseFaults(std::string_view spec, const std::set<std::string>* known_ops) {
  std::vector<FaultScenario> out;
  // Tokens separated by ',' or ';'. A token "kind:..." starts a scenario; a ';' also ends one.
  std::vector<std::vector<std::string_view>> groups;  // per scenario: kind token then options
  bool open = false;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find_first_of(",;", start);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view token = Trim(spec.substr(start, end - start));
    const bool semicolon = end < spec.size() && spec[end] == ';';
    if (!token.empty()) {
      const size_t colon = token.find(':');
      const size_t eq = token.find('=');
      const bool starts_scenario = colon != std::string_view::npos && (eq == std::string_view::npos || colon < eq);
      if (starts_scenario || eq == std::string_view::npos) {
        groups.push_back({token});
        open = true;
      } else if (!open) {
        Malformed(spec, "option '" + Brief(token) + "' does not follow a scenario kind");
      } else {
        groups.back().push_back(token);
      }
    }
    if (semicolon) open = false;
    start = end + 1;
  }
  for (const auto& group : groups) {
    FaultScenario s;
    std::string_view head = group[0];
    const size_t colon = head.find(':');
    const std::string kind(Trim(head.substr(0, colon)));
    if (kind == "alloc") {
      s.kind = FaultKind::kAlloc;
      s.code = OAR_STATUS_RESOURCE_EXHAUSTED;
    } else if (kind == "launch") {
      s.kind = FaultKind::kLaunch;
      s.code = OAR_STATUS_INTERNAL;
    } else if (kind == "copy") {
      s.kind = FaultKind::kCopy;
      s.code = OAR_STATUS_DATA_LOSS;
    } else if (kind == "device_lost") {
      s.kind = FaultKind::kDeviceLost;
      s.code = OAR_STATUS_UNAVAILABLE;
    } else {
      Malformed(spec, "unknown fault kind '" + Brief(kind) + "'");
    }
    std::vector<std::string_view> options;
    if (colon != std::string_view::npos && !Trim(head.substr(colon + 1)).empty()) {
      options.push_back(Trim(head.substr(colon + 1)));
    }
    options.insert(options.end(), group.begin() + 1, group.end());
    s.text = kind;
    for (size_t i = 0; i < options.size(); ++i) s.text += (i == 0 ? ":" : ",") + std::string(options[i]);
    for (std::string_view option : options) SetOption(spec, &s, option, known_ops);
    out.push_back(std::move(s));
  }
  return out;
}

FaultInjector::FaultInjector(const std::vector<FaultScenario>& scenarios, const std::string& plugin) {
  for (const FaultScenario& s : scenarios) {
    if (s.plugin.empty() || s.plugin == plugin) scenarios_.push_back(State{s});
  }
}

const FaultScenario* FaultInjector::Check(FaultKind kind, int32_t device, std::string_view what) {
  if (scenarios_.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  const FaultScenario* hit = nullptr;
  for (State& st : scenarios_) {
    const FaultScenario& s = st.scenario;
    if (s.kind != kind || (s.device && *s.device != device)) continue;
    if (kind == FaultKind::kLaunch && !s.op.empty() && s.op != what) continue;
    if (kind == FaultKind::kCopy && !s.dir.empty() && s.dir != what) continue;
    const uint64_t index = ++st.seen;  // 1-based
    if (index <= s.after) continue;
    const uint64_t limit = s.count.value_or(s.rate ? UINT64_MAX : 1);
    if (st.fired >= limit) continue;
    if (s.rate) {
      const double draw = static_cast<double>(SplitMix64(s.seed * 0x2545f4914f6cdd1dull ^ index) >> 11) * 0x1.0p-53;
      if (draw >= *s.rate) continue;
    }
    ++st.fired;
    if (hit == nullptr) hit = &s;
  }
  return hit;
}

std::string FaultSuffix(const FaultScenario& s) { return " (injected fault '" + s.text + "' from OAR_SIM_FAULTS)"; }

}  // namespace oar::sim
