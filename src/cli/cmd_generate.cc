// `dsinfer generate`: streams a completion of a prompt to stdout, then a line of timings to stderr.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "runtime/generator.h"

namespace dsinfer::cli {
namespace {

struct GenerateOptions {
  std::string model, prompt, prompt_file;
  int max_tokens = 128, threads = 0;
  SamplingParams sampling;
  std::vector<std::string> stop;
  uint64_t seed = 0;
  bool has_seed = false;
};

int run_generate(GenerateOptions o) {
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) return report_error(error(ErrorKind::kNotFound, fmt::format("{}: cannot open", o.prompt_file)));
    std::ostringstream ss;
    ss << in.rdbuf();
    o.prompt = ss.str();
  }
  if (o.has_seed) o.sampling.seed = o.seed;
  auto tok = Tokenizer::load(std::filesystem::path(o.model) / "tokenizer.json");
  if (!tok.ok()) return report_error(tok.status());
  auto model = load_cpu_model(o.model, o.threads);
  if (!model.ok()) return report_error(model.status());
  GenerateRequest req;
  req.prompt = tok->encode(o.prompt);
  req.sampling = o.sampling;
  req.max_tokens = o.max_tokens;
  req.stop_strings = o.stop;
  if (auto eos = tok->vocab().id_of("<｜end▁of▁sentence｜>")) req.stop_ids.push_back(*eos);
  auto stats = generate(*model->model, *tok, req, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  if (!stats.ok()) return report_error(stats.status());
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the text ends before the timing line on a shared terminal
  std::fprintf(stderr, "prompt %ld tokens, prefill %.1f tok/s; generated %ld tokens, decode %.2f tok/s%s\n",
               static_cast<long>(stats->prompt_tokens), stats->prompt_tokens / std::max(stats->prefill_seconds, 1e-9),
               static_cast<long>(stats->generated_tokens),
               stats->generated_tokens / std::max(stats->decode_seconds, 1e-9),
               stats->stopped_by_token    ? " (stopped at the end token)"
               : stats->stopped_by_string ? " (stopped at a stop string)"
                                          : "");
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
  cmd->add_option("--max-tokens", o->max_tokens, "Most tokens to generate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", o->sampling.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "0 = off")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus mass")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Relative probability floor")->capture_default_str();
  cmd->add_option("--repetition-penalty", o->sampling.repetition_penalty)->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty)->capture_default_str();
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty)->capture_default_str();
  cmd->add_option("--stop", o->stop, "Stop before this text (repeatable)");
  auto* seed = cmd->add_option("--seed", o->seed, "Sampling seed (reproducible output)");
  cmd->add_option("--threads", o->threads, "CPU threads (default: all)");
  cmd->callback([o, &result, p, pf, seed] {
    if (!p->count() && !pf->count()) {
      result.exit_code = usage_error("generate needs --prompt or --prompt-file (see dsinfer generate --help)");
      return;
    }
    o->has_seed = seed->count() > 0;
    result.exit_code = run_generate(*o);
  });
}

}  // namespace dsinfer::cli
