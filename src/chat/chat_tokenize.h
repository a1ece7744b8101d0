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

}  // namespace dsinfer
