// Engram token-map construction over utf8proc (normalisation forms and character properties).
#include "io/engram_token_map.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include <utf8proc.h>

namespace dsinfer {
namespace {

// utf8proc returns malloc'ed buffers.
std::string utf8proc_apply(std::string_view s, utf8proc_uint8_t* (*fn)(const utf8proc_uint8_t*)) {
  const std::string z(s);  // NUL-terminated copy
  utf8proc_uint8_t* out = fn(reinterpret_cast<const utf8proc_uint8_t*>(z.c_str()));
  if (!out) return z;
  std::string r(reinterpret_cast<char*>(out));
  std::free(out);
  return r;
}

bool is_mark(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
}

// The Unicode White_Space property (what Rust's char::is_whitespace tests).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

std::string engram_normalize(std::string_view utf8) {
  const std::string nfd = utf8proc_apply(utf8proc_apply(utf8, utf8proc_NFKC), utf8proc_NFD);
  std::u32string chars;
  for (char32_t c : decode_utf8_lossy(nfd)) {
    if (is_mark(c)) continue;
    // Lowercase per character with the unconditional full mapping: only U+0130 expands.
    if (c == 0x130)
      chars += U"i\u0307";
    else
      chars += static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  }
  std::u32string collapsed;
  for (char32_t c : chars) {
    const bool ws = c == ' ' || c == '\t' || c == '\r' || c == '\n';
    // Only white space produces ' ', so a ' ' at the back means we are inside a run.
    if (!(ws && !collapsed.empty() && collapsed.back() == U' ')) collapsed += ws ? U' ' : c;
  }
  if (collapsed == U" ") return " ";  // the sentinel step: a lone space survives Strip
  size_t b = 0, e = collapsed.size();
  while (b < e && is_white_space(collapsed[b])) ++b;
  while (e > b && is_white_space(collapsed[e - 1])) --e;
  return encode_utf8(std::u32string_view(collapsed).substr(b, e - b));
}

Result<EngramTokenMap> build_engram_token_map(const std::filesystem::path& dir) {
  DSINFER_ASSIGN_OR_RETURN(TokenizerVocab vocab, TokenizerVocab::load(dir / "tokenizer.json"));
  return build_engram_token_map(vocab);
}

EngramTokenMap build_engram_token_map(const TokenizerVocab& vocab) {
  EngramTokenMap out;
  out.map.resize(vocab.size());
  std::unordered_map<std::string, int32_t> ids;
  for (int id = 0; id < vocab.size(); ++id) {
    const std::string text = vocab.decode_bytes(id);
    const std::u32string decoded = decode_utf8_lossy(text);
    std::string key;
    if (decoded.find(U'\uFFFD') != std::u32string::npos) {
      key = vocab.piece(id);
    } else {
      key = engram_normalize(text);
      if (key.empty()) key = text;
    }
    const auto [it, inserted] = ids.emplace(key, static_cast<int32_t>(ids.size()));
    out.map[id] = it->second;
  }
  out.compressed_vocab_size = static_cast<int32_t>(ids.size());
  return out;
}

}  // namespace dsinfer
