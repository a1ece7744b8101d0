// Status / Result behaviour and the propagation macros.
#include "core/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace dsinfer {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return error(ErrorKind::kInvalidArgument, "value must be positive");
  return v;
}

Status twice_positive(int v, int* out) {
  DSINFER_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = 2 * x;
  return {};
}

TEST(Status, OkAndErrorsFormat) {
  EXPECT_TRUE(Status().ok());
  const Status s = error(ErrorKind::kCorruptFile, "a.safetensors: header truncated");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kCorruptFile);
  EXPECT_EQ(s.to_string(), "corrupt file: a.safetensors: header truncated");
}

TEST(Result, ValueOrStatusAndMacros) {
  int out = 0;
  EXPECT_TRUE(twice_positive(4, &out).ok());
  EXPECT_EQ(out, 8);
  const Status s = twice_positive(-1, &out);
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(s.message(), "value must be positive");
  Result<std::unique_ptr<int>> r = std::make_unique<int>(3);  // move-only values work
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, 3);
}

TEST(ResultDeathTest, ValueOfAnErrorAborts) {
  Result<int> r = error(ErrorKind::kNotFound, "missing");
  EXPECT_DEATH((void)r.value(), "value\\(\\) on an error Result");
}

}  // namespace
}  // namespace dsinfer
