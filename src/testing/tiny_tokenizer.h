// A small byte-level BPE tokenizer.json in DeepSeek's layout, trained on a built-in English text,
// for the tiny demo/test checkpoint that `dsinfer make-tiny` writes.
#pragma once

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

/// tokenizer.json with ids 0..2 = BOS/EOS/pad, then the 256 byte tokens, then `n_merges` learned
/// merges, then the added chat tokens. Deterministic.
Json make_tiny_tokenizer_json(int n_merges);

}  // namespace dsinfer
