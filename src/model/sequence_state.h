// SequenceState: everything the model keeps for one sequence between forward calls (spec §14b.1):
// its slot of the fixed caches (each layer's window ring and ratio-2 partial group) and the blocks
// holding the kv sources' compressed KV and index keys (both in the model's CacheStore), the Engram
// token history, and the reference's shared index-key slot. The caches live in the model backend's
// memory; the history and the bookkeeping on the host.
#pragma once

#include <cstdint>
#include <vector>

#include "io/model_config.h"
#include "model/cache_store.h"
#include "ops/device_array.h"

namespace dsinfer {

struct LayerCache {
  // Kv sources: how many compressed positions have rows in the store (compressed KV bf16, fp4
  // fake-quantised; index keys likewise); reads stay below them.
  int64_t compressed_rows = 0, index_key_rows = 0;
};

struct SequenceState {
  std::vector<LayerCache> layers;
  // The store's slot of this sequence's fixed caches: each layer's window ring ([win, hd] bf16, fp8
  // fake-quantised, row = position % win) and each ratio-2 kv source's partial group ([2, hd] f32
  // kv and score, row = position % 2).
  CacheSlot slot;
  BlockTable blocks;                    // positions [j * block_tokens, ...) of the growing caches live in block j
  std::vector<int64_t> engram_history;  // compressed token ids by position
  // The layer whose index keys the reference's shared slot points at: moved only when a key owner
  // produced keys, so ratio-2 owners read layer 20's keys at even decode positions (spec §6.4).
  int index_key_owner = -1;
  int64_t length = 0;  // positions [0, length) are cached
  // The last forward's verify chunk (ForwardChunk::verify), for Model::truncate: its first position
  // (-1: the last forward had none) and the index-key owner after each position from the one
  // before it on.
  int64_t verify_from = -1;
  std::vector<int> verify_owners;
};

SequenceState make_sequence_state(const ModelConfig& c, CacheStore& store);

}  // namespace dsinfer
