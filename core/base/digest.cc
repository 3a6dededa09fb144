#include "core/base/digest.h"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "core/base/error.h"

namespace oar {
namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    OAR_CHECK(ctx_ != nullptr && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1, kInternal,
              "SHA-256: libcrypto could not start a digest");
  }
  void Update(const void* data, size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }
  std::string Hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), digest, &n);
    std::string hex;
    for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", digest[i]);
    return hex;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

}  // namespace

std::string Sha256Hex(std::span<const std::byte> bytes) {
  Sha256 d;
  d.Update(bytes.data(), bytes.size());
  return d.Hex();
}

std::string Sha256FileHex(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  Sha256 d;
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    d.Update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  return d.Hex();
}

}  // namespace oar
