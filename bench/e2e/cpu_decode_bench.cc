// Batch-1 decode on the CPU backend with a synthetic ~2 GB V4.1-shaped model (random weights in
// the release format), next to the machine's memory bandwidth measured in the same run
// (STREAM-style copy). Prints ms/token, the bytes one step must read, and the achieved GB/s.
//   cpu_decode_bench [--layers N] [--steps N] [--threads N] [--dir PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "e2e/synthetic_model.h"
#include "model/model.h"

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
  steps = std::max(steps, 1);
  const double copy_gbs = stream_copy_gbs(threads), read_gbs = stream_read_gbs(threads);
  std::printf("machine: %d threads, memory copy %.1f GB/s (read + write counted), read-only %.1f GB/s\n", threads,
              copy_gbs, read_gbs);

  auto made = ensure_synthetic_checkpoint(dir, layers);
  if (!made.ok()) return std::fprintf(stderr, "%s\n", made.status().to_string().c_str()), 1;
  const ModelConfig& c = made->config;
  const int64_t active = made->decode_read_bytes;
  std::printf("model: %d layers, dim %d, %d experts (top-%d): %.2f GB of weights, %.2f GB read per decode step\n",
              layers, c.dim, c.n_routed_experts, c.n_activated_experts, made->weight_bytes / 1e9, active / 1e9);

  CpuBackendOptions options;  // DSINFER_CPU_ISA caps the instruction set, as in the CLI
  if (const char* isa = std::getenv("DSINFER_CPU_ISA")) options.isa_cap = cpu::isa_by_name(isa);
  CpuBackend backend(threads, options);
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
  std::vector<double> times;
  for (int step = 0; step < steps; ++step) {
    chunk[0].start_pos = seq.length;
    chunk[0].decode = true;
    chunk[0].tokens = {static_cast<int32_t>(3 + step)};
    const auto t0 = Clock::now();
    if (Status s = (*model)->forward(chunk, logits); !s.ok())
      return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
    const double dt = seconds_since(t0);
    times.push_back(dt);
    if (std::getenv("DSINFER_BENCH_STEPS")) std::printf("step %d: %.1f ms\n", step, dt * 1e3);
  }
  // The VM's speed drifts between runs and within one (neighbours): the median is shown next to
  // the mean, and both against the bandwidth measured in the same run.
  const double mean = std::accumulate(times.begin(), times.end(), 0.0) / steps;
  std::sort(times.begin(), times.end());
  const double median = times[steps / 2], best = times.front();
  const auto pct = [&](double t) { return 100.0 * active / t / 1e9 / read_gbs; };
  std::printf(
      "decode batch 1: %.1f ms/token mean (median %.1f, best %.1f), %.2f tok/s, %.2f GB/s achieved = %.0f%% of the "
      "read bandwidth (median step: %.0f%%), %.0f%% of the copy bandwidth\n",
      mean * 1e3, median * 1e3, best * 1e3, 1.0 / mean, active / mean / 1e9, pct(mean), pct(median),
      100.0 * active / mean / 1e9 / copy_gbs);
  return 0;
}
