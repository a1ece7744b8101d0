// TokenizerVocab: the id <-> piece tables of a Hugging Face byte-level BPE tokenizer.json (model
// vocab, merges and added tokens) and single-token decoding to bytes. The full tokenizer
// (pre-tokenizer regexes, BPE, chat tokens) builds on this.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "io/json.h"

namespace dsinfer {

/// The GPT-2 byte-level alphabet: byte b is written as the code point byte_to_codepoint(b).
char32_t byte_to_codepoint(uint8_t b);
/// Inverse of byte_to_codepoint; nullopt for code points outside the alphabet.
std::optional<uint8_t> codepoint_to_byte(char32_t cp);

class TokenizerVocab {
 public:
  static Result<TokenizerVocab> load(const std::filesystem::path& tokenizer_json);
  static Result<TokenizerVocab> from_json(const Json& j, std::string_view what);

  /// max id + 1 (what len(tokenizer) returns in transformers).
  int size() const { return static_cast<int>(pieces_.size()); }
  /// The vocab string (byte-level alphabet) or an added token's content; empty for unused ids.
  const std::string& piece(int id) const { return pieces_[id]; }
  bool is_added(int id) const { return added_[id]; }
  bool is_special(int id) const { return special_[id]; }
  std::optional<int> id_of(std::string_view piece) const;
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }
  /// What decoding this one token yields, as raw bytes (may be invalid UTF-8 for partial characters).
  std::string decode_bytes(int id) const;

 private:
  std::vector<std::string> pieces_;
  std::vector<bool> added_, special_;
  std::unordered_map<std::string, int> ids_;
  std::vector<std::pair<std::string, std::string>> merges_;
};

/// UTF-8 helpers shared by the tokenizer code.
void append_utf8(std::string& out, char32_t cp);
/// Decodes UTF-8; invalid sequences become U+FFFD (one per maximal invalid subsequence, as Rust's
/// String::from_utf8_lossy does).
std::u32string decode_utf8_lossy(std::string_view s);
std::string encode_utf8(std::u32string_view s);

}  // namespace dsinfer
