// One request through an engine of its own, streaming its text: the CLI's `generate` and `chat`.
// It is the server's Engine (one generation loop: sampling, stop strings and detokenizing live
// there) with a single request and a token budget of the whole prompt, so the prompt is prefilled
// in one piece.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "core/status.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace dsinfer {

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;  // the first step (prompt and first token), the rest
  bool stopped_by_token = false;
  bool stopped_by_string = false;
  int64_t drafted_tokens = 0, accepted_tokens = 0, verify_steps = 0;  // speculative decoding (EngineStats)
};

/// The request's errors (kInvalidArgument: an empty prompt, bad sampling, prompt + max_tokens past
/// the context), or kInternal naming what failed in a step; `request.on_output` is not used.
/// `speculative`: its speculative decoding (off by default).
Result<GenerateStats> generate(Model& model, const Tokenizer& tokenizer, EngineRequest request,
                               const std::function<void(std::string_view)>& on_text,
                               const SpeculativeConfig& speculative = {});

}  // namespace dsinfer
