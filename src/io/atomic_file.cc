// AtomicFileWriter over POSIX file descriptors.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
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

namespace {

namespace fs = std::filesystem;

// fsync of a folder makes the renames and creations in it durable; best effort.
void sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// `name`.tmp-<pid> / `name`.old-<pid> of a process that is gone.
bool is_stale_leftover(const std::string& entry, const std::string& name) {
  for (const char* tag : {".tmp-", ".old-"}) {
    const std::string prefix = name + tag;
    if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid = entry.substr(prefix.size());
    if (pid.size() > 10 || !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    const long long p = std::stoll(pid);
    if (p == static_cast<long long>(::getpid())) return true;  // ours from a reused pid: nothing runs it
    return p > static_cast<long long>(INT32_MAX) || (::kill(static_cast<pid_t>(p), 0) != 0 && errno == ESRCH);
  }
  return false;
}

bool looks_replaceable(const fs::path& dir) {
  std::error_code ec;
  bool empty = true;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    empty = false;
    const fs::path& p = de.path();
    if (p.filename() == "config.json" || p.extension() == ".safetensors") return true;
  }
  return !ec && empty;
}

Status io_error(const fs::path& p, const std::string& what, const std::error_code& ec) {
  return error(ErrorKind::kIo, fmt::format("{}: {}: {}", p.string(), what, ec.message()));
}

}  // namespace

Status write_folder_atomic(const fs::path& dir, const std::function<Status(const fs::path& tmp)>& fill) {
  std::error_code ec;
  fs::path target = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return io_error(dir, "cannot resolve the path", ec);
  if (target.filename().empty()) target = target.parent_path();  // a trailing '/'
  const fs::path parent = target.parent_path();
  const std::string name = target.filename().string();
  if (name.empty() || name == "." || name == "..")
    return error(ErrorKind::kInvalidArgument, fmt::format("{}: not a folder name to write", dir.string()));
  fs::create_directories(parent, ec);
  if (ec) return io_error(parent, "cannot create folder", ec);

  const bool exists = fs::exists(target, ec);
  if (exists && !fs::is_directory(target, ec))
    return error(ErrorKind::kInvalidArgument, fmt::format("{}: exists and is not a folder", target.string()));
  if (exists && !looks_replaceable(target))
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("{}: exists and is neither empty nor a model folder (no config.json or "
                             "*.safetensors): refusing to replace it",
                             target.string()));

  for (const auto& de : fs::directory_iterator(parent, ec))
    if (is_stale_leftover(de.path().filename().string(), name)) {
      std::error_code rm;
      fs::remove_all(de.path(), rm);
    }

  const std::string pid = std::to_string(::getpid());
  const fs::path tmp = parent / (name + ".tmp-" + pid);
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec) return io_error(tmp, "cannot create folder", ec);
  if (Status s = fill(tmp); !s.ok()) {
    fs::remove_all(tmp, ec);
    return s;
  }
  sync_folder(tmp);

  if (!exists) {
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      const std::error_code e(errno, std::generic_category());
      fs::remove_all(tmp, ec);
      return io_error(target, "cannot move the new folder into place", e);
    }
  } else if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp, ec);  // now the old folder
  } else {
    // No atomic swap on this file system: old aside, new into place, old removed.
    const fs::path old = parent / (name + ".old-" + pid);
    fs::remove_all(old, ec);
    if (::rename(target.c_str(), old.c_str()) != 0) {
      const std::error_code e(errno, std::generic_category());
      fs::remove_all(tmp, ec);
      return io_error(target, "cannot move the old folder aside", e);
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      const std::error_code e(errno, std::generic_category());
      (void)::rename(old.c_str(), target.c_str());  // put the old one back
      fs::remove_all(tmp, ec);
      return io_error(target, "cannot move the new folder into place", e);
    }
    fs::remove_all(old, ec);
  }
  sync_folder(parent);
  return {};
}

}  // namespace dsinfer
