#include "plugins/common/jit_cache.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "oar/plugin/cpp/status.hpp"

extern char** environ;

namespace oar::host {

namespace fs = std::filesystem;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

namespace {

bool IsExecutable(const fs::path& p) {
  struct stat st{};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

constexpr size_t kMagicSize = 8;
constexpr size_t kTrailerSize = kMagicSize + 64;  // magic + hex SHA-256 of the payload

}  // namespace

std::string ResolveProgram(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return IsExecutable(name) ? name : "";
  std::stringstream path(Env("PATH"));
  std::string dir;
  while (std::getline(path, dir, ':')) {
    if (dir.empty()) dir = ".";
    const fs::path candidate = fs::path(dir) / name;
    if (IsExecutable(candidate)) return candidate.string();
  }
  return "";
}

ProcessResult RunProcess(const std::vector<std::string>& argv) {
  ProcessResult result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    result.error = "cannot run " + argv[0] + ": " + std::strerror(rc);
    return result;
  }
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n > 0) {
      result.output.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.error = argv[0] + " was killed by signal " + std::to_string(WTERMSIG(status));
  }
  return result;
}

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  return command;
}

bool ReadFile(const fs::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return static_cast<bool>(in) || in.eof();
}

void JitCache::Fail(int code, const std::string& message) const {
  throw sdk::StatusError(static_cast<oar_status_code>(code), std::string(plugin_) + ": " + message);
}

fs::path JitCache::Dir() {
  if (std::string d = Env("OAR_CACHE_DIR"); !d.empty()) return fs::path(d) / "jit";
  if (std::string d = Env("XDG_CACHE_HOME"); !d.empty()) return fs::path(d) / "oar" / "jit";
  if (std::string d = Env("HOME"); !d.empty()) return fs::path(d) / ".cache" / "oar" / "jit";
  return fs::temp_directory_path() / ("oar-cache-" + std::to_string(getuid())) / "jit";
}

std::string JitCache::Sha256Hex(const std::string& bytes) const {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    Fail(OAR_STATUS_INTERNAL, "SHA-256 failed (libcrypto)");
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < size; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

bool JitCache::Intact(const fs::path& path, std::string* payload) const {
  std::string bytes;
  if (!ReadFile(path, &bytes) || bytes.size() <= kTrailerSize) return false;
  const size_t size = bytes.size() - kTrailerSize;
  if (bytes.compare(size, kMagicSize, magic_, kMagicSize) != 0) return false;
  if (bytes.compare(size + kMagicSize, 64, Sha256Hex(bytes.substr(0, size))) != 0) return false;
  if (payload != nullptr) {
    bytes.resize(size);
    *payload = std::move(bytes);
  }
  return true;
}

void JitCache::Discard(const fs::path& path, const std::string& why) const {
  sdk::Log(OAR_LOG_WARNING, plugin_, "cache entry " + path.string() + " is corrupt (" + why + "): rebuilding it");
  std::error_code ec;
  fs::remove(path, ec);
}

void JitCache::CreateDir() const {
  const fs::path dir = Dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) Fail(OAR_STATUS_INTERNAL, "cannot create the cache folder " + dir.string() + ": " + ec.message());
}

fs::path JitCache::TemporaryFor(const fs::path& path) {
  static std::atomic<uint64_t> counter{0};
  return path.string() + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
}

void JitCache::WriteAtomically(const fs::path& path, const std::string& bytes) const {
  const fs::path tmp = TemporaryFor(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      const int err = errno;
      std::error_code ec;
      fs::remove(tmp, ec);
      Fail(OAR_STATUS_INTERNAL, "cannot write " + tmp.string() + ": " + std::strerror(err));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    Fail(OAR_STATUS_INTERNAL, "cannot rename into " + path.string() + ": " + ec.message());
  }
}

void JitCache::Store(const fs::path& path, const std::string& payload) const {
  CreateDir();
  WriteAtomically(path, payload + std::string(magic_, kMagicSize) + Sha256Hex(payload));
}

}  // namespace oar::host
