// Past 128K positions (label `long`: 20 minutes on a 2-core CPU, not in CI's suite; run with
// `ctest -L long`): a 132,000-token prompt of the tiny model in pieces of 65,537 tokens gives
// finite logits bitwise equal to the one-shot prefill's, whose indexer takes its queries in
// blocks bounded by Model::kIndexerScoreBytes.
#include "model/long_prefill.h"

namespace dsinfer {
namespace {

TEST(LongContext, Past128KPositionsInPiecesEqualOneShot) {
  testing::expect_long_prefill_invariant({.prompt_len = 132000, .pieces = {65537}});
}

}  // namespace
}  // namespace dsinfer
