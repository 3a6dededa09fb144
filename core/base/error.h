// oar::Error — the one exception type of the user-facing C++ API.
#ifndef OAR_CORE_BASE_ERROR_H_
#define OAR_CORE_BASE_ERROR_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "oar/plugin/status.h"

namespace oar {

/// Canonical error codes; the numbering is the ABI's oar_status_code, so plugin statuses map 1:1.
enum class ErrorCode : int32_t {
  kOk = OAR_STATUS_OK,
  kCancelled = OAR_STATUS_CANCELLED,
  kUnknown = OAR_STATUS_UNKNOWN,
  kInvalidArgument = OAR_STATUS_INVALID_ARGUMENT,
  kDeadlineExceeded = OAR_STATUS_DEADLINE_EXCEEDED,
  kNotFound = OAR_STATUS_NOT_FOUND,
  kAlreadyExists = OAR_STATUS_ALREADY_EXISTS,
  kPermissionDenied = OAR_STATUS_PERMISSION_DENIED,
  kResourceExhausted = OAR_STATUS_RESOURCE_EXHAUSTED,
  kFailedPrecondition = OAR_STATUS_FAILED_PRECONDITION,
  kAborted = OAR_STATUS_ABORTED,
  kOutOfRange = OAR_STATUS_OUT_OF_RANGE,
  kUnimplemented = OAR_STATUS_UNIMPLEMENTED,
  kInternal = OAR_STATUS_INTERNAL,
  kUnavailable = OAR_STATUS_UNAVAILABLE,
  kDataLoss = OAR_STATUS_DATA_LOSS,
};

/// "INVALID_ARGUMENT" etc.
std::string_view ErrorCodeName(ErrorCode code);

/// Thrown for every user-visible failure: bad input, plugin errors, resource exhaustion. The message says
/// what was expected, what was got, and where (op, argument, shape, device, file).
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message)
      : std::runtime_error(std::move(message)), code_(code) {}
  ErrorCode code() const noexcept { return code_; }
  /// "INVALID_ARGUMENT: add: ..." — what the CLI prints.
  std::string ToString() const;

 private:
  ErrorCode code_;
};

/// Throw Error(code, fmt::format(...)).
template <typename... Args>
[[noreturn]] void Throw(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace oar

/// Throw oar::Error(kInvalidArgument, ...) unless `cond` holds.
#define OAR_CHECK_ARG(cond, ...)                                          \
  do {                                                                    \
    if (!(cond)) ::oar::Throw(::oar::ErrorCode::kInvalidArgument, __VA_ARGS__); \
  } while (0)

/// Throw oar::Error(code, ...) unless `cond` holds.
#define OAR_CHECK(cond, code, ...)                     \
  do {                                                 \
    if (!(cond)) ::oar::Throw(::oar::ErrorCode::code, __VA_ARGS__); \
  } while (0)

#endif  // OAR_CORE_BASE_ERROR_H_
