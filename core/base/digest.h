// SHA-256 digests (OpenSSL's libcrypto) for files whose integrity is checked: certified plugins, saved
// programs and their parameters.
#ifndef OAR_CORE_BASE_DIGEST_H_
#define OAR_CORE_BASE_DIGEST_H_

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace oar {

/// Lower-case hex SHA-256 of `bytes` (64 characters).
std::string Sha256Hex(std::span<const std::byte> bytes);
/// Lower-case hex SHA-256 of the file at `path`, read in chunks; empty when it cannot be opened.
std::string Sha256FileHex(const std::filesystem::path& path);

}  // namespace oar

#endif  // OAR_CORE_BASE_DIGEST_H_
