// numpy's default_rng(seed).integers(0, high, size, dtype=int64), reimplemented bit for bit:
// SeedSequence -> PCG64 (XSL-RR) -> Lemire's bounded integers. The reference derives the Engram
// hash multipliers this way (spec §9.4), and every config (the tiny ones too) needs its own.
#pragma once

#include <cstdint>
#include <vector>

namespace dsinfer {

/// `count` draws of numpy.random.default_rng(seed).integers(0, high, size=count, dtype=np.int64);
/// high > 2^32 (the only case V4.1 needs).
std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, int count);

}  // namespace dsinfer
