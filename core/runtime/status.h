// The host side of ABI statuses: the callback table handed to plugins and the conversion of a plugin's
// status into oar::Error.
#ifndef OAR_CORE_RUNTIME_STATUS_H_
#define OAR_CORE_RUNTIME_STATUS_H_

#include <string>
#include <string_view>
#include <type_traits>

#include "core/base/error.h"
#include "oar/plugin/plugin.h"

namespace oar::runtime {

/// The process-wide host callback table (status functions, logging, kernel registration).
const oar_host_api_t* HostApi();

/// Create a status as a plugin would (for the runtime's own callbacks and tests).
oar_status_t* MakeStatus(ErrorCode code, std::string_view message);

/// Throw oar::Error(status code, "<where>: <status message>") and free the status, unless it is NULL.
void ThrowIfError(oar_status_t* status, std::string_view where);
/// The same, with `where()` evaluated only on error (the success path stays allocation-free).
template <typename WhereFn>
  requires std::is_invocable_r_v<std::string, WhereFn>
inline void ThrowIfError(oar_status_t* status, WhereFn&& where) {
  if (status != nullptr) ThrowIfError(status, std::string_view(where()));
}

/// Consume a status: its code and message (code kOk for NULL).
struct StatusInfo {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
};
StatusInfo TakeStatus(oar_status_t* status);

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_STATUS_H_
