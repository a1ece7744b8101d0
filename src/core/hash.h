// Small deterministic hashes and a counter-based generator, the same on every platform (unlike
// std::hash or the std:: distributions): splitmix64 and FNV-1a.
#pragma once

#include <cstdint>
#include <string_view>

namespace dsinfer {

/// Advances `state` and returns the next splitmix64 output.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The splitmix64 output for state `x`: a well-mixed hash of one 64-bit key.
inline uint64_t mix64(uint64_t x) {
  return splitmix64(x);
}

/// A uniform double in [0, 1) from the next splitmix64 output.
inline double splitmix64_uniform(uint64_t& state) {
  return static_cast<double>(splitmix64(state) >> 11) * 0x1p-53;
}

/// 64-bit FNV-1a of `bytes`.
inline uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace dsinfer
