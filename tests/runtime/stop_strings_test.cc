// Stop strings across token boundaries: never emitted, everything before them emitted.
#include "runtime/stop_strings.h"

#include <gtest/gtest.h>

namespace dsinfer {
namespace {

std::string stream(StopStringMatcher& m, const std::vector<std::string>& pieces, bool* stopped) {
  std::string out;
  for (const auto& p : pieces) {
    out += m.push(p, stopped);
    if (*stopped) return out;
  }
  return out + m.flush();
}

TEST(StopStrings, CutBeforeAStopSpanningPieces) {
  StopStringMatcher m({"END", "\n\n"});
  bool stopped = false;
  EXPECT_EQ(stream(m, {"hello E", "N", "D and more"}, &stopped), "hello ");
  EXPECT_TRUE(stopped);
}

TEST(StopStrings, HeldBackPrefixesAreReleasedWhenTheyDoNotComplete) {
  StopStringMatcher m({"END"});
  bool stopped = false;
  EXPECT_EQ(m.push("abc E", &stopped), "abc ");  // "E" could start END
  EXPECT_EQ(m.push("N", &stopped), "");
  EXPECT_EQ(m.push("x", &stopped), "ENx");
  EXPECT_EQ(m.push("EN", &stopped), "");
  EXPECT_EQ(m.flush(), "EN");  // the stream ended: release it
  EXPECT_FALSE(stopped);
}

TEST(StopStrings, EarliestOfSeveralAndMultibyte) {
  StopStringMatcher m({"ß!", "a"});
  bool stopped = false;
  EXPECT_EQ(stream(m, {"xyß", "!a"}, &stopped), "xy");
  EXPECT_TRUE(stopped);
  StopStringMatcher none({});
  EXPECT_EQ(stream(none, {"a", "b"}, &stopped), "ab");
  EXPECT_FALSE(stopped);
}

}  // namespace
}  // namespace dsinfer
