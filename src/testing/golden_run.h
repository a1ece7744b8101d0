// The experiment of the golden fixtures, as the reference's generate() runs it: one prefill of
// the shortest prompt length, then one token per forward (prompt tokens while a row is still in
// its prompt, else the greedy token), recording every forward's last-position logits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/model.h"

namespace dsinfer {

struct GoldenRunOptions {
  int steps = 0;                                  // decode forwards after the prefill
  const SafetensorsFile* force_tokens = nullptr;  // golden.safetensors: forward k+1 takes tokens[:, k]
  const SafetensorsFile* replay = nullptr;        // golden_debug.safetensors: selections to replay
  bool dump_debug = false;
  // > 0: the prefill in forwards of this many tokens (the last may be shorter), as a server with a
  // token budget runs it; its logits are the last piece's. Not with replay or dump_debug, whose
  // layouts are the one-shot prefill's.
  int64_t prefill_chunk = 0;
};

struct GoldenRunResult {
  int64_t batch = 0, forwards = 0, vocab = 0;
  std::vector<float> logits;    // [batch, forwards, vocab]
  std::vector<int32_t> tokens;  // [batch, forwards]: argmax of each forward's logits
  SafetensorsWriter debug;      // stepNN.* tensors laid out as golden_debug.safetensors
};

Result<GoldenRunResult> run_golden_experiment(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                              const GoldenRunOptions& options);

}  // namespace dsinfer
