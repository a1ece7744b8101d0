// Fixture models' prompts, then decode steps of all their sequences together: the run the
// step-replay tests (CPU and GPU) compare with and without the step recorder.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "runtime/model_runner.h"

namespace dsinfer::testing {

/// Every forward's logits, in order: `sequences` prompts (7, 10, 13, ... tokens, so the sequences
/// sit at other positions), each prefilled alone, then `steps` decode steps of one token per
/// sequence, all sequences in one forward.
inline std::vector<float> prompts_then_decode(ModelRunner& runner, int steps, int sequences = 1) {
  Model& model = runner.model();
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  std::vector<SequenceState> seqs;
  std::vector<float> all, logits(vocab);
  for (int q = 0; q < sequences; ++q) {
    seqs.push_back(model.new_sequence());
    std::vector<ForwardChunk> prompt(1);
    prompt[0].state = &seqs.back();
    prompt[0].tokens = {1};
    for (int t = 1; t < 7 + 3 * q; ++t) prompt[0].tokens.push_back(199 + t + 11 * q);
    prompt[0].prompt_len = static_cast<int64_t>(prompt[0].tokens.size());
    EXPECT_TRUE(runner.forward(prompt, logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  std::vector<ForwardChunk> step(sequences);
  logits.resize(sequences * vocab);
  for (int s = 0; s < steps; ++s) {
    for (int q = 0; q < sequences; ++q) {
      step[q].state = &seqs[q], step[q].start_pos = seqs[q].length, step[q].decode = true;
      step[q].tokens = {static_cast<int32_t>(17 + (31 * s + 7 * q) % 300)};  // ids below both vocabs (384, 512)
    }
    const Status st = runner.forward(step, logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace dsinfer::testing
