// A fixture model's prompt of 7 tokens, then single-token decode steps: the run the step-replay
// tests (CPU and GPU) compare with and without the step recorder.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "model/model.h"

namespace dsinfer::testing {

/// Every forward's logits, in order: the prompt's, then each of `steps` decode steps'.
inline std::vector<float> prompt_then_decode(Model& model, int steps) {
  SequenceState seq = model.new_sequence();
  std::vector<float> logits(model.config().vocab_size), all;
  std::vector<ForwardChunk> chunk(1);
  chunk[0].state = &seq;
  chunk[0].tokens = {1, 200, 201, 202, 203, 204, 205};
  chunk[0].prompt_len = 7;
  EXPECT_TRUE(model.forward(chunk, logits).ok());
  all = logits;
  for (int s = 0; s < steps; ++s) {
    chunk[0].start_pos = seq.length, chunk[0].decode = true;
    chunk[0].tokens = {static_cast<int32_t>(17 + 31 * s % 300)};  // ids below both vocabs (384, 512)
    const Status st = model.forward(chunk, logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace dsinfer::testing
