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
  // The DSpark drafter after every target forward, as the fixture's forward_spec calls: the
  // prefill's main hidden states seed the rings; each decode forward's drafts from the token the
  // next forward takes. Not with prefill_chunk.
  bool dspark = false;
  // The drafter fed the golden's own main_hidden_prefill / main_hidden_decode and anchors
  // (golden.safetensors of the DSpark fixture) instead of this run's: the drafter alone.
  const SafetensorsFile* main_hidden_from = nullptr;
};

struct GoldenRunResult {
  int64_t batch = 0, forwards = 0, vocab = 0;
  std::vector<float> logits;    // [batch, forwards, vocab]
  std::vector<int32_t> tokens;  // [batch, forwards]: argmax of each forward's logits
  // With dspark, the golden's layout: the Dn = forwards - 1 drafting calls of every row.
  int64_t block = 0, hidden_width = 0;
  std::vector<int32_t> spec_out;             // [batch, Dn, block + 1]
  std::vector<float> spec_base;              // [batch, Dn, block, vocab]
  std::vector<float> spec_confidence;        // [batch, Dn, block]
  std::vector<uint16_t> main_hidden_decode;  // [batch, Dn, hidden_width] bf16: this run's
  SafetensorsWriter debug;                   // stepNN.* tensors laid out as golden_debug.safetensors
};

Result<GoldenRunResult> run_golden_experiment(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                              const GoldenRunOptions& options);

}  // namespace dsinfer
