// Window slots (window_slots.h).
#include "model/window_slots.h"

#include <algorithm>

namespace dsinfer {

std::vector<int32_t> decode_window_slots(int64_t p, int64_t win) {
  std::vector<int32_t> slots;
  slots.reserve(win);
  for (int64_t j = 0; j < win; ++j) {
    const int64_t slot = (p % win + 1 + j) % win;  // oldest first
    slots.push_back(slot > p ? -1 : static_cast<int32_t>(slot));
  }
  return slots;
}

PrefillWindow prefill_window(int64_t start, int64_t s, int64_t prompt_len, int64_t win) {
  PrefillWindow w;
  w.width = std::min(prompt_len, win);
  w.first_cached = std::max<int64_t>(start - (win - 1), 0);
  w.cached = start - w.first_cached;
  w.slots.reserve(s * w.width);
  for (int64_t i = 0; i < s; ++i) {
    const int64_t t = start + i, first = std::max<int64_t>(t - (win - 1), 0);
    for (int64_t j = 0; j < w.width; ++j)
      w.slots.push_back(first + j <= t ? static_cast<int32_t>(first + j - w.first_cached) : -1);
  }
  return w;
}

}  // namespace dsinfer
