// The model configs of the tests and benchmarks, built in one place: V4.1-Flash-shaped ones (Flash's
// text model with other layers, experts or widths) and the tiny model's.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "io/model_config.h"
#include "io/tokenizer_vocab.h"

namespace dsinfer {

/// The layers' attention layout: each layer's compression ratio (0: window only) and the layers
/// that own a compressor (kv sources), an indexer (index sources) and the candidate blocks.
struct LayerLayout {
  std::vector<int> compress_ratios;  // one per layer
  std::vector<int> kv_source_layers;
  std::vector<int> index_source_layers;
  int candidate_source_layer = -1;  // < 0: no candidate blocks
};

/// V4.1-Flash's 40 layers: window only at 0 and 1, ratio 2 at 2-19 (kv sources 2, 8, 14), ratio 1
/// at 20-39 (kv and candidate source 20, reindexed at 24, 28, 32 and 36).
LayerLayout flash_layer_layout();

/// `n_layers` (>= 6) layers of Flash's kinds in Flash's proportions, with one source of each: window
/// only at 0 and 1, ratio 2 up to n/2 (kv source 2), ratio 1 from n/2 (kv and candidate source n/2,
/// reindexed at n/2 + 2).
LayerLayout one_source_each_layout(int n_layers);

/// What a Flash-shaped config changes of V4.1-Flash's text model (tests/data/configs/v41_flash_hf.json);
/// every default is Flash's. What no option changes is Flash's too: heads of 512 (64 of them rotary)
/// over a 128-position window, indexer heads of 128, candidate blocks of 8 positions, the compressed
/// and YaRN rope. The vision tower is left out, the DSpark draft layers unless asked for.
struct FlashShapedOptions {
  int max_batch_size = 4;
  int max_seq_len = 4096;
  int vocab_size = 129280;
  LayerLayout layers = flash_layer_layout();
  int n_routed_experts = 384;
  int n_activated_experts = 6;
  double route_scale = 1.5;
  double swiglu_limit = 10.0;
  // The residual stream, each expert and the low-rank projections of queries and outputs.
  int dim = 5120;
  int moe_inter_dim = 2304;
  int q_lora_rank = 1280;
  int o_lora_rank = 1024;
  // How much attention there is: heads, output groups, indexer heads, what the indexer selects.
  int n_heads = 64;
  int o_groups = 8;
  int index_n_heads = 32;
  int index_topk = 512;
  int candidate_topk_blocks = 2048;
  int original_seq_len = 65536;  // YaRN's original context
  /// Engram at Flash's layers (1 and 14: 4-grams, 8 heads of 256) when set: its tables' rows
  /// follow from this tokenizer's compressed vocab and the bucket search starting at
  /// `engram_vocab_size` (Flash's: 16,000,000).
  const TokenizerVocab* engram_tokenizer = nullptr;
  int64_t engram_vocab_size = 16000000;
  /// Flash's three DSpark draft stages (block 5, rank-256 Markov head, taps at the last three
  /// layers' inputs), each with min(128, n_routed_experts) experts, 3 active.
  bool dspark = false;
};

/// The Flash-shaped config of `options`, validated.
Result<ModelConfig> flash_shaped_config(const FlashShapedOptions& options);

/// The tiny model's config for the tiny tokenizer `vocab` (its token ids and Engram compressed
/// vocab), validated: every layer kind (window only, Engram, ratio-2 and ratio-1 kv sources, reuse,
/// reindex, candidate blocks, DSpark draft layers, vision) at widths of 128 and less.
/// `ranks` > 1: the same model made to divide among that many tensor-parallel ranks (2 or 4: as
/// many output groups and index heads as ranks, at least two, the vocabulary padded to a multiple).
Result<ModelConfig> tiny_model_config(const TokenizerVocab& vocab, int ranks = 1);

}  // namespace dsinfer
