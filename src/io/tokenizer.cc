// Tokenizer implementation.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer.h"

#include <pcre2.h>

#include <algorithm>

#include <fmt/format.h>

#include "core/hash.h"

namespace dsinfer {

struct Tokenizer::Regexes {
  std::vector<pcre2_code*> codes;
  ~Regexes() {
    for (pcre2_code* c : codes) pcre2_code_free(c);
  }
};

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
}

Status unsupported(std::string_view what, std::string_view msg) {
  return error(ErrorKind::kUnsupported, fmt::format("{}: {}", what, msg));
}

// Splits each piece by `re`, keeping matches and the gaps between them as pieces ("Isolated").
void split_isolated(pcre2_code* re, std::vector<std::string_view>& pieces) {
  std::vector<std::string_view> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  for (std::string_view p : pieces) {
    size_t pos = 0, gap = 0;
    // PCRE2 validates the UTF-8 from the start offset to the end on every call: once per piece is
    // enough (and keeps long pieces linear).
    uint32_t options = 0;
    while (pos <= p.size()) {
      const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), pos, options, md, nullptr);
      if (rc < 0) break;
      options = PCRE2_NO_UTF_CHECK;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] == ov[0]) {  // an empty match splits nothing; step over one character
        pos = ov[0] + 1;
        while (pos < p.size() && (static_cast<unsigned char>(p[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      if (ov[0] > gap) out.push_back(p.substr(gap, ov[0] - gap));
      out.push_back(p.substr(ov[0], ov[1] - ov[0]));
      gap = pos = ov[1];
    }
    if (gap < p.size()) out.push_back(p.substr(gap));
  }
  pcre2_match_data_free(md);
  pieces = std::move(out);
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::filesystem::path& path) {
  DSINFER_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  return from_json(j, path.string());
}

Result<Tokenizer> Tokenizer::from_json(const Json& j, std::string_view what) {
  Tokenizer t;
  DSINFER_ASSIGN_OR_RETURN(t.vocab_, TokenizerVocab::from_json(j, what));
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const Json& n = j["normalizer"];
    if (!(n.value("type", "") == "Sequence" && n.contains("normalizers") && n["normalizers"].empty()))
      return unsupported(what, fmt::format("normalizer {} is not supported", n.dump()));
  }
  t.regexes_ = std::make_unique<Regexes>();
  const Json& pre = j.value("pre_tokenizer", Json());
  const Json steps =
      pre.value("type", "") == "Sequence" ? pre.value("pretokenizers", Json::array()) : Json::array({pre});
  bool byte_level = false;
  for (const Json& step : steps) {
    const std::string type = step.value("type", "");
    if (type == "ByteLevel" && !step.value("use_regex", true)) {
      byte_level = true;
    } else if (type == "Split" && step.contains("pattern") && step["pattern"].contains("Regex") &&
               step.value("behavior", "") == "Isolated" && !step.value("invert", false)) {
      const std::string pattern = step["pattern"]["Regex"].get<std::string>();
      int err = 0;
      PCRE2_SIZE offset = 0;
      pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
      if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return error(ErrorKind::kCorruptFile, fmt::format("{}: pre-tokenizer regex at {}: {}", what, offset,
                                                          reinterpret_cast<const char*>(msg)));
      }
      pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
      t.regexes_->codes.push_back(re);
    } else {
      return unsupported(what, fmt::format("pre-tokenizer step {} is not supported", step.dump()));
    }
  }
  if (!byte_level) return unsupported(what, "the pre-tokenizer must end with ByteLevel (use_regex false)");
  const std::string model_type = j["model"].value("type", "");
  if (model_type != "BPE" || j["model"].value("byte_fallback", false))
    return unsupported(what, "only byte-level BPE without byte fallback is supported");
  t.byte_ids_.resize(256);
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_utf8(sym, byte_to_codepoint(static_cast<uint8_t>(b)));
    const auto id = t.vocab_.id_of(sym);
    if (!id) return error(ErrorKind::kCorruptFile, fmt::format("{}: the vocab lacks the symbol of byte {}", what, b));
    t.byte_ids_[b] = *id;
  }
  size_t slots = 16;
  while (slots < 2 * t.vocab_.merges().size()) slots *= 2;
  t.merges_.assign(slots, Merge{});
  for (size_t r = 0; r < t.vocab_.merges().size(); ++r) {
    const auto& [a, b] = t.vocab_.merges()[r];
    const auto ia = t.vocab_.id_of(a), ib = t.vocab_.id_of(b), merged = t.vocab_.id_of(a + b);
    if (!ia || !ib || !merged)
      return error(ErrorKind::kCorruptFile,
                   fmt::format("{}: merge '{} {}' names a token not in the vocab", what, a, b));
    const uint64_t key = pair_key(*ia, *ib);
    for (size_t slot = mix64(key) & (slots - 1);; slot = (slot + 1) & (slots - 1)) {
      if (t.merges_[slot].key == key) break;  // a repeated merge: the first (best) rank wins
      if (t.merges_[slot].key == Merge{}.key) {
        t.merges_[slot] = {key, static_cast<int32_t>(r), *merged};
        break;
      }
    }
  }
  for (int id = 0; id < t.vocab_.size(); ++id)
    if (t.vocab_.is_added(id)) t.added_.emplace_back(t.vocab_.piece(id), id);
  std::sort(t.added_.begin(), t.added_.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  t.added_by_first_byte_.resize(256);
  for (size_t i = 0; i < t.added_.size(); ++i)
    if (!t.added_[i].first.empty())
      t.added_by_first_byte_[static_cast<uint8_t>(t.added_[i].first[0])].push_back(static_cast<int32_t>(i));
  for (int id = 0; id < t.vocab_.size(); ++id)
    t.max_token_bytes_ = std::max<int64_t>(t.max_token_bytes_, static_cast<int64_t>(t.vocab_.decode_bytes(id).size()));
  return t;
}

