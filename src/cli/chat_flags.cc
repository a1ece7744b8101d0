#include "cli/chat_flags.h"

#include <unistd.h>

#include <cstdio>

#include "chat/chat_json.h"
#include "io/json.h"

namespace dsinfer::cli {
namespace {

constexpr std::string_view kDim = "\x1b[2m", kReset = "\x1b[0m";

}  // namespace

void add_sampling_flags(CLI::App* cmd, SamplingFlags& f) {
  cmd->add_option("--max-tokens", f.max_tokens, "Most tokens to generate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", f.sampling.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", f.sampling.top_k, "0 = off")->capture_default_str();
  cmd->add_option("--top-p", f.sampling.top_p, "Nucleus mass")->capture_default_str();
  cmd->add_option("--min-p", f.sampling.min_p, "Relative probability floor")->capture_default_str();
  cmd->add_option("--repetition-penalty", f.sampling.repetition_penalty)->capture_default_str();
  cmd->add_option("--frequency-penalty", f.sampling.frequency_penalty)->capture_default_str();
  cmd->add_option("--presence-penalty", f.sampling.presence_penalty)->capture_default_str();
  cmd->add_option("--stop", f.stop, "Stop before this text (repeatable)");
  f.seed_option = cmd->add_option("--seed", f.seed, "Sampling seed (reproducible output)");
  add_speculative_flags(cmd, f.speculative);
}

EngineRequest make_request(const Tokenizer& tok, std::vector<int32_t> prompt, const SamplingFlags& f) {
  EngineRequest req;
  req.prompt = std::move(prompt);
  req.sampling = f.sampling;
  if (f.seed_option && f.seed_option->count()) req.sampling.seed = f.seed;
  req.max_tokens = f.max_tokens;
  req.stop_strings = f.stop;
  if (auto eos = tok.vocab().id_of(chat_tokens::kEos)) req.stop_ids.push_back(*eos);
  return req;
}

void add_chat_flags(CLI::App* cmd, ChatFlags& f) {
  cmd->add_option("--system", f.system, "System prompt");
  cmd->add_flag("--no-thinking", f.no_thinking, "Chat mode: answer without reasoning first");
  cmd->add_option("--reasoning-effort", f.reasoning_effort, "low (50), high (75), max (100) or 1-100 (thinking mode)")
      ->capture_default_str();
  cmd->add_option("--tools", f.tools_file, "JSON file of OpenAI-style tool definitions");
}

Result<ChatOptions> chat_options(const ChatFlags& f) {
  ChatOptions o;
  o.thinking = !f.no_thinking;
  DSINFER_ASSIGN_OR_RETURN(o.reasoning_effort, parse_reasoning_effort(f.reasoning_effort));
  if (!f.tools_file.empty()) {
    DSINFER_ASSIGN_OR_RETURN(const std::string text, read_text_file(f.tools_file));
    DSINFER_ASSIGN_OR_RETURN(OrderedJson tools, parse_ordered_json(text, f.tools_file));
    auto specs = tool_specs_from_json(tools);
    if (!specs.ok()) return error(ErrorKind::kInvalidArgument, f.tools_file + ": " + specs.status().message());
    o.tools = std::move(*specs);
  }
  return o;
}

ReasoningPrinter::ReasoningPrinter(bool thinking) : parser_(thinking), color_(isatty(STDOUT_FILENO) != 0) {}

void ReasoningPrinter::print(const ChatStreamParser::Delta& d) {
  if (!d.reasoning.empty()) {
    if (section_ == Section::kNone) std::fputs(color_ ? kDim.data() : "[reasoning]\n", stdout);
    section_ = Section::kReasoning;
    std::fputs(d.reasoning.c_str(), stdout);
  }
  if (!d.content.empty()) {
    if (section_ == Section::kReasoning) std::fputs(color_ ? "\x1b[0m\n\n" : "\n[answer]\n", stdout);
    section_ = Section::kAnswer;
    std::fputs(d.content.c_str(), stdout);
  }
  std::fflush(stdout);
}

void ReasoningPrinter::push(std::string_view piece) {
  text_ += piece;
  print(parser_.push(piece));
}

void ReasoningPrinter::finish() {
  std::vector<ToolCall> calls;
  print(parser_.finish(&calls));
  if (section_ == Section::kReasoning && color_) std::fputs(kReset.data(), stdout);
  for (const ToolCall& c : calls) std::printf("\n[tool call] %s %s", c.name.c_str(), c.arguments.c_str());
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void print_timings(const GenerateStats& s) {
  std::fprintf(stderr, "prompt %ld tokens, prefill %.1f tok/s; generated %ld tokens, decode %.2f tok/s%s\n",
               static_cast<long>(s.prompt_tokens), s.prompt_tokens / std::max(s.prefill_seconds, 1e-9),
               static_cast<long>(s.generated_tokens), s.generated_tokens / std::max(s.decode_seconds, 1e-9),
               s.stopped_by_token    ? " (stopped at the end token)"
               : s.stopped_by_string ? " (stopped at a stop string)"
                                     : "");
  if (s.verify_steps > 0)
    std::fprintf(stderr, "speculative: %ld verify steps, %ld of %ld drafts accepted, %.2f tokens a step\n",
                 static_cast<long>(s.verify_steps), static_cast<long>(s.accepted_tokens),
                 static_cast<long>(s.drafted_tokens), 1.0 + static_cast<double>(s.accepted_tokens) / s.verify_steps);
}

}  // namespace dsinfer::cli
