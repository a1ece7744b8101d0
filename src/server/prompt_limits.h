// A cheap refusal of prompts that cannot fit the context, made before the chat template is
// rendered and the text tokenized: no token covers more than the tokenizer's max_token_bytes(),
// so a text of more than context x max_token_bytes bytes needs more tokens than the context holds.
// Tokenizing such a text first (the probe's 50 MB body took 7 s of CPU and 700 MB) is what it saves.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "io/tokenizer.h"
#include "server/openai_schema.h"

namespace dsinfer::server {

/// The bytes of the request's text that the prompt holds verbatim: the prompt (completions), or
/// every message's content (chat; reasoning is left out, the template drops some of it).
int64_t prompt_text_bytes(const CompletionRequest& r);

/// kInvalidArgument naming both numbers when prompt_text_bytes(r) > context x max_token_bytes.
Status check_prompt_bytes(const CompletionRequest& r, const Tokenizer& tok, int64_t context);

}  // namespace dsinfer::server
