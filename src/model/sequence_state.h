// SequenceState: everything the model keeps for one sequence between forward calls (spec §14b.1):
// each layer's window ring, the kv sources' compressed KV, index keys and ratio-2 partial group,
// the Engram token history, and the reference's shared index-key slot. The caches live in the
// model backend's memory; the history and the bookkeeping on the host.
#pragma once

#include <cstdint>
#include <vector>

#include "io/model_config.h"
#include "ops/device_array.h"

namespace dsinfer {

struct LayerCache {
  DeviceArray<uint16_t> window;      // [win, hd] bf16 (fp8 fake-quantised), slot = position % win
  DeviceArray<uint16_t> compressed;  // [groups, hd] bf16 (fp4 fake-quantised), kv sources
  DeviceArray<uint16_t> index_keys;  // [groups, d_idx] bf16 (fp4 fake-quantised), kv sources
  DeviceArray<float> kv_state;       // [2, hd] ratio-2 partial group, slot = position % 2
  DeviceArray<float> score_state;    // [2, hd]
};

struct SequenceState {
  std::vector<LayerCache> layers;
  std::vector<int64_t> engram_history;  // compressed token ids by position
  // The layer whose index keys the reference's shared slot points at: moved only when a key owner
  // produced keys, so ratio-2 owners read layer 20's keys at even decode positions (spec §6.4).
  int index_key_owner = -1;
  int64_t length = 0;  // positions [0, length) are cached
};

SequenceState make_sequence_state(const ModelConfig& c, Backend& backend);

}  // namespace dsinfer
