// Single-request text generation over a Model: prefill the prompt, then sample one token per
// step until an end token or the token budget, streaming complete text pieces.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "runtime/sampler.h"

namespace dsinfer {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<int32_t> stop_ids;          // generation ends at one of these tokens (not streamed)
  std::vector<std::string> stop_strings;  // ... or before the first of these texts (never streamed)
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  bool stopped_by_token = false;
  bool stopped_by_string = false;
};

/// kInvalidArgument when the prompt is empty or prompt + max_tokens exceeds the model's max_seq_len.
Result<GenerateStats> generate(Model& model, const Tokenizer& tokenizer, const GenerateRequest& request,
                               const std::function<void(std::string_view)>& on_text);

}  // namespace dsinfer
