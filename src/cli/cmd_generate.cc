// `dsinfer generate`: streams a completion of a prompt to stdout, then a line of timings to stderr.
// With --chat the prompt is one user message in the chat encoding and the reasoning is shown
// apart from the answer.

#include <fmt/format.h>

#include "chat/chat_tokenize.h"
#include "cli/chat_flags.h"
#include "cli/commands.h"
#include "io/json.h"

namespace dsinfer::cli {
namespace {

struct GenerateOptions {
  std::string model, prompt, prompt_file;
  BackendFlags backend;
  bool chat = false, no_bos = false;
  SamplingFlags sampling;
  ChatFlags chat_flags;
};

int run_generate(GenerateOptions o) {
  if (!o.prompt_file.empty()) {
    Result<std::string> content = read_text_file(o.prompt_file);
    if (!content.ok()) return report_error(content.status());
    o.prompt = std::move(*content);
  }
  auto chat = chat_options(o.chat_flags);
  if (!chat.ok()) return report_error(chat.status());
  ChatPrompt prompt;
  if (o.chat) {
    std::vector<ChatMessage> messages;
    if (!o.chat_flags.system.empty()) messages.push_back(make_message(ChatRole::kSystem, o.chat_flags.system));
    messages.push_back(make_message(ChatRole::kUser, o.prompt));
    auto rendered = encode_chat(messages, *chat);
    if (!rendered.ok()) return report_error(rendered.status());
    prompt = std::move(*rendered);
  }
  auto tok = load_tokenizer(o.model);
  if (!tok.ok()) return report_error(tok.status());
  // Without --chat the prompt is the user's whole text, special tokens included.
  // Without --chat: BOS first as the official encoder writes it (unless the text starts with one).
  std::vector<int32_t> ids = o.chat     ? tokenize_prompt(*tok, prompt)
                             : o.no_bos ? tok->encode(o.prompt)
                                        : with_bos(*tok, tok->encode(o.prompt));
  auto speculative = speculative_config(o.sampling.speculative);
  if (!speculative.ok()) return report_error(speculative.status());
  auto model = load_model(o.model, o.backend, "generate", /*several_ranks=*/true);
  if (!model.ok()) return report_error(model.status());
  ReasoningPrinter printer(o.chat && chat->thinking);
  auto stats = generate(
      *model->model, *tok, make_request(*tok, std::move(ids), o.sampling),
      [&](std::string_view piece) { printer.push(piece); }, *speculative);
  if (!stats.ok()) return report_error(stats.status());
  printer.finish();  // the text ends before the timing line on a shared terminal
  // Under mpirun every rank generates the same text; rank 0's timing line stands for the job.
  if (model->comm->rank() == 0) print_timings(*stats);
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Complete a prompt, streaming the text");
  cmd->add_option("--model", o->model, "Model folder")->required();
  auto* p = cmd->add_option("--prompt", o->prompt, "Prompt text");
  auto* pf = cmd->add_option("--prompt-file", o->prompt_file, "File holding the prompt text");
  p->excludes(pf);
  auto* chat = cmd->add_flag("--chat", o->chat, "Send the prompt as a user message in the chat encoding");
  cmd->add_flag("--no-bos", o->no_bos, "Without --chat: do not put BOS before the prompt")->excludes(chat);
  add_sampling_flags(cmd, o->sampling);
  add_chat_flags(cmd, o->chat_flags);
  add_backend_flags(cmd, o->backend);
  cmd->callback([o, &result, p, pf] {
    if (!p->count() && !pf->count()) {
      result.exit_code = usage_error("generate needs --prompt or --prompt-file (see dsinfer generate --help)");
      return;
    }
    result.exit_code = run_generate(*o);
  });
}

}  // namespace dsinfer::cli
