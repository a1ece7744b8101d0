// BPE training: count adjacent pairs over word types, merge the most frequent, ties broken by the
// pair's text so the result never depends on hash order. Only the words that hold the merged pair
// are counted again (a corpus of a million words has tens of thousands of word types).
#include "testing/tiny_tokenizer.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "io/tokenizer_vocab.h"

namespace dsinfer {
namespace {

constexpr const char* kCorpus =
    "The quick brown fox jumps over the lazy dog. A tiny model with random weights cannot answer a "
    "question, but it shows that every part of the engine runs: the tokenizer turns text into ids, "
    "the model turns ids into logits, and the sampler turns logits into the next token. "
    "Hello! How are you today? I am fine, thank you. What is the weather like in the city? "
    "It is sunny and warm, with a light wind from the sea. Let us write a short program that prints "
    "the numbers from one to ten, then adds them up and prints the sum. "
    "def main():\n    total = 0\n    for i in range(1, 11):\n        total += i\n    print(total)\n"
    "In the beginning there was nothing but the sound of the river and the wind in the trees. "
    "The people of the valley built houses of stone and wood, and they planted wheat and barley. "
    "Every morning the children walked to school along the river, and every evening they came home. "
    "Reasoning step by step: first we read the question, then we think about what it asks, and "
    "finally we give the answer. The answer is 42. Numbers like 123, 2026 and 3.14 are split into "
    "groups of at most three digits. Thank you for reading this text.\n";

// Words as the DeepSeek pre-tokenizer roughly cuts them (the built-in text's, unchanged since the
// tiny checkpoint's tokenizer was first made): an optional leading space plus letters, digit
// groups, punctuation runs, newlines.
WordCounts count_words(std::string_view text) {
  WordCounts counts;
  size_t i = 0;
  const auto cls = [](char c) {
    if (std::isalpha(static_cast<unsigned char>(c))) return 0;
    if (std::isdigit(static_cast<unsigned char>(c))) return 1;
    if (c == '\n') return 3;
    if (c == ' ') return 4;
    return 2;
  };
  while (i < text.size()) {
    size_t j = i;
    if (text[j] == ' ' && j + 1 < text.size() && cls(text[j + 1]) != 4) ++j;
    const int k = cls(text[j]);
    size_t end = j + 1;
    while (end < text.size() && cls(text[end]) == k && !(k == 1 && end - j >= 3)) ++end;
    ++counts[std::string(text.substr(i, end - i))];
    i = end;
  }
  return counts;
}

// The merges, in order, of BPE over the word types: each time the most frequent adjacent pair
// (ties: the smaller pair of texts), merged left to right in every word that holds it.
std::vector<std::pair<std::string, std::string>> learn_merges(const WordCounts& counted, int n_merges) {
  std::vector<std::string> text;  // a symbol's text by id
  std::map<std::string, int> id;
  std::vector<std::vector<int>> words;
  std::vector<int64_t> freq;
  for (const auto& [w, n] : counted) {
    std::vector<int> ids;
    for (const char byte : w) {
      std::string s;  // the byte-level alphabet's character for the byte
      append_utf8(s, byte_to_codepoint(static_cast<uint8_t>(byte)));
      const auto [it, added] = id.emplace(s, static_cast<int>(text.size()));
      if (added) text.push_back(s);
      ids.push_back(it->second);
    }
    words.push_back(std::move(ids)), freq.push_back(n);
  }
  using Pair = std::pair<int, int>;
  std::map<Pair, int64_t> count;
  std::map<Pair, std::set<int>> where;  // the words that held the pair when it was counted
  // The next merge first: the largest count, then the smaller (left, right) texts.
  const auto before = [&](const std::pair<int64_t, Pair>& a, const std::pair<int64_t, Pair>& b) {
    if (a.first != b.first) return a.first > b.first;
    return std::tie(text[a.second.first], text[a.second.second]) <
           std::tie(text[b.second.first], text[b.second.second]);
  };
  std::set<std::pair<int64_t, Pair>, decltype(before)> queue(before);
  const auto add = [&](const Pair& p, int64_t n) {
    int64_t& c = count[p];
    if (c > 0) queue.erase({c, p});
    c += n;
    if (c > 0) queue.insert({c, p});
  };
  const auto tally = [&](int w, int64_t sign) {
    const std::vector<int>& s = words[w];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      add({s[i], s[i + 1]}, sign * freq[w]);
      if (sign > 0) where[{s[i], s[i + 1]}].insert(w);
    }
  };
  for (int w = 0; w < static_cast<int>(words.size()); ++w) tally(w, 1);
  std::vector<std::pair<std::string, std::string>> merges;
  while (static_cast<int>(merges.size()) < n_merges && !queue.empty()) {
    const Pair best = queue.begin()->second;
    merges.emplace_back(text[best.first], text[best.second]);
    // A symbol is its text: two merges that spell the same string make the same symbol.
    const auto [it, added] = id.emplace(text[best.first] + text[best.second], static_cast<int>(text.size()));
    if (added) text.push_back(it->first);
    const int merged = it->second;
    const std::set<int> holders = std::move(where[best]);
    where.erase(best);
    for (const int w : holders) {
      std::vector<int>& s = words[w];
      bool holds = false;
      for (size_t i = 0; i + 1 < s.size() && !holds; ++i) holds = s[i] == best.first && s[i + 1] == best.second;
      if (!holds) continue;
      tally(w, -1);
      std::vector<int> out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == best.first && s[i + 1] == best.second)
          out.push_back(merged), ++i;
        else
          out.push_back(s[i]);
      }
      s = std::move(out);
      tally(w, 1);
    }
  }
  return merges;
}

}  // namespace

