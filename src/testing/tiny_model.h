// The built-in tiny V4.1 model (its config, with every layer kind: testing/config_builder.h) and
// random weights written in the official release format. Tests and the demo use it.
#pragma once

#include <cstdint>
#include <filesystem>

#include "core/status.h"
#include "io/model_config.h"
#include "io/safetensors_writer.h"

namespace dsinfer {

/// Most BPE merges the tiny tokenizer learns (its built-in corpus runs out of pairs sooner).
constexpr int kTinyTokenizerMerges = 752;

/// Random weights for every tensor of `config`'s manifest, quantised like the release: fp8 e4m3
/// with 32x32 e8m0 block scales, fp4 e2m1 experts with per-row e8m0 scales per 32, fp8 Engram
/// tables, bf16/f32 elsewhere. Deterministic in `seed`; each tensor's values depend only on
/// (seed, name), not on the order of the manifest.
/// `unwritten_above` >= 0: fp8/fp4 weight codes of more bytes than that are left unwritten (zeros,
/// sparse in the file; a benchmark fills them in on its device) with scales of 2^-9.
SafetensorsWriter make_random_weights(const ModelConfig& config, uint64_t seed, int64_t unwritten_above = -1);

/// Writes config.json, tokenizer.json, tokenizer_config.json and the weights (sharded with an
/// index, as the release) as the folder `dir`, replacing it whole if it exists
/// (io/atomic_file.h: write_folder_atomic; stale temporary folders of interrupted runs removed).
/// `max_seq_len` > 0 replaces the tiny config's context (4,096 positions), for long-context tests;
/// `ranks` > 1: the model made to divide among that many tensor-parallel ranks (tiny_model_config).
Status write_tiny_checkpoint(const std::filesystem::path& dir, uint64_t seed, int64_t max_seq_len = 0, int ranks = 1);
/// The same with another config for the tiny tokenizer (a variant of tiny_model_config's).
Status write_tiny_checkpoint(const std::filesystem::path& dir, uint64_t seed, const ModelConfig& config);

}  // namespace dsinfer
