// Tokenizer implementation.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <queue>

#include <fmt/format.h>

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

Status unsupported(std::string_view what, std::string_view msg) {
  return error(ErrorKind::kUnsupported, fmt::format("{}: {}", what, msg));
}

// Splits each piece by `re`, keeping matches and the gaps between them as pieces ("Isolated").
void split_isolated(pcre2_code* re, std::vector<std::string_view>& pieces) {
  std::vector<std::string_view> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  for (std::string_view p : pieces) {
    size_t pos = 0, gap = 0;
    while (pos <= p.size()) {
      const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), pos, 0, md, nullptr);
      if (rc < 0) break;
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
  for (size_t r = 0; r < t.vocab_.merges().size(); ++r) {
    const auto& [a, b] = t.vocab_.merges()[r];
    t.merge_rank_.emplace(a + " " + b, static_cast<int32_t>(r));
  }
  for (int id = 0; id < t.vocab_.size(); ++id)
    if (t.vocab_.is_added(id)) t.added_.emplace_back(t.vocab_.piece(id), id);
  std::sort(t.added_.begin(), t.added_.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  t.added_by_first_byte_.resize(256);
  for (size_t i = 0; i < t.added_.size(); ++i)
    if (!t.added_[i].first.empty())
      t.added_by_first_byte_[static_cast<uint8_t>(t.added_[i].first[0])].push_back(static_cast<int32_t>(i));
  return t;
}

void Tokenizer::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  // Symbols: one per byte, written in the byte-level alphabet; merged by rank with a heap of
  // candidate pairs (stale entries skipped), so a long piece costs O(n log n).
  struct Sym {
    std::string text;
    int prev, next;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string s;
    append_utf8(s, byte_to_codepoint(static_cast<uint8_t>(bytes[i])));
    syms.push_back({std::move(s), static_cast<int>(i) - 1, i + 1 < bytes.size() ? static_cast<int>(i) + 1 : -1});
  }
  using Cand = std::tuple<int32_t, int, std::string>;  // rank, left symbol, the pair's text (validity check)
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  const auto push = [&](int left) {
    if (left < 0 || syms[left].next < 0) return;
    std::string key = syms[left].text + " " + syms[syms[left].next].text;
    const auto it = merge_rank_.find(key);
    if (it != merge_rank_.end()) heap.emplace(it->second, left, std::move(key));
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    auto [rank, left, key] = heap.top();
    heap.pop();
    const int right = syms[left].next;
    if (right < 0 || syms[left].text.empty() || key != syms[left].text + " " + syms[right].text) continue;  // stale
    syms[left].text += syms[right].text;
    syms[right].text.clear();
    syms[left].next = syms[right].next;
    if (syms[right].next >= 0) syms[syms[right].next].prev = left;
    push(syms[left].prev);
    push(left);
  }
  for (int i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
    const auto id = vocab_.id_of(syms[i].text);
    DSINFER_CHECK(id.has_value(), "BPE produced '{}', which is not in the vocab", syms[i].text);
    out.push_back(*id);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t pos = 0;
  const auto encode_plain = [&](std::string_view plain) {
    std::vector<std::string_view> pieces = {plain};
    if (plain.empty()) return;
    for (pcre2_code* re : regexes_->codes) split_isolated(re, pieces);
    for (std::string_view p : pieces) encode_piece(p, ids);
  };
  size_t plain_start = 0;
  while (pos < text.size()) {
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
    encode_plain(text.substr(plain_start, pos - plain_start));
    ids.push_back(hit->second);
    pos += hit->first.size();
    plain_start = pos;
  }
  encode_plain(text.substr(plain_start));
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
