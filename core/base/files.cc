#include "core/base/files.h"

#include <stdio.h>  // renameat2
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/base/error.h"

namespace oar {
namespace {

ErrorCode WriteErrorCode(int error) {
  return error == ENOSPC || error == EDQUOT || error == EFBIG ? ErrorCode::kResourceExhausted
                                                               : ErrorCode::kDataLoss;
}

}  // namespace

std::string FileTypeName(std::filesystem::file_type type) {
  using std::filesystem::file_type;
  switch (type) {
    case file_type::regular: return "a regular file";
    case file_type::directory: return "a directory";
    case file_type::fifo: return "a FIFO (named pipe)";
    case file_type::socket: return "a socket";
    case file_type::character: return "a character device";
    case file_type::block: return "a block device";
    case file_type::symlink: return "a symbolic link";
    case file_type::not_found: return "missing";
    default: return "of unknown type";
  }
}

std::vector<std::byte> ReadFileBytes(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) {
    Throw(ErrorCode::kNotFound, "{}: {} does not exist", what, path.string());
  }
  OAR_CHECK(!ec, kDataLoss, "{}: cannot open {}: {}", what, path.string(), ec.message());
  OAR_CHECK(st.type() == std::filesystem::file_type::regular, kInvalidArgument,
            "{}: {} is {}, not a regular file", what, path.string(), FileTypeName(st.type()));
  // O_NONBLOCK: should the entry turn into a FIFO between the check and the open, opening it must not hang.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    Throw(error == EACCES ? ErrorCode::kPermissionDenied : ErrorCode::kDataLoss, "{}: cannot open {}: {}", what,
          path.string(), std::strerror(error));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    Throw(ErrorCode::kInvalidArgument, "{}: {} is not a regular file", what, path.string());
  }
  std::vector<std::byte> bytes(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : 0;
      ::close(fd);
      Throw(ErrorCode::kDataLoss, "{}: reading {} failed after {} of {} bytes: {}", what, path.string(), done,
            bytes.size(), error ? std::strerror(error) : "the file became shorter");
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

DurableFile::DurableFile(std::filesystem::path path, std::string_view what)
    : path_(std::move(path)), what_(what) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int error = errno;
    Throw(error == EACCES || error == EROFS ? ErrorCode::kPermissionDenied : WriteErrorCode(error),
          "{}: cannot create {}: {}", what_, path_.string(), std::strerror(error));
  }
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::Fail(const char* step, int error) {
  ::close(fd_);
  fd_ = -1;
  Throw(WriteErrorCode(error), "{}: {} {} failed: {}", what_, step, path_.string(), std::strerror(error));
}

void DurableFile::Write(std::span<const std::byte> bytes) {
  OAR_CHECK(fd_ >= 0, kFailedPrecondition, "{}: {} is already closed", what_, path_.string());
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fail("writing", errno);
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
}

void DurableFile::Commit() {
  OAR_CHECK(fd_ >= 0, kFailedPrecondition, "{}: {} is already closed", what_, path_.string());
  // Delayed allocation: on a full disk the write() calls may succeed and only fsync report ENOSPC.
  if (::fsync(fd_) != 0) Fail("flushing", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int error = errno;
    Throw(WriteErrorCode(error), "{}: closing {} failed: {}", what_, path_.string(), std::strerror(error));
  }
}

void SyncDirectory(const std::filesystem::path& dir, std::string_view what) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    Throw(ErrorCode::kDataLoss, "{}: cannot open folder {} to flush it: {}", what, dir.string(),
          std::strerror(error));
  }
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  OAR_CHECK(rc == 0, kDataLoss, "{}: flushing folder {} failed: {}", what, dir.string(), std::strerror(error));
}

void ReplaceDirectory(const std::filesystem::path& tmp, const std::filesystem::path& dir, std::string_view what) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE) == 0) return;
  int error = errno;
  if (error == EEXIST) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) return;
    error = errno;
  }
  if (error == EINVAL || error == ENOSYS || error == EEXIST) {
    // No atomic exchange on this file system: rename() replaces an empty folder only, so move the old one
    // aside first (a crash between the two renames leaves it at `tmp`'s name, complete).
    const std::filesystem::path aside = tmp.string() + ".old";
    std::error_code ec;
    if (std::filesystem::exists(dir, ec)) {
      std::filesystem::rename(dir, aside, ec);
      OAR_CHECK(!ec, kDataLoss, "cannot move the previous {} '{}' aside: {}", what, dir.string(), ec.message());
    }
    std::filesystem::rename(tmp, dir, ec);
    OAR_CHECK(!ec, kDataLoss, "cannot rename '{}' to '{}': {}", tmp.string(), dir.string(), ec.message());
    std::filesystem::rename(aside, tmp, ec);
    return;
  }
  Throw(ErrorCode::kDataLoss, "cannot rename '{}' to '{}': {}", tmp.string(), dir.string(), std::strerror(error));
}

}  // namespace oar
