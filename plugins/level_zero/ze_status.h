// Level Zero result codes in words, and the conversion of a failed ze* call into an SDK status that
// names the call, the device and the ze_result_t.
#ifndef OAR_PLUGINS_LEVEL_ZERO_ZE_STATUS_H_
#define OAR_PLUGINS_LEVEL_ZERO_ZE_STATUS_H_

#include <level_zero/ze_api.h>

#include <string>

#include "oar/plugin/status.h"

namespace oar::level_zero {

/// "ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)"; an unknown value as its hex code.
std::string ResultName(ze_result_t r);

/// What the result means, in the words of ze_api.h ("driver is not initialized").
std::string ResultMeaning(ze_result_t r);

/// The canonical status code a failed ze call maps to (out of memory -> RESOURCE_EXHAUSTED, ...).
oar_status_code StatusCodeOf(ze_result_t r);

/// "<call> on <where>: <name>: <meaning>", e.g. "zeMemAllocDevice on level_zero:0 (Intel Arc A770):
/// ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (0x70000003): insufficient device memory to satisfy call".
std::string Describe(ze_result_t r, const char* call, const std::string& where);

/// Throw sdk::StatusError(StatusCodeOf(r), Describe(...)) unless r is ZE_RESULT_SUCCESS.
void Check(ze_result_t r, const char* call, const std::string& where);

}  // namespace oar::level_zero

#endif  // OAR_PLUGINS_LEVEL_ZERO_ZE_STATUS_H_
