// The Flash-shaped and tiny configs: what is Flash's written once, the layouts, the Engram sizes
// that follow from a tokenizer, and the validation every config gets.
#include "testing/config_builder.h"

#include <algorithm>

#include <utility>

#include "io/engram_layout.h"
#include "io/engram_token_map.h"
#include "testing/tiny_tokenizer.h"

namespace dsinfer {
namespace {

// The Engram sizes that follow from c's other Engram fields (layers, n-gram size, heads, vocab)
// and the tokenizer: the compressed vocab and each Engram layer's table rows.
void derive_engram_sizes(ModelConfig& c, const TokenizerVocab& vocab) {
  c.engram_compressed_vocab_size = build_engram_token_map(vocab).compressed_vocab_size;
  const int layers = static_cast<int>(c.engram_layer_ids.size());
  const EngramLayout layout =
      compute_engram_layout(layers, c.engram_max_ngram_size, c.engram_n_heads, c.engram_vocab_size);
  c.engram_num_embeddings.clear();
  for (int i = 0; i < layers; ++i) c.engram_num_embeddings.push_back(layout.table_rows(i));
}

Result<ModelConfig> validated(ModelConfig c) {
  DSINFER_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace

LayerLayout flash_layer_layout() {
  LayerLayout l;
  l.compress_ratios.assign(40, 1);
  l.compress_ratios[0] = l.compress_ratios[1] = 0;
  for (int i = 2; i < 20; ++i) l.compress_ratios[i] = 2;
  l.kv_source_layers = {2, 8, 14, 20};
  l.index_source_layers = {2, 8, 14, 20, 24, 28, 32, 36};
  l.candidate_source_layer = 20;
  return l;
}

LayerLayout one_source_each_layout(int n_layers) {
  const int half = n_layers / 2;
  LayerLayout l;
  l.compress_ratios.assign(n_layers, 1);
  l.compress_ratios[0] = l.compress_ratios[1] = 0;
  for (int i = 2; i < half; ++i) l.compress_ratios[i] = 2;
  l.kv_source_layers = {2, half};
  l.index_source_layers = {2, half, half + 2};
  l.candidate_source_layer = half;
  return l;
}

Result<ModelConfig> flash_shaped_config(const FlashShapedOptions& o) {
  ModelConfig c;
  c.max_batch_size = o.max_batch_size;
  c.max_seq_len = o.max_seq_len;
  c.vocab_size = o.vocab_size;
  c.dim = o.dim;
  c.moe_inter_dim = o.moe_inter_dim;
  c.n_layers = static_cast<int>(o.layers.compress_ratios.size());
  c.n_mtp_layers = 0;
  c.n_heads = o.n_heads;
  c.n_routed_experts = o.n_routed_experts;
  c.n_activated_experts = o.n_activated_experts;
  c.route_scale = o.route_scale;
  c.swiglu_limit = o.swiglu_limit;
  c.q_lora_rank = o.q_lora_rank;
  c.head_dim = 512;
  c.rope_head_dim = 64;
  c.o_groups = o.o_groups;
  c.o_lora_rank = o.o_lora_rank;
  c.window_size = 128;
  c.compress_ratios = o.layers.compress_ratios;
  c.kv_source_layers = o.layers.kv_source_layers;
  c.index_source_layers = o.layers.index_source_layers;
  c.candidate_source_layer = o.layers.candidate_source_layer;
  c.candidate_topk_blocks = o.candidate_topk_blocks;
  c.candidate_block_size = 8;
  c.index_n_heads = o.index_n_heads;
  c.index_head_dim = 128;
  c.index_topk = o.index_topk;
  c.compress_rope_theta = 160000;
  c.rope_factor = 16;
  c.original_seq_len = o.original_seq_len;
  if (o.engram_tokenizer != nullptr) {
    c.engram_layer_ids = {1, 14};
    c.engram_max_ngram_size = 4;
    c.engram_vocab_size = o.engram_vocab_size;
    c.engram_n_heads = 8;
    c.engram_head_dim = 256;
    derive_engram_sizes(c, *o.engram_tokenizer);
  }
  if (o.dspark) {
    c.n_mtp_layers = 3;
    c.compress_ratios.insert(c.compress_ratios.end(), 3, 0);
    c.dspark_block_size = 5;
    c.dspark_noise_token_id = c.vocab_size - 1;
    c.dspark_target_layer_ids = {c.n_layers - 3, c.n_layers - 2, c.n_layers - 1};
    c.dspark_markov_rank = 256;
    c.dspark_n_routed_experts = std::min(128, c.n_routed_experts);
    c.dspark_n_activated_experts = 3;
  }
  return validated(std::move(c));
}

Result<ModelConfig> tiny_model_config(const TokenizerVocab& vocab, int ranks) {
  if (ranks != 1 && ranks != 2 && ranks != 4)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("the tiny model splits among 1, 2 or 4 tensor-parallel ranks, not {}", ranks));
  ModelConfig c;
  c.max_batch_size = 4;
  c.max_seq_len = 4096;
  c.vocab_size = vocab.size();
  c.dim = 128;
  c.moe_inter_dim = 64;
  c.n_layers = 8;
  c.n_mtp_layers = 3;
  c.n_heads = 4;
  c.n_routed_experts = 8;
  c.n_activated_experts = 2;
  c.route_scale = 1.5;
  c.swiglu_limit = 10.0;
  c.q_lora_rank = 64;
  c.head_dim = 64;
  c.rope_head_dim = 16;
  c.o_groups = 2;
  c.o_lora_rank = 32;
  c.window_size = 16;
  // 0,1: window only (1 with Engram); 2: ratio-2 kv source, 3: reuses it; 4: ratio-1 kv source
  // and candidate source; 5: reuse; 6: reindex (with Engram); 7: reuse; 8-10: DSpark drafts.
  c.compress_ratios = {0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0};
  c.kv_source_layers = {2, 4};
  c.index_source_layers = {2, 4, 6};
  c.compress_rope_theta = 160000;
  c.original_seq_len = 1024;
  c.rope_factor = 16;
  c.index_n_heads = 2;
  c.index_head_dim = 32;
  c.index_topk = 8;
  c.candidate_source_layer = 4;
  c.candidate_topk_blocks = 5;
  c.candidate_block_size = 2;
  c.engram_layer_ids = {1, 6};
  c.engram_max_ngram_size = 3;
  c.engram_vocab_size = 600;
  c.engram_n_heads = 2;
  c.engram_head_dim = 32;
  c.engram_pad_id = 2;
  derive_engram_sizes(c, vocab);
  c.vision_n_layers = 2;
  c.vision_dim = 64;
  c.vision_n_heads = 2;
  c.vision_inter_dim = 96;
  c.image_token_id = vocab.id_of(TinyTokenizerSpecials::kImage).value_or(0);
  c.dspark_block_size = 5;
  c.dspark_noise_token_id = vocab.id_of(TinyTokenizerSpecials::kSystem).value_or(0);
  c.dspark_target_layer_ids = {5, 6, 7};
  c.dspark_markov_rank = 32;
  c.dspark_n_routed_experts = 4;
  c.dspark_n_activated_experts = 2;
  if (ranks > 1) {  // 4 heads of 64 and 8 experts already divide; fp8 rows stay whole scale blocks
    c.o_groups = std::max(c.o_groups, ranks);
    c.index_n_heads = std::max(c.index_n_heads, ranks);
    c.vocab_size = (c.vocab_size + ranks - 1) / ranks * ranks;
  }
  return validated(std::move(c));
}

}  // namespace dsinfer
