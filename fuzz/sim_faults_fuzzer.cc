// OAR_SIM_FAULTS (plugins/common/sim/faults.cc): accepted specs re-parse from their scenarios' text to
// the same scenarios; malformed ones throw INVALID_ARGUMENT with a bounded message.
#include <cstdint>
#include <set>
#include <string>

#include "oar/plugin/cpp/status.hpp"
#include "fuzz/fuzz_util.h"
#include "plugins/common/sim/faults.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::set<std::string> ops = {"add", "matmul", "exp", "format_cast"};
  const std::string spec(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<oar::sim::FaultScenario> parsed = oar::sim::ParseFaults(spec, &ops);
    std::string again;
    for (const auto& s : parsed) again += (again.empty() ? "" : ";") + s.text;
    const std::vector<oar::sim::FaultScenario> back = oar::sim::ParseFaults(again, &ops);
    if (back.size() != parsed.size()) oar::fuzz::Fail("the scenarios' text parses to a different count");
    for (size_t i = 0; i < back.size(); ++i) {
      const auto& a = parsed[i];
      const auto& b = back[i];
      if (a.kind != b.kind || a.after != b.after || a.rate != b.rate || a.seed != b.seed || a.count != b.count ||
          a.device != b.device || a.plugin != b.plugin || a.op != b.op || a.dir != b.dir || a.sync != b.sync ||
          a.code != b.code) {
        oar::fuzz::Fail("a scenario's text parses to a different scenario: " + a.text);
      }
    }
    oar::sim::FaultInjector injector(parsed, "kunlun_sim");
    for (int i = 0; i < 4; ++i) (void)injector.Check(oar::sim::FaultKind::kLaunch, i % 2, "add");
  } catch (const oar::sdk::StatusError& e) {
    if (e.code() != OAR_STATUS_INVALID_ARGUMENT) oar::fuzz::Fail("a rejection that is not INVALID_ARGUMENT");
    oar::fuzz::CheckMessage(e.what(), 4096);
  }
  return 0;
}
