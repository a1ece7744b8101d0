// `dsinfer chat`: an interactive multi-turn conversation in the V4.1 chat encoding. Each turn
// re-renders the whole conversation (as the reference's interactive mode does); the reasoning is
// shown apart from the answer and kept out of later turns' prompts by the encoding's rules.
// Lines starting with / are commands: /reset, /exit (end of input also exits).
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "chat/chat_tokenize.h"
#include "cli/chat_flags.h"
#include "cli/commands.h"

namespace dsinfer::cli {
namespace {

struct ChatCommandOptions {
  std::string model;
  BackendFlags backend;
  SamplingFlags sampling;
  ChatFlags chat;
};

std::vector<ChatMessage> initial_messages(const ChatFlags& f) {
  if (f.system.empty()) return {};
  return {make_message(ChatRole::kSystem, f.system)};
}

int run_chat(const ChatCommandOptions& o) {
  auto options = chat_options(o.chat);
  if (!options.ok()) return report_error(options.status());
  auto speculative = speculative_config(o.sampling.speculative);
  if (!speculative.ok()) return report_error(speculative.status());
  auto tok = Tokenizer::load(std::filesystem::path(o.model) / "tokenizer.json");
  if (!tok.ok()) return report_error(tok.status());
  auto model = load_model(o.model, o.backend, "chat");
  if (!model.ok()) return report_error(model.status());
  const bool interactive = isatty(STDIN_FILENO) != 0;
  if (interactive) std::fputs("dsinfer chat: /reset starts over, /exit (or Ctrl-D) quits\n", stderr);
  std::vector<ChatMessage> messages = initial_messages(o.chat);
  std::string line;
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      messages = initial_messages(o.chat);
      std::fputs("(conversation cleared)\n", stdout);
      continue;
    }
    if (line.starts_with("/")) {
      std::fprintf(stderr, "unknown command %s: /reset starts over, /exit quits\n", line.c_str());
      continue;
    }
    if (line.empty()) continue;
    if (!interactive) std::printf("> %s\n", line.c_str());  // a transcript when the turns are piped in
    messages.push_back(make_message(ChatRole::kUser, line));
    auto prompt = encode_chat(messages, *options);
    if (!prompt.ok()) {
      report_error(prompt.status());
      messages.pop_back();
      continue;
    }
    ReasoningPrinter printer(options->thinking);
    auto stats = generate(
        *model->model, *tok, make_request(*tok, tokenize_prompt(*tok, *prompt), o.sampling),
        [&](std::string_view piece) { printer.push(piece); }, *speculative);
    if (!stats.ok()) {  // e.g. the conversation outgrew the context: this turn is dropped
      printer.finish();
      report_error(stats.status());
      std::fputs("(the turn was dropped; /reset starts a new conversation)\n", stderr);
      messages.pop_back();
      continue;
    }
    printer.finish();
    print_timings(*stats);
    ParsedCompletion reply = parse_completion(printer.text(), options->thinking);
    ChatMessage assistant =
        make_message(ChatRole::kAssistant, std::move(reply.content), std::move(reply.reasoning_content));
    assistant.tool_calls = std::move(reply.tool_calls);
    for (size_t i = 0; i < assistant.tool_calls.size(); ++i) assistant.tool_calls[i].id = "call_" + std::to_string(i);
    messages.push_back(std::move(assistant));
  }
  return 0;
}

}  // namespace

void register_chat(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<ChatCommandOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Talk with the model (reads turns from stdin; /reset, /exit)");
  cmd->add_option("--model", o->model, "Model folder")->required();
  add_sampling_flags(cmd, o->sampling);
  add_chat_flags(cmd, o->chat);
  add_backend_flags(cmd, o->backend);
  cmd->callback([o, &result] { result.exit_code = run_chat(*o); });
}

}  // namespace dsinfer::cli
