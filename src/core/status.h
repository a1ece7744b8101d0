// Status and Result<T>: how recoverable errors cross module boundaries (no exceptions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/check.h"

namespace dsinfer {

/// What went wrong, coarse enough to map to an HTTP status or a CLI exit code (docs/errors.md).
enum class ErrorKind : uint8_t {
  kInvalidArgument,    // a caller passed something malformed (bad flag, bad request field)
  kNotFound,           // a file, tensor or key that should exist does not
  kIo,                 // the operating system refused (open, mmap, write, rename)
  kCorruptFile,        // a file exists but its bytes are not what its format promises
  kInvalidConfig,      // a config parses but describes a model we cannot run
  kUnsupported,        // valid input that this build does not implement
  kResourceExhausted,  // out of memory, cache blocks or another budget
  kUnavailable,        // another rank of the job did not answer in time (a collective timed out)
  kInternal,           // a bug: an invariant that should have held did not
};

std::string_view error_kind_name(ErrorKind kind);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorKind kind, std::string message) : ok_(false), kind_(kind), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return ok_; }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  /// "corrupt file: <message>"; "ok" when ok.
  std::string to_string() const;

 private:
  bool ok_ = true;
  ErrorKind kind_ = ErrorKind::kInternal;
  std::string message_;
};

/// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like absl::StatusOr
  Result(Status status) : v_(std::move(status)) {
    DSINFER_CHECK(!std::get<Status>(v_).ok(), "Result constructed from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    DSINFER_CHECK(ok(), "value() on an error Result: {}", std::get<Status>(v_).to_string());
    return std::get<T>(v_);
  }
  const T& value() const& {
    DSINFER_CHECK(ok(), "value() on an error Result: {}", std::get<Status>(v_).to_string());
    return std::get<T>(v_);
  }
  T&& value() && {
    DSINFER_CHECK(ok(), "value() on an error Result: {}", std::get<Status>(v_).to_string());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

inline Status error(ErrorKind kind, std::string message) {
  return Status(kind, std::move(message));
}

}  // namespace dsinfer

#define DSINFER_CONCAT_INNER_(a, b) a##b
#define DSINFER_CONCAT_(a, b) DSINFER_CONCAT_INNER_(a, b)

/// Returns the Status of `expr` from the enclosing function when it is an error.
#define DSINFER_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::dsinfer::Status dsinfer_status_ = (expr);        \
    if (!dsinfer_status_.ok()) return dsinfer_status_; \
  } while (0)

/// `DSINFER_ASSIGN_OR_RETURN(auto x, make_x());` binds the value or returns the error.
#define DSINFER_ASSIGN_OR_RETURN(lhs, expr) \
  DSINFER_ASSIGN_OR_RETURN_IMPL_(DSINFER_CONCAT_(dsinfer_result_, __LINE__), lhs, expr)
#define DSINFER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
