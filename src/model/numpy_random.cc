// numpy's SeedSequence (bit_generator.pyx), PCG64 (pcg64.h, XSL-RR output) and the 64-bit
// bounded Lemire draw (distributions.c: bounded_lemire_uint64).
#include "model/numpy_random.h"

#include <array>

#include "core/check.h"

namespace dsinfer {
namespace {

using u128 = unsigned __int128;

constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> 16);
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  return r ^ (r >> 16);
}

// SeedSequence(seed).generate_state(4, uint64).
std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
  std::vector<uint32_t> entropy;
  do {  // the integer's 32-bit words, least significant first (0 gives [0])
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed);
  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hc = kInitA;
  for (int i = 0; i < kPoolSize; ++i) pool[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0, hc);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hc));
  for (size_t src = kPoolSize; src < entropy.size(); ++src)
    for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src], hc));

  std::array<uint32_t, 8> words{};
  uint32_t hb = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    words[i] = v ^ (v >> 16);
  }
  std::array<uint64_t, 4> out{};
  for (int i = 0; i < 4; ++i) out[i] = words[2 * i] | (static_cast<uint64_t>(words[2 * i + 1]) << 32);
  return out;
}

class Pcg64 {
 public:
  explicit Pcg64(const std::array<uint64_t, 4>& s) {
    const u128 initstate = (static_cast<u128>(s[0]) << 64) | s[1];
    const u128 initseq = (static_cast<u128>(s[2]) << 64) | s[3];
    inc_ = (initseq << 1) | 1;
    state_ = 0;
    step();
    state_ += initstate;
    step();
  }
  uint64_t next64() {
    step();
    const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }

 private:
  void step() {
    constexpr u128 kMult = (static_cast<u128>(2549297995355413924ULL) << 64) | 4865540595714422341ULL;
    state_ = state_ * kMult + inc_;
  }
  u128 state_, inc_;
};

// A draw in [0, rng] (inclusive), rng >= 2^32 - 1 not all-ones: Lemire's multiply-and-reject.
uint64_t bounded_lemire_uint64(Pcg64& g, uint64_t rng) {
  const uint64_t rng_excl = rng + 1;
  u128 m = static_cast<u128>(g.next64()) * rng_excl;
  uint64_t leftover = static_cast<uint64_t>(m);
  if (leftover < rng_excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<u128>(g.next64()) * rng_excl;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, int count) {
  // numpy draws ranges below 2^32 through a different (buffered 32-bit) path; V4.1's bounds are
  // INT64_MAX / vocab / 2, far above it, so only the 64-bit path is implemented.
  DSINFER_CHECK(high > (int64_t{1} << 32), "numpy_default_rng_integers: high {} needs numpy's 32-bit path", high);
  Pcg64 g(seed_sequence_state(seed));
  const uint64_t rng = static_cast<uint64_t>(high) - 1;  // inclusive range above 0
  std::vector<int64_t> out(count);
  for (int i = 0; i < count; ++i) out[i] = static_cast<int64_t>(bounded_lemire_uint64(g, rng));
  return out;
}

}  // namespace dsinfer
