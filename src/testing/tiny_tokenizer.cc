// BPE training (the textbook loop: count adjacent pairs over word types, merge the most frequent,
// ties broken by the pair's text so the result never depends on hash order).
#include "testing/tiny_tokenizer.h"

#include <map>
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

using Word = std::vector<std::string>;  // symbols (byte-alphabet strings)

// Words as the DeepSeek pre-tokenizer roughly cuts them: an optional leading space plus letters,
// digit groups, punctuation runs, newlines.
std::map<Word, int> count_words(const std::string& text) {
  std::map<Word, int> counts;
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
    Word w;
    for (size_t p = i; p < end; ++p) {
      std::string s;
      append_utf8(s, byte_to_codepoint(static_cast<uint8_t>(text[p])));
      w.push_back(s);
    }
    ++counts[w];
    i = end;
  }
  return counts;
}

}  // namespace

Json make_tiny_tokenizer_json(int n_merges) {
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

  std::map<Word, int> words = count_words(kCorpus);
  Json merges = Json::array();
  for (int m = 0; m < n_merges; ++m) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [w, n] : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) pairs[{w[i], w[i + 1]}] += n;
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;
    const auto [a, b] = best->first;
    merges.push_back(a + " " + b);
    vocab[a + b] = next_id++;
    std::map<Word, int> merged;
    for (const auto& [w, n] : words) {
      Word out;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b)
          out.push_back(a + b), ++i;
        else
          out.push_back(w[i]);
      }
      merged[out] += n;
    }
    words = std::move(merged);
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

}  // namespace dsinfer
