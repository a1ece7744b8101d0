// Window slots against the positions they stand for: a decode step reads the ring's rows of
// positions p - win + 1 .. p oldest first (positions before 0: -1); a prefill query t reads the
// rows of positions max(0, t - win + 1) .. t, in order, then -1s up to the prompt's width; a
// verify chunk's query reads as a decode step.
#include "model/window_slots.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace dsinfer {
namespace {

TEST(WindowSlots, DecodeReadsTheRingOldestFirst) {
  for (const int64_t win : {1, 4, 7})
    for (const int64_t ring : {win, win + 5})  // a ring with a verify chunk's slack
      for (int64_t p = 0; p < 3 * ring; ++p) {
        const std::vector<int32_t> slots = decode_window_slots(p, win, ring);
        ASSERT_EQ(static_cast<int64_t>(slots.size()), win);
        for (int64_t j = 0; j < win; ++j) {
          const int64_t pos = p - win + 1 + j;
          EXPECT_EQ(slots[j], pos < 0 ? -1 : static_cast<int32_t>(pos % ring)) << "win " << win << " p " << p;
        }
        EXPECT_EQ(slots.back(), static_cast<int32_t>(p % ring)) << "the step's own row is the last slot";
      }
}

// A verify chunk's query reads what a decode step at its position reads, through the chunk's rows.
TEST(WindowSlots, VerifyChunksReadAsDecodeSteps) {
  for (const int64_t win : {3, 8})
    for (int64_t start = 0; start < 20; ++start)
      for (int64_t s = 1; s <= 6; ++s) {
        const PrefillWindow w = verify_window(start, s, win);
        ASSERT_EQ(w.width, win);
        ASSERT_EQ(w.first_cached, std::max<int64_t>(start - win + 1, 0));
        ASSERT_EQ(w.cached, start - w.first_cached);
        for (int64_t i = 0; i < s; ++i) {
          const std::vector<int32_t> decode = decode_window_slots(start + i, win, 1 << 20);  // row = position
          for (int64_t j = 0; j < win; ++j)
            EXPECT_EQ(w.slots[i * win + j], decode[j] < 0 ? -1 : static_cast<int32_t>(decode[j] - w.first_cached));
        }
      }
}

TEST(WindowSlots, PrefillChunksReadTheCachedRowsThenTheirOwn) {
  for (const int64_t win : {3, 8})
    for (const int64_t prompt : {2, 5, 20})
      for (int64_t start = 0; start < prompt; ++start)
        for (int64_t s = 1; start + s <= prompt; ++s) {
          const PrefillWindow w = prefill_window(start, s, prompt, win);
          ASSERT_EQ(w.width, std::min(prompt, win));
          ASSERT_EQ(w.first_cached, std::max<int64_t>(start - win + 1, 0));
          ASSERT_EQ(w.cached, start - w.first_cached);
          ASSERT_EQ(static_cast<int64_t>(w.slots.size()), s * w.width);
          for (int64_t i = 0; i < s; ++i) {
            const int64_t t = start + i, first = std::max<int64_t>(t - win + 1, 0);
            for (int64_t j = 0; j < w.width; ++j) {
              const int64_t pos = first + j;
              EXPECT_EQ(w.slots[i * w.width + j], pos <= t ? static_cast<int32_t>(pos - w.first_cached) : -1);
            }
          }
        }
}

}  // namespace
}  // namespace dsinfer
