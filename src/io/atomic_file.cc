// AtomicFileWriter over POSIX file descriptors.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace dsinfer {

Result<AtomicFileWriter> AtomicFileWriter::create(const std::filesystem::path& path) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error(ErrorKind::kIo, fmt::format("{}: cannot create: {}", tmp.string(), std::strerror(errno)));
  return AtomicFileWriter(path, std::move(tmp), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(std::exchange(o.fd_, -1)), committed_(o.committed_) {
  o.committed_ = true;  // the moved-from object must not delete our temporary file
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

Status AtomicFileWriter::write(std::span<const uint8_t> bytes) {
  DSINFER_CHECK(fd_ >= 0, "write after commit");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return error(ErrorKind::kIo, fmt::format("{}: write failed: {}", tmp_.string(), std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  return {};
}

Status AtomicFileWriter::skip(uint64_t bytes) {
  DSINFER_CHECK(fd_ >= 0, "skip after commit");
  if (::lseek(fd_, static_cast<off_t>(bytes), SEEK_CUR) < 0)
    return error(ErrorKind::kIo, fmt::format("{}: seek failed: {}", tmp_.string(), std::strerror(errno)));
  return {};
}

Status AtomicFileWriter::commit() {
  DSINFER_CHECK(fd_ >= 0, "commit twice");
  // A skip at the end leaves the size short of the position: extend the file to it.
  const off_t end = ::lseek(fd_, 0, SEEK_CUR);
  bool ok = end >= 0 && ::ftruncate(fd_, end) == 0;
  ok = ::fsync(fd_) == 0 && ok;
  int err = errno;
  ok = (::close(std::exchange(fd_, -1)) == 0) && ok;
  if (ok && ::rename(tmp_.c_str(), path_.c_str()) != 0) ok = false;
  if (!ok) {
    err = errno ? errno : err;
    return error(ErrorKind::kIo, fmt::format("{}: cannot finish writing: {}", path_.string(), std::strerror(err)));
  }
  committed_ = true;
  return {};
}

Status write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  DSINFER_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::create(path));
  DSINFER_RETURN_IF_ERROR(w.write(text));
  return w.commit();
}

}  // namespace dsinfer
