// Status formatting.
#include "core/status.h"

namespace dsinfer {

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kNotFound:
      return "not found";
    case ErrorKind::kIo:
      return "I/O error";
    case ErrorKind::kCorruptFile:
      return "corrupt file";
    case ErrorKind::kInvalidConfig:
      return "invalid config";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kResourceExhausted:
      return "resource exhausted";
    case ErrorKind::kUnavailable:
      return "unavailable";
    case ErrorKind::kInternal:
      return "internal error";
  }
  return "unknown error";
}

std::string Status::to_string() const {
  if (ok_) return "ok";
  return std::string(error_kind_name(kind_)) + ": " + message_;
}

}  // namespace dsinfer
