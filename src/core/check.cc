// The failure path of DSINFER_CHECK: message, location, then abort.
#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace dsinfer::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& message) {
  std::fprintf(stderr, "dsinfer: check failed at %s:%d: %s%s%s\n", file, line, cond, message.empty() ? "" : ": ",
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace dsinfer::detail
