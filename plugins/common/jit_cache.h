// What the run-time compiler tables of the in-tree plugins share (c_compiler.cc for C, level_zero's
// OpenCL C -> SPIR-V): finding and running a compiler found at run time, and the on-disk cache of what it
// produced. SDK only, like the tables themselves.
//
// Cache: $OAR_CACHE_DIR (default $XDG_CACHE_HOME/oar, else ~/.cache/oar, else a per-user folder under the
// temporary directory), folder jit/. Callers name entries by the SHA-256 of everything the output depends
// on (Sha256Hex). An entry is the payload followed by a trailer (an 8-byte magic of the caller's + hex
// SHA-256 of the payload); it is written to a temporary name and renamed, so concurrent processes see either
// no entry or a whole one, and an entry whose trailer does not match (truncated, edited) is detected.
#ifndef OAR_PLUGINS_COMMON_JIT_CACHE_H_
#define OAR_PLUGINS_COMMON_JIT_CACHE_H_

#include <filesystem>
#include <string>
#include <vector>

namespace oar::host {

/// The value of environment variable `name`, "" when unset.
std::string Env(const char* name);

/// `name` as a path when it has a '/' (if it is an executable file), else its first executable match on
/// PATH; "" when none.
std::string ResolveProgram(const std::string& name);

struct ProcessResult {
  int exit_code = -1;  ///< -1: killed by a signal or not started
  std::string output;  ///< stdout and stderr together
  std::string error;   ///< why it did not start or finish
};

/// Run argv[0] (a path) with `argv`, stdin from /dev/null, capturing stdout and stderr.
ProcessResult RunProcess(const std::vector<std::string>& argv);

/// argv joined with spaces (for messages).
std::string CommandLine(const std::vector<std::string>& argv);

/// The cache of one kind of compiled entry. Errors are sdk::StatusError prefixed with "<plugin>: ".
class JitCache {
 public:
  /// `plugin` prefixes messages and logs; `magic` (8 characters) marks this kind's trailers.
  JitCache(const char* plugin, const char* magic) : plugin_(plugin), magic_(magic) {}

  /// The folder, from the environment at the time of the call.
  static std::filesystem::path Dir();
  /// Hex SHA-256 of `bytes` (libcrypto).
  std::string Sha256Hex(const std::string& bytes) const;
  /// True when `path` holds a payload with an intact trailer; the payload goes to `payload` when not NULL.
  bool Intact(const std::filesystem::path& path, std::string* payload = nullptr) const;
  /// Log that the entry at `path` is corrupt (`why`) and remove it.
  void Discard(const std::filesystem::path& path, const std::string& why) const;
  /// Write `payload` + trailer to `path` atomically (creating the folder).
  void Store(const std::filesystem::path& path, const std::string& payload) const;
  /// Write `bytes` to `path` atomically: a unique temporary file in the same folder, then rename.
  void WriteAtomically(const std::filesystem::path& path, const std::string& bytes) const;
  /// A fresh temporary path next to `path` (for a compiler's output before it is stored).
  static std::filesystem::path TemporaryFor(const std::filesystem::path& path);
  /// Create the folder of the cache (INTERNAL naming it when that fails).
  void CreateDir() const;

 private:
  [[noreturn]] void Fail(int code, const std::string& message) const;
  const char* plugin_;
  const char* magic_;
};

/// Read the whole file; false when it cannot be read.
bool ReadFile(const std::filesystem::path& path, std::string* out);

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_JIT_CACHE_H_
