// Error reporting and exit codes of the CLI (the table lives in docs/errors.md).
#include <cstdio>

#include "cli/commands.h"

namespace dsinfer::cli {

int report_error(const Status& status) {
  std::fprintf(stderr, "dsinfer: error: %s\n", status.message().c_str());
  switch (status.kind()) {
    case ErrorKind::kInvalidArgument:
      return 2;
    case ErrorKind::kNotFound:
      return 3;
    case ErrorKind::kCorruptFile:
    case ErrorKind::kInvalidConfig:
      return 4;
    case ErrorKind::kResourceExhausted:
      return 5;
    case ErrorKind::kUnsupported:
      return 6;
    case ErrorKind::kUnavailable:
      return 7;
    case ErrorKind::kIo:
    case ErrorKind::kInternal:
      return 1;
  }
  return 1;
}

int usage_error(std::string_view message) {
  std::fprintf(stderr, "dsinfer: error: %.*s\n", static_cast<int>(message.size()), message.data());
  return 2;
}

}  // namespace dsinfer::cli
