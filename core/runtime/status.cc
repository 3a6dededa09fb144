#include "core/runtime/status.h"

#include <string>

#include "core/base/logging.h"
#include "core/runtime/kernel_registry.h"

// The concrete status object behind the ABI's opaque oar_status_t. Only the host allocates and frees it.
struct oar_status_t {
  int32_t code;
  std::string message;
};

namespace oar::runtime {
namespace {

// Returned when the host cannot allocate a status; never deleted (NULL would mean success).
oar_status_t g_out_of_memory{OAR_STATUS_RESOURCE_EXHAUSTED, "host memory exhausted while reporting an error"};

oar_status_t* StatusCreate(int32_t code, const char* message) {
  try {
    return new oar_status_t{code == OAR_STATUS_OK ? OAR_STATUS_UNKNOWN : code, message ? message : ""};
  } catch (...) {
    return &g_out_of_memory;
  }
}
int32_t StatusCode(const oar_status_t* s) { return s ? s->code : OAR_STATUS_OK; }
const char* StatusMessage(const oar_status_t* s) { return s ? s->message.c_str() : ""; }
void StatusDestroy(oar_status_t* s) {
  if (s != &g_out_of_memory) delete s;
}

void PluginLog(int32_t level, const char* plugin, const char* message) {
  const int clamped = level < 0 ? 0 : (level > 4 ? 4 : level);
  log::Log(static_cast<log::Level>(clamped), "[{}] {}", plugin ? plugin : "plugin", message ? message : "");
}
bool PluginLogEnabled(int32_t level) { return log::Enabled(static_cast<log::Level>(level < 0 ? 0 : level)); }

}  // namespace

const oar_host_api_t* HostApi() {
  static const oar_host_api_t api = [] {
    oar_host_api_t a{};
    a.struct_size = OAR_HOST_API_STRUCT_SIZE;
    a.abi_major = OAR_PLUGIN_ABI_MAJOR;
    a.abi_minor = OAR_PLUGIN_ABI_MINOR;
    a.status_create = StatusCreate;
    a.status_code = StatusCode;
    a.status_message = StatusMessage;
    a.status_destroy = StatusDestroy;
    a.log = PluginLog;
    a.log_enabled = PluginLogEnabled;
    a.register_kernel = RegisterKernelCallback;
    return a;
  }();
  return &api;
}

oar_status_t* MakeStatus(ErrorCode code, std::string_view message) {
  return StatusCreate(static_cast<int32_t>(code), std::string(message).c_str());
}

StatusInfo TakeStatus(oar_status_t* status) {
  if (status == nullptr) return {};
  StatusInfo info{static_cast<ErrorCode>(status->code), status->message};
  if (static_cast<int32_t>(info.code) < 0 || static_cast<int32_t>(info.code) > OAR_STATUS_DATA_LOSS) {
    info.message = fmt::format("(plugin returned unknown status code {}) {}", status->code, info.message);
    info.code = ErrorCode::kUnknown;
  }
  StatusDestroy(status);
  return info;
}

void ThrowIfError(oar_status_t* status, std::string_view where) {
  if (status == nullptr) return;
  StatusInfo info = TakeStatus(status);
  throw Error(info.code, fmt::format("{}: {}", where, info.message));
}

}  // namespace oar::runtime
