// The Engram compressed token map (spec §9.2): token id -> compressed id, where tokens whose
// decoded text normalises to the same string share one compressed id.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/tokenizer_vocab.h"

namespace dsinfer {

struct EngramTokenMap {
  std::vector<int32_t> map;  // [vocab size]
  int32_t compressed_vocab_size = 0;
};

/// NFKC -> NFD -> strip combining marks -> lowercase -> collapse [ \t\r\n]+ to " " -> strip
/// white space (a lone " " survives); the normaliser of the reference's build_compressed_token_map.
std::string engram_normalize(std::string_view utf8);

/// The map of `dir`/tokenizer.json, built in memory. Nothing is cached: a loader never writes into
/// the model folder, and the pass is cheap (about 0.5 s for the 129K-token release vocab, after
/// the tokenizer.json parse that loading it takes anyway; under 1 ms for the tiny models).
Result<EngramTokenMap> build_engram_token_map(const std::filesystem::path& dir);

/// Scans ids 0, 1, ... assigning compressed ids in order of first appearance of each key: the
/// normalised decoded text, or the raw piece when decoding yields U+FFFD (a partial character).
EngramTokenMap build_engram_token_map(const TokenizerVocab& vocab);

}  // namespace dsinfer
