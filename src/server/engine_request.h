// A validated API request -> the engine's request (the prompt's tokens, budget, stop ids).
#pragma once

#include <cstdint>

#include "io/tokenizer.h"
#include "runtime/engine.h"
#include "server/openai_schema.h"

namespace dsinfer::server {

/// The engine request of `r`: kInvalidArgument when the prompt leaves no room in `context` tokens.
Result<EngineRequest> engine_request(const CompletionRequest& r, const Tokenizer& tok, int64_t context);

}  // namespace dsinfer::server
