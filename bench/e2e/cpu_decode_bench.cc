// Batch-1 decode on the CPU backend with a synthetic ~2 GB V4.1-shaped model (random weights in
// the release format), next to the machine's memory bandwidth measured in the same run
// (STREAM-style copy). Prints ms/token, the bytes one step must read, and the achieved GB/s.
//   cpu_decode_bench [--layers N] [--steps N] [--threads N] [--dir PATH]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/safetensors_writer.h"
#include "model/model.h"
#include "model/tiny_model.h"
#include "model/tiny_tokenizer.h"
#include "model/weight_manifest.h"

using namespace dsinfer;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Copy bandwidth with `threads` threads over a buffer far larger than the caches (read + write).
double stream_copy_gbs(int threads) {
  const size_t bytes = size_t{512} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; ++i)
      ts.emplace_back([&, i] {
        const size_t chunk = bytes / threads;
        std::memcpy(b.data() + i * chunk, a.data() + i * chunk, chunk);
      });
    for (auto& t : ts) t.join();
    best = std::max(best, 2.0 * bytes / seconds_since(t0) / 1e9);
  }
  return best;
}

// Read-only bandwidth: every thread sums its slice (what a weight-streaming GEMV does).
double stream_read_gbs(int threads) {
  const size_t words = (size_t{1} << 30) / 8;
  std::vector<uint64_t> a(words, 3);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<uint64_t> sums(threads);
    const auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; ++i)
      ts.emplace_back([&, i] {
        const size_t chunk = words / threads;
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t j = i * chunk; j + 4 <= (i + 1) * chunk; j += 4)
          s0 += a[j], s1 += a[j + 1], s2 += a[j + 2], s3 += a[j + 3];
        sums[i] = s0 + s1 + s2 + s3;
      });
    for (auto& t : ts) t.join();
    best = std::max(best, words * 8.0 / seconds_since(t0) / 1e9);
    if (sums[0] == 42) std::printf(" ");  // keep the sums alive
  }
  return best;
}

ModelConfig synthetic_config(int layers, int vocab) {
  ModelConfig c;
  c.max_batch_size = 1;
  c.max_seq_len = 4096;
  c.vocab_size = vocab;
  c.dim = 2048;
  c.moe_inter_dim = 2048;
  c.n_layers = layers;
  c.n_mtp_layers = 0;
  c.n_heads = 16;
  c.head_dim = 512;
  c.rope_head_dim = 64;
  c.q_lora_rank = 512;
  c.o_groups = 4;
  c.o_lora_rank = 256;
  c.n_routed_experts = 8;
  c.n_activated_experts = 6;
  c.route_scale = 1.5;
  c.swiglu_limit = 10;
  c.window_size = 128;
  c.compress_ratios.assign(layers, 1);
  c.compress_ratios[0] = c.compress_ratios[1] = 0;
  for (int l = 2; l < layers / 2; ++l) c.compress_ratios[l] = 2;
  c.kv_source_layers = {2, layers / 2};
  c.index_source_layers = {2, layers / 2, layers / 2 + 2};
  c.candidate_source_layer = layers / 2;
  c.candidate_topk_blocks = 64;
  c.candidate_block_size = 8;
  c.index_n_heads = 8;
  c.index_head_dim = 128;
  c.index_topk = 128;
  c.original_seq_len = 4096;
  c.compress_rope_theta = 160000;
  c.rope_factor = 16;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 24, steps = 16, threads = 0;
  std::string dir = (std::filesystem::temp_directory_path() / "dsinfer_decode_bench").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--layers")
      layers = std::stoi(argv[i + 1]);
    else if (k == "--steps")
      steps = std::stoi(argv[i + 1]);
    else if (k == "--threads")
      threads = std::stoi(argv[i + 1]);
    else if (k == "--dir")
      dir = argv[i + 1];
  }
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  const double copy_gbs = stream_copy_gbs(threads), read_gbs = stream_read_gbs(threads);
  std::printf("machine: %d threads, memory copy %.1f GB/s (read + write counted), read-only %.1f GB/s\n", threads,
              copy_gbs, read_gbs);

  // The tiny tokenizer gives the vocab; the config is otherwise synthetic (no Engram: it needs
  // its own tables and is a host-side lookup either way).
  const Json tok = make_tiny_tokenizer_json(kTinyTokenizerMerges);
  auto vocab = TokenizerVocab::from_json(tok, "tokenizer");
  const ModelConfig c = synthetic_config(layers, vocab->size());
  if (Status s = c.validate(); !s.ok()) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "config.json")) {
    const auto t0 = Clock::now();
    if (Status s = make_random_weights(c, 1).write_sharded(dir, uint64_t{1} << 30); !s.ok())
      return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
    (void)write_file_atomic(std::filesystem::path(dir) / "tokenizer.json", tok.dump());
    (void)write_file_atomic(std::filesystem::path(dir) / "config.json", c.to_json().dump(1));
    std::printf("wrote the synthetic checkpoint in %.1f s\n", seconds_since(t0));
  }

  // Bytes a batch-1 decode step reads: every tensor except the unselected routed experts and the
  // embedding table (one row), plus the head.
  const auto manifest = build_weight_manifest(c);
  int64_t total = 0, active = 0;
  for (const TensorSpec& t : manifest) {
    total += t.bytes();
    if (t.name == "embed.weight") continue;
    active += t.part == Part::kRoutedExperts ? t.bytes() * c.n_activated_experts / c.n_routed_experts : t.bytes();
  }
  std::printf("model: %d layers, dim %d, %d experts (top-%d): %.2f GB of weights, %.2f GB read per decode step\n",
              layers, c.dim, c.n_routed_experts, c.n_activated_experts, total / 1e9, active / 1e9);

  CpuBackend backend(threads);
  LocalCommunicator comm;
  auto model = Model::load(dir, backend, comm);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().to_string().c_str()), 1;
  SequenceState seq = (*model)->new_sequence();
  std::vector<float> logits(c.vocab_size);
  std::vector<ForwardChunk> chunk(1);
  chunk[0].state = &seq;
  chunk[0].prompt_len = 16;
  for (int i = 0; i < 16; ++i) chunk[0].tokens.push_back(3 + i);
  if (Status s = (*model)->forward(chunk, logits); !s.ok())
    return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
  double best = 1e30, sum = 0;
  for (int step = 0; step < steps; ++step) {
    chunk[0].start_pos = seq.length;
    chunk[0].decode = true;
    chunk[0].tokens = {static_cast<int32_t>(3 + step)};
    const auto t0 = Clock::now();
    if (Status s = (*model)->forward(chunk, logits); !s.ok())
      return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
    const double dt = seconds_since(t0);
    best = std::min(best, dt), sum += dt;
  }
  const double mean = sum / steps;
  const double achieved = active / mean / 1e9;
  std::printf(
      "decode batch 1: %.1f ms/token mean (%.1f best), %.2f tok/s, %.2f GB/s achieved = %.0f%% of the read "
      "bandwidth, %.0f%% of the copy bandwidth\n",
      mean * 1e3, best * 1e3, 1.0 / mean, achieved, 100.0 * achieved / read_gbs, 100.0 * achieved / copy_gbs);
  return 0;
}
