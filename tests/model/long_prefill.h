// A long prompt's prefill on the tiny model (its every layer kind), one-shot and in pieces: the
// logits of both must be finite and bitwise equal, whatever blocks of queries the indexer takes.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/same_logits.h"
#include "test_util.h"
#include "testing/golden_run.h"
#include "testing/tiny_model.h"

namespace dsinfer::testing {

struct LongPrefillCase {
  int64_t prompt_len;
  std::vector<int64_t> pieces;  // prefill chunk sizes compared with the one-shot prefill
  int64_t query_block = 0;      // > 0: the indexer's query block in the pieces' runs
};

inline void expect_long_prefill_invariant(const LongPrefillCase& c) {
  TempDir dir;
  ASSERT_TRUE(write_tiny_checkpoint(dir.path(), 5, c.prompt_len + 2).ok());
  CpuBackend backend(2);
  LocalCommunicator comm;
  auto model = Model::load(dir.path(), backend, comm);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::mt19937 rng(17);
  std::vector<int32_t> prompt(c.prompt_len);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % (*model)->config().vocab_size);
  GoldenRunOptions o;
  o.steps = 1;  // the prefill and one decode step after it
  auto one_shot = run_golden_experiment(**model, {prompt}, o);
  ASSERT_TRUE(one_shot.ok()) << one_shot.status().to_string();
  for (float v : one_shot->logits) ASSERT_TRUE(std::isfinite(v)) << "one-shot prefill of " << c.prompt_len;
  (*model)->set_indexer_query_block(c.query_block);
  for (int64_t piece : c.pieces) {
    o.prefill_chunk = piece;
    auto chunked = run_golden_experiment(**model, {prompt}, o);
    ASSERT_TRUE(chunked.ok()) << chunked.status().to_string();
    expect_same_logits(*chunked, *one_shot,
                       std::to_string(c.prompt_len) + " positions in pieces of " + std::to_string(piece));
  }
}

}  // namespace dsinfer::testing
