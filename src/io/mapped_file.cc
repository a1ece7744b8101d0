// POSIX mmap behind MappedFile.
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace dsinfer {
namespace {

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "a special file";
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const ErrorKind kind = errno == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIo;
    return error(kind, fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return error(ErrorKind::kIo, fmt::format("{}: cannot stat: {}", path.string(), std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {  // fstat succeeded: errno says nothing here, the file type does
    ::close(fd);
    return error(ErrorKind::kCorruptFile,
                 fmt::format("{}: is {}, not a regular file", path.string(), file_type_name(st.st_mode)));
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return error(ErrorKind::kIo, fmt::format("{}: mmap failed: {}", path.string(), std::strerror(err)));
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept {
  *this = std::move(o);
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace dsinfer
