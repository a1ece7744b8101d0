// Encode throughput of the tokenizer on one thread: a few MB of mixed text (the fixture cases'
// prose, code, CJK, emoji, numbers and whitespace runs, concatenated and repeated), MB/s and
// tokens/s over several passes.
//   tokenizer_bench [--tokenizer tokenizer.json] [--cases cases.jsonl] [--mb N] [--passes N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "io/json.h"
#include "io/tokenizer.h"

int main(int argc, char** argv) {
  std::string tokenizer = DSINFER_TEST_DATA_DIR "/tokenizer/tokenizer.json";
  std::string cases = DSINFER_TEST_DATA_DIR "/tokenizer/cases.jsonl";
  double mb = 4;
  int passes = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--tokenizer")
      tokenizer = argv[i + 1];
    else if (k == "--cases")
      cases = argv[i + 1];
    else if (k == "--mb")
      mb = std::stod(argv[i + 1]);
    else if (k == "--passes")
      passes = std::stoi(argv[i + 1]);
  }
  auto tok = dsinfer::Tokenizer::load(tokenizer);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", tok.status().message().c_str());
    return 1;
  }
  std::string corpus;
  std::ifstream in(cases);
  for (std::string line; std::getline(in, line);) {
    auto j = dsinfer::parse_json(line, cases);
    if (j.ok() && j->contains("text")) corpus += (*j)["text"].get<std::string>() + "\n";
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "tokenizer_bench: no text in %s\n", cases.c_str());
    return 1;
  }
  // Documents of the corpus' size, so that no single piece grows with the total.
  std::vector<std::string> docs;
  size_t bytes = 0;
  while (bytes < mb * 1e6) {
    docs.push_back(corpus);
    bytes += corpus.size();
  }
  double best = 1e30;
  size_t tokens = 0;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    tokens = 0;
    for (const std::string& d : docs) tokens += tok->encode(d).size();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf(
      "encode: %.1f MB of mixed text (%zu documents of %.0f KB), 1 thread: %.2f MB/s, %.2f M tokens/s "
      "(%.2f bytes/token), best of %d passes\n",
      bytes / 1e6, docs.size(), corpus.size() / 1e3, bytes / 1e6 / best, tokens / 1e6 / best,
      static_cast<double>(bytes) / tokens, passes);
  return 0;
}
