// tokenizer.json tables and byte-level decoding.
#include "io/tokenizer_vocab.h"

#include <array>

#include <fmt/format.h>

namespace dsinfer {
namespace {

struct ByteAlphabet {
  std::array<char32_t, 256> to_cp{};
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteAlphabet() {
    // Printable Latin-1 bytes stand for themselves; the rest are shifted to 256, 257, ... in order.
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      to_byte[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

char32_t byte_to_codepoint(uint8_t b) {
  return alphabet().to_cp[b];
}

std::optional<uint8_t> codepoint_to_byte(char32_t cp) {
  const auto it = alphabet().to_byte.find(cp);
  if (it == alphabet().to_byte.end()) return std::nullopt;
  return it->second;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

std::u32string decode_utf8_lossy(std::string_view s) {
  std::u32string out;
  size_t i = 0;
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  while (i < s.size()) {
    const uint8_t b0 = byte(i);
    if (b0 < 0x80) {
      out += b0, ++i;
      continue;
    }
    // Length and the valid range of the second byte (Unicode Table 3-7, well-formed sequences).
    int len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF)
      len = 2;
    else if (b0 == 0xE0)
      len = 3, lo = 0xA0;
    else if (b0 >= 0xE1 && b0 <= 0xEC)
      len = 3;
    else if (b0 == 0xED)
      len = 3, hi = 0x9F;
    else if (b0 >= 0xEE && b0 <= 0xEF)
      len = 3;
    else if (b0 == 0xF0)
      len = 4, lo = 0x90;
    else if (b0 >= 0xF1 && b0 <= 0xF3)
      len = 4;
    else if (b0 == 0xF4)
      len = 4, hi = 0x8F;
    if (len == 0) {
      out += U'\uFFFD', ++i;
      continue;
    }
    char32_t cp = b0 & (0xFF >> (len + 1));
    size_t k = 1;
    for (; k < static_cast<size_t>(len) && i + k < s.size(); ++k) {
      const uint8_t b = byte(i + k);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (k == static_cast<size_t>(len))
      out += cp;
    else
      out += U'\uFFFD';  // the maximal invalid prefix is replaced once
    i += k;
  }
  return out;
}

Result<TokenizerVocab> TokenizerVocab::load(const std::filesystem::path& path) {
  DSINFER_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  return from_json(j, path.string());
}

Result<TokenizerVocab> TokenizerVocab::from_json(const Json& j, std::string_view what) {
  const auto bad = [&](std::string_view msg) {
    return error(ErrorKind::kCorruptFile, fmt::format("{}: {}", what, msg));
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return bad("missing object 'model'");
  const Json& model = j["model"];
  if (model.value("type", "") != "BPE") return bad("model.type must be \"BPE\"");
  if (!model.contains("vocab") || !model["vocab"].is_object()) return bad("missing object 'model.vocab'");
  TokenizerVocab v;
  std::vector<bool> in_vocab;  // ids model.vocab gives, to tell a duplicate from an added token's own id
  const auto read_id = [&](const std::string& piece, const Json& id_json) -> Result<int> {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 || id_json.get<int64_t>() > (1 << 24))
      return bad(fmt::format("token '{}' has an invalid id", piece));
    const int id = id_json.get<int>();
    if (id >= v.size()) v.pieces_.resize(id + 1), v.added_.resize(id + 1), v.special_.resize(id + 1);
    if (id >= static_cast<int>(in_vocab.size())) in_vocab.resize(id + 1);
    return id;
  };
  // Two pieces under one id would make decoding depend on which was read last; the file is broken.
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    DSINFER_ASSIGN_OR_RETURN(const int id, read_id(it.key(), *it));
    if (in_vocab[id])
      return bad(fmt::format("model.vocab gives id {} to both '{}' and '{}'", id, v.pieces_[id], it.key()));
    in_vocab[id] = true;
    v.pieces_[id] = it.key();
    v.ids_[it.key()] = id;
  }
  // An added token may repeat a vocab entry (same id, same content), as HF files do, but never
  // contradict one, nor another added token.
  if (j.contains("added_tokens")) {
    if (!j["added_tokens"].is_array()) return bad("'added_tokens' must be a list");
    for (const Json& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id"))
        return bad("an added token lacks 'id' or 'content'");
      const std::string content = t["content"].get<std::string>();
      DSINFER_ASSIGN_OR_RETURN(const int id, read_id(content, t["id"]));
      if (v.added_[id])
        return bad(fmt::format("added_tokens give id {} twice ('{}' and '{}')", id, v.pieces_[id], content));
      if (in_vocab[id] && v.pieces_[id] != content)
        return bad(
            fmt::format("added token '{}' has id {}, which model.vocab gives to '{}'", content, id, v.pieces_[id]));
      if (const auto other = v.ids_.find(content); other != v.ids_.end() && other->second != id)
        return bad(
            fmt::format("added token '{}' has id {}, but '{}' already has id {}", content, id, content, other->second));
      v.pieces_[id] = content;
      v.added_[id] = true;
      v.special_[id] = t.value("special", false);
      v.ids_[content] = id;
    }
  }
  // Without merges byte-level BPE degrades to one token per byte: every prompt silently wrong.
  if (!model.contains("merges")) return bad("missing list 'model.merges'");
  if (!model["merges"].is_array()) return bad("'model.merges' must be a list");
  for (const Json& m : model["merges"]) {
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) return bad(fmt::format("merge '{}' has no space", s));
      v.merges_.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      v.merges_.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return bad("a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return v;
}

std::optional<int> TokenizerVocab::id_of(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::string TokenizerVocab::decode_bytes(int id) const {
  if (id < 0 || id >= size()) return {};
  if (added_[id]) return pieces_[id];
  std::string out;
  for (char32_t cp : decode_utf8_lossy(pieces_[id])) {
    const auto b = codepoint_to_byte(cp);
    if (!b) return pieces_[id];  // a piece outside the byte alphabet decodes to itself (as HF's ByteLevel)
    out += static_cast<char>(*b);
  }
  return out;
}

}  // namespace dsinfer
