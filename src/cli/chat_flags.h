// Flags and terminal output shared by `generate` and `chat`: sampling, chat mode, and a printer
// that shows the reasoning apart from the answer.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "chat/chat_stream.h"
#include "cli/commands.h"
#include "core/status.h"
#include "io/tokenizer.h"
#include "runtime/generate.h"

namespace dsinfer::cli {

struct SamplingFlags {
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<std::string> stop;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
  SpeculativeFlags speculative;
};
void add_sampling_flags(CLI::App* cmd, SamplingFlags& f);
/// The request for `prompt` with these flags; the tokenizer's end-of-sentence token stops it.
EngineRequest make_request(const Tokenizer& tok, std::vector<int32_t> prompt, const SamplingFlags& f);

struct ChatFlags {
  std::string system;
  bool no_thinking = false;
  std::string reasoning_effort = "high";
  std::string tools_file;  // OpenAI `tools` JSON
};
void add_chat_flags(CLI::App* cmd, ChatFlags& f);
Result<ChatOptions> chat_options(const ChatFlags& f);

/// Streams a completion to stdout through ChatStreamParser: the reasoning first (dimmed on a
/// terminal, under a "[reasoning]" heading otherwise), then the answer, then any tool calls.
class ReasoningPrinter {
 public:
  explicit ReasoningPrinter(bool thinking);
  void push(std::string_view piece);
  void finish();                                     // prints what was held back and the tool calls, and ends the line
  const std::string& text() const { return text_; }  // everything received

 private:
  void print(const ChatStreamParser::Delta& d);
  ChatStreamParser parser_;
  bool color_;
  enum class Section { kNone, kReasoning, kAnswer } section_ = Section::kNone;
  std::string text_;
};

/// "prompt N tokens, prefill X tok/s; generated M tokens, decode Y tok/s" on stderr.
void print_timings(const GenerateStats& s);

}  // namespace dsinfer::cli
