// A byte-level BPE tokenizer.json in DeepSeek's layout: trained on a built-in English text for the
// tiny demo/test checkpoint that `dsinfer make-tiny` writes, or on any text (`dsinfer
// train-tokenizer`, the demo model's tokenizer).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/json.h"

namespace dsinfer {

/// Token texts the tiny tokenizer adds after its BPE vocabulary (chat roles, thinking tags, the
/// image placeholder), so the chat format and config ids work as with the release tokenizer.
struct TinyTokenizerSpecials {
  static constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
  static constexpr const char* kEos = "<｜end▁of▁sentence｜>";
  static constexpr const char* kPad = "<｜▁pad▁｜>";
  static constexpr const char* kSystem = "<｜System｜>";
  static constexpr const char* kImage = "<｜deepseek_image｜>";
};

/// Words (their bytes, as the pre-tokenizer cut them) and how often each occurs.
using WordCounts = std::map<std::string, int64_t>;

/// tokenizer.json with ids 0..2 = BOS/EOS/pad, then the 256 byte tokens, then up to `n_merges`
/// merges learned from `words` by BPE (fewer where no pair is left; ties go to the pair of smaller
/// texts), then the added chat tokens. Deterministic.
Json bpe_tokenizer_json(const WordCounts& words, int n_merges);
/// bpe_tokenizer_json on the built-in text's words.
Json make_tiny_tokenizer_json(int n_merges);
/// `tokenizer` with plain vocabulary tokens " t<id>" added after its last id until it has
/// `vocab_size` ids: no merge makes them, so text encodes as before, but every id a model of that
/// vocabulary can pick decodes to text (a benchmark model's random head picks any id).
Json pad_tokenizer_vocab(Json tokenizer, int64_t vocab_size);

}  // namespace dsinfer
