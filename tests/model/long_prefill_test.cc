// Prefill past the tiny config's 4,096 positions, one-shot against pieces (the normal suite's
// short version; long_context_test.cc runs past 128K positions).
#include "model/long_prefill.h"

namespace dsinfer {
namespace {

TEST(LongPrefill, ThousandsOfPositionsInPiecesEqualOneShot) {
  // 5,000 positions: 2,500 ratio-2 and 5,000 ratio-1 compressed ones, far past top-8 and the
  // candidate source's 5 blocks of 2; pieces that cut groups, windows and query blocks.
  testing::expect_long_prefill_invariant({.prompt_len = 5000, .pieces = {1777, 4096}, .query_block = 333});
}

}  // namespace
}  // namespace dsinfer
