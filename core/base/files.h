// Files the user names: read them with the cause of every failure in the message, write them durably.
#ifndef OAR_CORE_BASE_FILES_H_
#define OAR_CORE_BASE_FILES_H_

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace oar {

/// "a regular file", "a directory", "a FIFO (named pipe)", "a socket", "a character device",
/// "a block device", "a symbolic link", "missing" or "of unknown type".
std::string FileTypeName(std::filesystem::file_type type);

/// The whole content of the regular file at `path`. Throws oar::Error naming `what` (e.g. "safetensors")
/// and `path` with the cause: kNotFound when it does not exist; kInvalidArgument when it is a directory,
/// FIFO or other non-regular entry (never blocks on a FIFO); kPermissionDenied / kDataLoss with the
/// system's text otherwise (a symbolic-link loop, EACCES, EIO).
std::vector<std::byte> ReadFileBytes(const std::filesystem::path& path, std::string_view what);

/// A file written for keeps: created (or truncated) by the constructor, filled by Write, flushed to
/// stable storage by Commit (fsync + close). Every failure throws oar::Error naming the file and the
/// system's reason — kResourceExhausted for a full disk or quota (ENOSPC, EDQUOT, EFBIG), kDataLoss
/// otherwise. A file not committed is closed (not removed) by the destructor. Not thread-safe.
class DurableFile {
 public:
  DurableFile(std::filesystem::path path, std::string_view what);
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void Write(std::span<const std::byte> bytes);
  void Write(std::string_view text) { Write(std::as_bytes(std::span(text.data(), text.size()))); }
  void Commit();

 private:
  [[noreturn]] void Fail(const char* step, int error);
  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
};

/// fsync the directory `dir`, so that names created, renamed or removed in it survive a crash.
void SyncDirectory(const std::filesystem::path& dir, std::string_view what);

/// Put the folder `tmp` in the place of `dir` in one step: an atomic exchange where the file system has
/// one (renameat2), else `dir` is moved aside first. Afterwards `tmp` holds the previous folder (or
/// nothing), to be removed by the caller. Throws oar::Error(kDataLoss) naming `what` and both paths.
void ReplaceDirectory(const std::filesystem::path& tmp, const std::filesystem::path& dir, std::string_view what);

}  // namespace oar

#endif  // OAR_CORE_BASE_FILES_H_