const Tokenizer::Merge* Tokenizer::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = merges_.size() - 1;
  for (size_t slot = mix64(key) & mask;; slot = (slot + 1) & mask) {
    if (merges_[slot].key == key) return &merges_[slot];
    if (merges_[slot].key == Merge{}.key) return nullptr;
  }
}

void Tokenizer::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  // Symbols: one token id per byte, merged by rank with a heap of candidate pairs (stale entries
  // skipped), so a long piece costs O(n log n). Equal ranks merge leftmost first, as in HF.
  struct Sym {
    int32_t id;
    int prev, next;
  };
  thread_local std::vector<Sym> syms;  // reused: most pieces are a few bytes, allocations would dominate
  syms.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i)
    syms[i] = {byte_ids_[static_cast<uint8_t>(bytes[i])], static_cast<int>(i) - 1,
               i + 1 < bytes.size() ? static_cast<int>(i) + 1 : -1};
  struct Cand {
    int32_t rank;
    int left;
    int32_t left_id, right_id;  // what the pair was when queued: a mismatch means stale
    int32_t merged_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  thread_local std::vector<Cand> heap;  // a min-heap by (rank, position)
  heap.clear();
  const auto push = [&](int left) {
    if (left < 0 || syms[left].next < 0) return;
    const int32_t a = syms[left].id, b = syms[syms[left].next].id;
    if (const Merge* m = find_merge(a, b)) {
      heap.push_back({m->rank, left, a, b, m->id});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Cand c = heap.back();
    heap.pop_back();
    const int right = syms[c.left].next;
    if (right < 0 || syms[c.left].id != c.left_id || syms[right].id != c.right_id) continue;  // stale
    syms[c.left].id = c.merged_id;
    syms[right].id = -1;
    syms[c.left].next = syms[right].next;
    if (syms[right].next >= 0) syms[syms[right].next].prev = c.left;
    push(syms[c.left].prev);
    push(c.left);
  }
  for (int i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const Segment whole{text, true};
  return encode_segments({&whole, 1});
}

std::vector<int32_t> Tokenizer::encode_plain(std::string_view text) const {
  const Segment whole{text, false};
  return encode_segments({&whole, 1});
}

std::vector<std::string_view> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string_view> pieces = {text};
  for (pcre2_code* re : regexes_->codes) split_isolated(re, pieces);
  return pieces;
}

std::vector<int32_t> Tokenizer::encode_segments(std::span<const Segment> segments) const {
  std::vector<int32_t> ids;
  std::string plain;  // the run of plain text since the last matched added token
  const auto flush_plain = [&] {
    if (plain.empty()) return;
    for (std::string_view p : pre_tokenize(plain)) encode_piece(p, ids);
    plain.clear();
  };
  for (const Segment& seg : segments) {
    const std::string_view text = seg.text;
    size_t pos = 0, plain_start = 0;
    while (seg.match_added && pos < text.size()) {
      const std::pair<std::string, int32_t>* hit = nullptr;
      for (int32_t i : added_by_first_byte_[static_cast<uint8_t>(text[pos])])  // longest first
        if (text.compare(pos, added_[i].first.size(), added_[i].first) == 0) {
          hit = &added_[i];
          break;
        }
      if (!hit) {
        ++pos;
        continue;
      }
      plain.append(text.substr(plain_start, pos - plain_start));
      flush_plain();
      ids.push_back(hit->second);
      pos += hit->first.size();
      plain_start = pos;
    }
    plain.append(text.substr(plain_start));
  }
  flush_plain();
  return ids;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += vocab_.decode_bytes(id);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  return encode_utf8(decode_utf8_lossy(decode_bytes(ids)));
}

}  // namespace dsinfer
