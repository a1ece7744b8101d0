// A validated API request -> the engine's request: the prompt rendered and tokenized, the budget,
// the stop ids and a forced tool-call opening.
#include "server/engine_request.h"

#include <algorithm>

#include <fmt/format.h>

#include "chat/chat_tokenize.h"

namespace dsinfer::server {

// The engine request of a validated API request: the prompt's tokens (rendered through the chat
// encoding for chat), the end token, the budget (all the context that is left by default), and a
// forced calls-block opening for a required tool call: right after the prompt in chat mode, after
// `</think>` in thinking mode.
// A chat prompt is tokenized piece by piece (chat_tokenize.h): text from the request never becomes
// a control id. A /v1/completions prompt is the client's whole prompt, special tokens included.
Result<EngineRequest> engine_request(const CompletionRequest& r, const Tokenizer& tok, int64_t context) {
  EngineRequest e;
  if (r.chat) {
    DSINFER_ASSIGN_OR_RETURN(ChatPrompt prompt, encode_chat(r.messages, r.chat_options));
    e.prompt = tokenize_prompt(tok, prompt);
  } else {
    e.prompt = r.add_bos ? with_bos(tok, tok.encode(r.prompt)) : tok.encode(r.prompt);
  }
  const int64_t room = context - static_cast<int64_t>(e.prompt.size());
  if (room < 1)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("the prompt is {} tokens; the context is {}", e.prompt.size(), context));
  e.max_tokens = static_cast<int>(std::min<int64_t>(r.max_tokens.value_or(room), room));
  e.sampling = r.sampling;
  e.stop_strings = r.stop;
  e.logprobs = r.logprobs;
  if (auto eos = tok.vocab().id_of(chat_tokens::kEos)) e.stop_ids.push_back(*eos);
  if (r.tool_required) {
    e.forced.tokens = tokenize_prompt(tok, forced_tool_call_opening(r.forced_tool));
    if (r.chat_options.thinking) {
      const auto think_end = tok.vocab().id_of(chat_tokens::kThinkEnd);
      if (!think_end)
        return error(ErrorKind::kInvalidArgument,
                     "tool_choice: the tokenizer has no </think> token to force a call after");
      e.forced.after_token = *think_end;
    }
  }
  return e;
}

}  // namespace dsinfer::server
