// `dsinfer train-tokenizer`: a byte-level BPE tokenizer.json in DeepSeek's layout (the release's
// pre-tokenizer and decoder, BOS / EOS / pad first, the chat tokens after the merges) learned from
// a text file; the demo model's tokenizer (tools/train_demo) is made with it.

#include <fmt/format.h>

#include "cli/commands.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/tokenizer.h"
#include "io/tokenizer_vocab.h"
#include "testing/tiny_tokenizer.h"

namespace dsinfer::cli {
namespace {

struct TrainTokenizerOptions {
  std::string text, out;
  int merges = 4096;
};

constexpr int kMaxMerges = 1 << 20;

int run_train_tokenizer(const TrainTokenizerOptions& o) {
  if (o.merges < 1 || o.merges > kMaxMerges)
    return report_error(
        error(ErrorKind::kInvalidArgument, fmt::format("--merges {}: from 1 to {} merges", o.merges, kMaxMerges)));
  const Result<std::string> content = read_text_file(o.text);
  if (!content.ok()) return report_error(content.status());
  const std::string& text = *content;
  if (text.empty()) return report_error(error(ErrorKind::kInvalidArgument, fmt::format("{}: empty", o.text)));
  // The words as the tokenizer's own pre-tokenizer cuts them (that of a tokenizer with no merges).
  auto bytes_only = Tokenizer::from_json(bpe_tokenizer_json({}, 0), "the pre-tokenizer");
  if (!bytes_only.ok()) return report_error(bytes_only.status());
  WordCounts words;
  for (const std::string_view w : bytes_only->pre_tokenize(text)) ++words[std::string(w)];
  const Json tokenizer = bpe_tokenizer_json(words, o.merges);
  // What the engine will load, checked before anything is written.
  auto vocab = TokenizerVocab::from_json(tokenizer, o.out);
  if (!vocab.ok()) return report_error(vocab.status());
  if (Status s = write_file_atomic(o.out, tokenizer.dump(1) + "\n"); !s.ok()) return report_error(s);
  const size_t learned = tokenizer["model"]["merges"].size();
  fmt::print("wrote {}: {} merges learned from {} bytes{}, {} tokens in all\n", o.out, learned, text.size(),
             learned < static_cast<size_t>(o.merges) ? " (no pair left to merge)" : "", vocab->size());
  return 0;
}

}  // namespace

void register_train_tokenizer(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<TrainTokenizerOptions>();
  CLI::App* cmd = app.add_subcommand("train-tokenizer", "Learn a byte-level BPE tokenizer.json from a text file");
  cmd->add_option("--text", o->text, "Text file to learn from")->required();
  cmd->add_option("--merges", o->merges, "Merges to learn (the vocabulary: 259 + merges + 13 chat tokens)")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "tokenizer.json to write (replaced whole)")->required();
  cmd->callback([o, &result] { result.exit_code = run_train_tokenizer(*o); });
}

}  // namespace dsinfer::cli
