// DSINFER_CHECK / DSINFER_DCHECK: abort on programmer errors (broken invariants), never on bad input.
#pragma once

#include <fmt/format.h>

namespace dsinfer::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& message);
}  // namespace dsinfer::detail

/// Always on. Bad input must be reported through Status instead (docs/errors.md).
#define DSINFER_CHECK(cond, ...)                                                                 \
  do {                                                                                           \
    if (!(cond)) [[unlikely]]                                                                    \
      ::dsinfer::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)

/// For expensive invariants: compiled in debug and sanitizer builds only.
#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__)
#define DSINFER_DCHECK(cond, ...) DSINFER_CHECK(cond, __VA_ARGS__)
#else
#define DSINFER_DCHECK(cond, ...) \
  do {                            \
  } while (0)
#endif
