// Tokenizer: Hugging Face tokenizer.json as DeepSeek ships it — added tokens matched in the raw
// text first (leftmost-longest), then the pre-tokenizer (a Sequence of regex Splits with PCRE2 in
// Unicode mode, then ByteLevel), then byte-level BPE by merge rank (heap-based: no quadratic
// rescans), and the ByteLevel decoder. Ids equal HF `tokenizers` with add_special_tokens=False.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "io/json.h"
#include "io/tokenizer_vocab.h"

namespace dsinfer {

class Tokenizer {
 public:
  static Result<Tokenizer> load(const std::filesystem::path& tokenizer_json);
  static Result<Tokenizer> from_json(const Json& j, std::string_view what);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text) const;
  /// `text` as if the tokenizer had no added tokens (the pre-tokenizer and BPE only): text from a
  /// client, where a typed `<｜User｜>` must stay plain text and never become a control id.
  std::vector<int32_t> encode_plain(std::string_view text) const;
  /// A text made of segments, added tokens matched only inside the segments that allow them
  /// (a template's own control text). The plain text between two matched added tokens is
  /// pre-tokenized and merged as one run across segment boundaries, so a text whose plain segments
  /// hold no added token gets exactly encode() of the joined text.
  struct Segment {
    std::string_view text;
    bool match_added = false;
  };
  std::vector<int32_t> encode_segments(std::span<const Segment> segments) const;
  /// The pieces the pre-tokenizer cuts plain text into (views of `text`, in order): what BPE then
  /// merges within, each on its own (what a BPE trainer counts as words).
  std::vector<std::string_view> pre_tokenize(std::string_view text) const;
  /// The text of `ids` (added tokens as their content); invalid UTF-8 from partial characters
  /// becomes U+FFFD as in HF.
  std::string decode(std::span<const int32_t> ids) const;
  /// The raw bytes of `ids` (no U+FFFD replacement): what a streaming detokenizer accumulates.
  std::string decode_bytes(std::span<const int32_t> ids) const;
  const TokenizerVocab& vocab() const { return vocab_; }
  /// The most bytes any single token id decodes to (added tokens included), found at load: a text
  /// of n bytes needs at least n / max_token_bytes() tokens, whatever the merges do.
  int64_t max_token_bytes() const { return max_token_bytes_; }

 private:
  Tokenizer() = default;
  struct Regexes;
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

  TokenizerVocab vocab_;
  std::unique_ptr<Regexes> regexes_;  // the pre-tokenizer's Split patterns, in order
  // The merges as an open-addressing table keyed by (left id << 32 | right id): BPE looks up every
  // adjacent pair, so this lookup is the tokenizer's inner loop.
  struct Merge {
    uint64_t key = ~uint64_t{0};  // empty slot
    int32_t rank = 0, id = 0;     // the merge's priority and the id of the merged token
  };
  const Merge* find_merge(int32_t left, int32_t right) const;
  std::vector<Merge> merges_;                              // power-of-two size, at most half full
  std::vector<int32_t> byte_ids_;                          // [256] id of each byte's byte-level symbol
  std::vector<std::pair<std::string, int32_t>> added_;     // added token text -> id, longest first
  std::vector<std::vector<int32_t>> added_by_first_byte_;  // [256] indices into added_, longest first
  int64_t max_token_bytes_ = 1;
};

}  // namespace dsinfer
