// `dsinfer perplexity`: a text file's perplexity under the model (runtime/perplexity.h), BOS
// first as the official encoder writes it, in windows of --context positions.
#include <chrono>

#include <fmt/format.h>

#include "chat/chat_tokenize.h"
#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "io/json.h"
#include "runtime/perplexity.h"

namespace dsinfer::cli {
namespace {

struct PerplexityOptions {
  std::string model, text;
  BackendFlags backend;
  int64_t context = 4096;
  bool no_bos = false;
};

// Pieces a window is prefilled in: every token's logits, so a piece's rows x the vocabulary.
constexpr int64_t kPieceTokens = 512;

int run_perplexity(const PerplexityOptions& o) {
  const Result<std::string> text = read_text_file(o.text);
  if (!text.ok()) return report_error(text.status());
  auto tok = load_tokenizer(o.model);
  if (!tok.ok()) return report_error(tok.status());
  const std::vector<int32_t> ids = o.no_bos ? tok->encode(*text) : with_bos(*tok, tok->encode(*text));
  auto loaded = load_model(o.model, o.backend, "perplexity");
  if (!loaded.ok()) return report_error(loaded.status());
  Model& model = *loaded->model;
  const int64_t window = std::min<int64_t>(o.context, model.config().max_seq_len);
  const auto t0 = std::chrono::steady_clock::now();
  Result<PerplexityResult> r = [&] {
    ProgressBar bar("perplexity");
    return perplexity(model, ids, window, kPieceTokens,
                      [&](int64_t done, int64_t total) { bar.update(static_cast<uint64_t>(done), total); });
  }();
  if (!r.ok()) return report_error(r.status());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "perplexity {:.4f} over {} tokens (mean negative log-likelihood {:.6f}; windows of {} positions), "
      "{:.1f} tokens/s\n",
      r->perplexity(), r->predicted, r->nll_sum / static_cast<double>(r->predicted), window,
      static_cast<double>(r->predicted) / seconds);
  return 0;
}

}  // namespace

void register_perplexity(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "A text file's perplexity under the model");
  cmd->add_option("--model", o->model, "Model folder")->required();
  cmd->add_option("--text", o->text, "Text file")->required();
  cmd->add_option("--context", o->context, "Positions a window holds (at most the model's context)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 40));
  cmd->add_flag("--no-bos", o->no_bos, "Do not put BOS before the text");
  add_backend_flags(cmd, o->backend);
  cmd->callback([o, &result] { result.exit_code = run_perplexity(*o); });
}

}  // namespace dsinfer::cli
