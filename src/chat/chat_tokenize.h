// A chat prompt's token ids: the template's control pieces with the tokenizer's added tokens
// matched, a client's text pieces as plain text, so that text typed in a message (`<｜User｜>`,
// `</think>`, `<｜end▁of▁sentence｜>`, ...) can never become a control id and forge a turn.
#pragma once

#include <cstdint>
#include <vector>

#include "chat/chat_format.h"
#include "io/tokenizer.h"

namespace dsinfer {

std::vector<int32_t> tokenize_prompt(const Tokenizer& tokenizer, const ChatPrompt& prompt);

/// A plain-text prompt's ids with BOS first, as the official encoder's add_default_bos_token
/// writes it: unchanged when they already start with BOS (a client that wrote it) or when the
/// tokenizer has no BOS token.
std::vector<int32_t> with_bos(const Tokenizer& tokenizer, std::vector<int32_t> ids);

}  // namespace dsinfer
