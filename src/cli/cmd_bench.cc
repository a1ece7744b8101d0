// `dsinfer bench`: prefill and decode throughput of a model folder for given prompt lengths and
// batch sizes (random prompt tokens, or pieces of --prompt-text; the throughput does not depend on
// the text), and where the checkpoint has the DSpark drafter, greedy decoding of the same prompts
// through the engine, one token a step and speculative: their throughput and the tokens a request
// gains per target step (these do depend on the text: on random weights the drafts are seldom
// accepted; a trained model's are measured on its continuations of real text).
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "chat/chat_tokenize.h"
#include "cli/commands.h"
#include "io/json.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace dsinfer::cli {
namespace {

struct BenchOptions {
  std::string model;
  BackendFlags backend;
  std::vector<int> prompt_lengths = {128};
  std::vector<int> batch_sizes = {1};
  int decode_steps = 16;
  std::string prompt_text;
  SpeculativeFlags speculative;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct EngineRun {
  double tokens_per_second = 0;
  double tokens_per_step = 0;  // a request's generated tokens per target step after its first
};

// The prompts decoded greedily through an engine, `steps` tokens each after the first.
Result<EngineRun> engine_decode(Model& model, const Tokenizer& tok, const std::vector<std::vector<int32_t>>& prompts,
                                int steps, const SpeculativeConfig& speculative) {
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  Engine engine(model, tok,
                {prompt_tokens + static_cast<int64_t>(prompts.size()) * (speculative.draft_tokens + 1),
                 static_cast<int>(prompts.size()), speculative});
  int64_t step = 0;
  std::vector<int64_t> last_step(prompts.size());
  Status failed;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r;
    r.prompt = prompts[i];
    r.sampling.temperature = 0;
    r.max_tokens = steps + 1;
    r.on_output = [&, i](const RequestOutput& out) {
      if (out.finish == FinishReason::kError) failed = error(ErrorKind::kInternal, out.error);
      if (out.finish != FinishReason::kNone) last_step[i] = step;
    };
    DSINFER_RETURN_IF_ERROR(engine.submit(std::move(r)).status());
  }
  engine.step();  // the prompts and the first tokens
  const auto t0 = Clock::now();
  while (engine.step()) ++step;
  const double seconds = since(t0);
  DSINFER_RETURN_IF_ERROR(failed);
  EngineRun run;
  run.tokens_per_second = static_cast<double>(steps) * static_cast<double>(prompts.size()) / seconds;
  for (int64_t s : last_step) run.tokens_per_step += steps / static_cast<double>(s + 1) / prompts.size();
  return run;
}

int run_bench(const BenchOptions& o) {
  auto speculative = speculative_config(o.speculative);
  if (!speculative.ok()) return report_error(speculative.status());
  auto loaded = load_model(o.model, o.backend, "bench");
  if (!loaded.ok()) return report_error(loaded.status());
  Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  const bool speculates = model.has_drafter() && speculative->draft_tokens > 0;
  std::optional<Tokenizer> tok;  // the engine's (its detokenizer), where it runs; --prompt-text's
  std::vector<int32_t> text;     // --prompt-text's tokens, BOS first
  if (speculates || !o.prompt_text.empty()) {
    auto loaded_tok = load_tokenizer(o.model);
    if (!loaded_tok.ok()) return report_error(loaded_tok.status());
    tok = std::move(*loaded_tok);
  }
  if (!o.prompt_text.empty()) {
    const Result<std::string> content = read_text_file(o.prompt_text);
    if (!content.ok()) return report_error(content.status());
    text = with_bos(*tok, tok->encode(*content));
  }
  fmt::print("{:>8} {:>6} {:>14} {:>14} {:>12}", "prompt", "batch", "prefill tok/s", "decode tok/s", "ms/step");
  if (speculates) fmt::print(" {:>16} {:>18} {:>12}", "engine tok/s", "speculative tok/s", "tokens/step");
  fmt::print("\n");
  std::mt19937 rng(1);
  for (int len : o.prompt_lengths)
    for (int batch : o.batch_sizes) {
      if (len + o.decode_steps > c.max_seq_len)
        return report_error(error(ErrorKind::kInvalidArgument, fmt::format("prompt {} + {} steps exceed max_seq_len {}",
                                                                           len, o.decode_steps, c.max_seq_len)));
      std::vector<SequenceState> seqs;
      for (int b = 0; b < batch; ++b) seqs.push_back(model.new_sequence());
      std::vector<ForwardChunk> chunks(batch);
      std::vector<std::vector<int32_t>> prompts(batch);
      if (!text.empty() && static_cast<int64_t>(text.size()) < static_cast<int64_t>(len) * batch)
        return report_error(error(ErrorKind::kInvalidArgument, fmt::format("{}: {} tokens, fewer than {} prompts of {}",
                                                                           o.prompt_text, text.size(), batch, len)));
      for (int b = 0; b < batch; ++b) {
        for (int i = 0; i < len; ++i)
          prompts[b].push_back(text.empty() ? static_cast<int32_t>(rng() % c.vocab_size) : text[b * len + i]);
        chunks[b].state = &seqs[b];
        chunks[b].prompt_len = len;
        chunks[b].tokens = prompts[b];
      }
      std::vector<float> logits(static_cast<size_t>(batch) * c.vocab_size);
      auto t0 = Clock::now();
      if (Status s = model.forward(chunks, logits); !s.ok()) return report_error(s);
      const double prefill = since(t0);
      for (auto& ch : chunks) ch.decode = true, ch.tokens = {1};
      t0 = Clock::now();
      for (int step = 0; step < o.decode_steps; ++step) {
        for (auto& ch : chunks)
          ch.start_pos = ch.state->length, ch.tokens = {static_cast<int32_t>(rng() % c.vocab_size)};
        if (Status s = model.forward(chunks, logits); !s.ok()) return report_error(s);
      }
      const double decode = since(t0);
      fmt::print("{:>8} {:>6} {:>14.1f} {:>14.2f} {:>12.2f}", len, batch, len * batch / prefill,
                 o.decode_steps * batch / decode, 1e3 * decode / o.decode_steps);
      if (speculates) {
        seqs.clear();  // the engine's requests take the caches
        auto plain = engine_decode(model, *tok, prompts, o.decode_steps, {});
        auto run = engine_decode(model, *tok, prompts, o.decode_steps, *speculative);
        if (!plain.ok() || !run.ok()) return report_error(plain.ok() ? run.status() : plain.status());
        fmt::print(" {:>16.2f} {:>18.2f} {:>12.2f}", plain->tokens_per_second, run->tokens_per_second,
                   run->tokens_per_step);
      }
      fmt::print("\n");
    }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill and decode throughput for prompt lengths x batch sizes");
  cmd->add_option("--model", o->model, "Model folder")->required();
  cmd->add_option("--prompt-lengths", o->prompt_lengths, "Prompt lengths")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch-sizes", o->batch_sizes, "Batch sizes")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--decode-steps", o->decode_steps, "Decode steps timed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prompt-text", o->prompt_text,
                  "Cut the prompts from this text file (tokenized, BOS first: prompt i is its tokens i x length "
                  "onwards) instead of random tokens");
  add_speculative_flags(cmd, o->speculative);
  add_backend_flags(cmd, o->backend);
  cmd->callback([o, &result] { result.exit_code = run_bench(*o); });
}

}  // namespace dsinfer::cli
