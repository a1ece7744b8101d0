// The sliding window's host arithmetic (spec §5.2): which rows of the window a query reads, in the
// reference's order (it fixes the 64-slot blocks of the online softmax, so it is part of the
// numerics), for a decode step over the ring and for a prefill chunk over the cached rows and its own.
#pragma once

#include <cstdint>
#include <vector>

namespace dsinfer {

/// A decode step at position p: the rows of positions p - win + 1 .. p in a ring of `ring` >= win
/// rows (position q at row q % ring), oldest first; -1 for a position before 0. The step's own
/// row goes in at the last one, p % ring.
std::vector<int32_t> decode_window_slots(int64_t p, int64_t win, int64_t ring);

/// A prefill chunk of s tokens from `start` in a prompt of `prompt_len`: its window rows are the
/// ring's rows of positions [first_cached, start) followed by the chunk's own s rows.
struct PrefillWindow {
  int64_t width = 0;           // slots per query: min(prompt_len, win), as the one-shot prefill lays them out
  int64_t first_cached = 0;    // the oldest position any of the chunk's queries sees
  int64_t cached = 0;          // start - first_cached: the ring's rows before the chunk's own
  std::vector<int32_t> slots;  // [s, width]: the window row each query reads, -1 for none
};
PrefillWindow prefill_window(int64_t start, int64_t s, int64_t prompt_len, int64_t win);
/// A verify chunk (s consecutive tokens laid out as decode steps): each query reads the rows a
/// decode step at its position reads, in decode_window_slots' order (width win, -1s first).
PrefillWindow verify_window(int64_t start, int64_t s, int64_t win);

}  // namespace dsinfer
