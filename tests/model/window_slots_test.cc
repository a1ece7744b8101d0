// Window slots against the positions they stand for: a decode step reads the ring's slots of
// positions p - win + 1 .. p oldest first (never-written slots -1); a prefill query t reads the
// rows of positions max(0, t - win + 1) .. t, in order, then -1s up to the prompt's width.
#include "model/window_slots.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace dsinfer {
namespace {

TEST(WindowSlots, DecodeReadsTheRingOldestFirst) {
  for (const int64_t win : {1, 4, 7})
    for (int64_t p = 0; p < 3 * win; ++p) {
      const std::vector<int32_t> slots = decode_window_slots(p, win);
      ASSERT_EQ(static_cast<int64_t>(slots.size()), win);
      for (int64_t j = 0; j < win; ++j) {
        const int64_t pos = p - win + 1 + j;
        EXPECT_EQ(slots[j], pos < 0 ? -1 : static_cast<int32_t>(pos % win)) << "win " << win << " p " << p;
      }
      EXPECT_EQ(slots.back(), static_cast<int32_t>(p % win)) << "the step's own row is the last slot";
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