Json bpe_tokenizer_json(const WordCounts& words, int n_merges) {
  Json vocab = Json::object();
  Json added = Json::array();
  int next_id = 0;
  const auto add_special = [&](const char* text, bool special) {
    added.push_back({{"id", next_id},
                     {"content", text},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
    ++next_id;
  };
  add_special(TinyTokenizerSpecials::kBos, true);
  add_special(TinyTokenizerSpecials::kEos, true);
  add_special(TinyTokenizerSpecials::kPad, true);
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, byte_to_codepoint(static_cast<uint8_t>(b)));
    vocab[s] = next_id++;
  }

  Json merges = Json::array();
  for (const auto& [a, b] : learn_merges(words, n_merges)) {
    merges.push_back(a + " " + b);
    if (!vocab.contains(a + b)) vocab[a + b] = next_id++;  // two merges may spell one token
  }

  for (const char* t : {"<｜User｜>", "<｜Assistant｜>", TinyTokenizerSpecials::kSystem, "<｜latest_reminder｜>",
                        TinyTokenizerSpecials::kImage, "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>",
                        "<｜title｜>", "<｜read_url｜>"})
    add_special(t, true);
  for (const char* t : {"<think>", "</think>"}) add_special(t, false);

  // The pre-tokenizer of DeepSeek's tokenizer.json: digit groups, CJK runs, then the word regex.
  const Json split = [](const char* re) {
    return Json{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}};
  }("");
  Json pre = {{"type", "Sequence"}, {"pretokenizers", Json::array()}};
  for (const char* re :
       {"\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
        " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}) {
    Json s = split;
    s["pattern"]["Regex"] = re;
    pre["pretokenizers"].push_back(s);
  }
  pre["pretokenizers"].push_back(
      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});

  return Json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", Json::array()}}},
      {"pre_tokenizer", pre},
      {"post_processor",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merges}}}};
}

Json make_tiny_tokenizer_json(int n_merges) {
  return bpe_tokenizer_json(count_words(kCorpus), n_merges);
}

Json pad_tokenizer_vocab(Json tokenizer, int64_t vocab_size) {
  Json& vocab = tokenizer["model"]["vocab"];
  int64_t next_id = 0;
  for (const auto& [text, id] : vocab.items()) next_id = std::max(next_id, id.get<int64_t>() + 1);
  for (const Json& a : tokenizer["added_tokens"]) next_id = std::max(next_id, a["id"].get<int64_t>() + 1);
  for (; next_id < vocab_size; ++next_id) {
    std::string text;  // " t<id>" in the byte-level alphabet
    append_utf8(text, byte_to_codepoint(' '));
    text += 't';
    text += std::to_string(next_id);
    while (vocab.contains(text)) text += "x";
    vocab[text] = next_id;
  }
  return tokenizer;
}

}  // namespace dsinfer
