// Oar plugin SDK — C++ helpers for statuses: keep the host table, create statuses, and the guard that
// turns C++ exceptions into statuses so none ever crosses the ABI.
#ifndef OAR_PLUGIN_CPP_STATUS_HPP_
#define OAR_PLUGIN_CPP_STATUS_HPP_

#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "oar/plugin/plugin.h"

namespace oar::sdk {

/// The host's callback table, stored by OAR_DEFINE_PLUGIN's entry point. One per plugin library.
inline const oar_host_api_t*& Host() {
  static const oar_host_api_t* host = nullptr;
  return host;
}

/// Thrown inside a plugin to report an error with a code; the guard turns it into a status.
class StatusError : public std::exception {
 public:
  StatusError(oar_status_code code, std::string message) : code_(code), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  oar_status_code code() const { return code_; }

 private:
  oar_status_code code_;
  std::string message_;
};

/// Create a status through the host (returns NULL for OK). Only valid after the entry point ran.
inline oar_status_t* MakeStatus(oar_status_code code, const std::string& message) {
  if (code == OAR_STATUS_OK) return nullptr;
  return Host()->status_create(code, message.c_str());
}

/// Throw StatusError(code, message) unless `condition` holds.
inline void Require(bool condition, oar_status_code code, const std::string& message) {
  if (!condition) throw StatusError(code, message);
}

/// Run `body` (returning void or oar_status_t*) and convert any exception into a status. Use it as the
/// whole body of every function the plugin hands to the host.
template <typename Body>
oar_status_t* Guard(Body&& body) noexcept {
  try {
    if constexpr (std::is_same_v<decltype(body()), void>) {
      body();
      return nullptr;
    } else {
      return body();
    }
  } catch (const StatusError& e) {
    return MakeStatus(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return MakeStatus(OAR_STATUS_RESOURCE_EXHAUSTED, "host memory exhausted inside the plugin");
  } catch (const std::exception& e) {
    return MakeStatus(OAR_STATUS_INTERNAL, std::string("unexpected exception: ") + e.what());
  } catch (...) {
    return MakeStatus(OAR_STATUS_INTERNAL, "unexpected non-standard exception");
  }
}

/// Log through the host (filtered by OAR_LOG_LEVEL there).
inline void Log(oar_log_level level, const char* plugin, const std::string& message) {
  const oar_host_api_t* host = Host();
  if (host != nullptr && host->log_enabled(level)) host->log(level, plugin, message.c_str());
}

}  // namespace oar::sdk

/// Define the plugin's single exported entry point. `api_table` is an expression yielding
/// `const oar_plugin_api_t*`. The entry point stores the host table, refuses a different major version
/// naming both, and returns the table.
#define OAR_DEFINE_PLUGIN(api_table)                                                              \
  extern "C" OAR_PLUGIN_EXPORT oar_status_t* oar_plugin_get_api(const oar_host_api_t* host,     \
                                                                const oar_plugin_api_t** api) { \
    if (host == nullptr || api == nullptr) return nullptr;                                       \
    if (host->abi_major != OAR_PLUGIN_ABI_MAJOR) {                                              \
      return host->status_create(                                                              \
          OAR_STATUS_FAILED_PRECONDITION,                                                      \
          ("plugin built for ABI " + std::to_string(OAR_PLUGIN_ABI_MAJOR) + "." +               \
           std::to_string(OAR_PLUGIN_ABI_MINOR) + " cannot serve host ABI " +                   \
           std::to_string(host->abi_major) + "." + std::to_string(host->abi_minor))             \
              .c_str());                                                                        \
    }                                                                                           \
    ::oar::sdk::Host() = host; /* kept only once the host is known to be compatible */          \
    return ::oar::sdk::Guard([&] { *api = (api_table); });                                     \
  }

#endif  // OAR_PLUGIN_CPP_STATUS_HPP_
