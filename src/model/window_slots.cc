// Window slots (window_slots.h).
#include "model/window_slots.h"

#include <algorithm>

namespace dsinfer {

std::vector<int32_t> decode_window_slots(int64_t p, int64_t win, int64_t ring) {
  std::vector<int32_t> slots;
  slots.reserve(win);
  for (int64_t q = p - win + 1; q <= p; ++q) slots.push_back(q < 0 ? -1 : static_cast<int32_t>(q % ring));
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

PrefillWindow verify_window(int64_t start, int64_t s, int64_t win) {
  PrefillWindow w;
  w.width = win;
  w.first_cached = std::max<int64_t>(start - (win - 1), 0);
  w.cached = start - w.first_cached;
  w.slots.reserve(s * win);
  for (int64_t t = start; t < start + s; ++t)
    for (int64_t q = t - win + 1; q <= t; ++q) w.slots.push_back(q < 0 ? -1 : static_cast<int32_t>(q - w.first_cached));
  return w;
}

}  // namespace dsinfer
