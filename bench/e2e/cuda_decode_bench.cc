// Decode on the CUDA backend with the synthetic V4.1-shaped model (bench/e2e/synthetic_model.h):
// ms per step at several batch sizes and contexts, the weight bytes a batch-1 step must read and
// the bandwidth that implies, next to the device-to-device copy bandwidth measured in the same run.
// The caches of a context are filled with random rows (as a prefill would leave them, without
// running one), so long contexts cost no prefill time.
// --flash E: the V4.1-Flash-shaped model (40 layers at real dimensions, E routed experts; its big
// weight codes are written as holes and filled with random codes on the GPU after loading).
// --prefill P1,P2: also time the prefill of fresh prompts of those lengths, in chunks of --chunk
// (after one untimed chunk). A model with the DSpark drafter also times its calls (greedy, and with
// the drafts sampled on the host a row at a time) and a verify
// step of 1 .. verify_tokens tokens a sequence at each batch; --drafter-only 1 leaves the decode
// table out (a profiler's run). --timeline B1,B2: each kernel's exclusive time in a launched step
// of those batches at the first context (bench/e2e/kernel_timeline.h: CUPTI's records of the steps
// as they ran, the mean of --steps), after the table; --timeline-prefill 1: the same for the
// first timed prompt of --prefill (all its chunks; the recording slows the host a little).
// --readback: what a decode step reads back of each row: `whole` (the default: the logits, as for
// a row the host samples from), `pick` (the greedy pick) or `draw` (a draw at temperature 1, top-p
// 0.95 on the device: Backend::draw_tokens); several, comma-separated: a row of the table each.
//   cuda_decode_bench [--layers N] [--flash E] [--steps N] [--batch 1,8,32] [--context 128,4096]
//                     [--prefill 4096] [--chunk 4096] [--drafter-only 1] [--timeline 1,64]
//                     [--timeline-prefill 1] [--readback whole,pick,draw] [--dir PATH]
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/float_formats.h"
#include "core/hash.h"
#include "e2e/kernel_timeline.h"
#include "e2e/synthetic_model.h"
#include "model/model.h"
#include "runtime/model_runner.h"
#include "runtime/sampler.h"

using namespace dsinfer;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::string> word_list(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(item);
  return v;
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> v;
  for (const std::string& item : word_list(s)) v.push_back(std::stoi(item));
  return v;
}

// Device-to-device copy of 1 GiB, read + write bytes counted (the convention of the kernel tables).
double copy_tbs() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  float best = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (rep) best = std::min(best, ms);
  }
  cudaFree(a), cudaFree(b);
  return 2.0 * bytes / (best * 1e-3) / 1e12;
}

// The weight codes the Flash-shaped checkpoint left unwritten: random e4m3 codes below 2 in
// magnitude (exponent field < 8: no NaN, no overflow through 40 layers) and random e2m1 bytes.
void fill_unwritten_weights(const Model& model, Backend& backend) {
  std::vector<uint8_t> e4m3(size_t{64} << 20), e2m1(e4m3.size());
  std::mt19937_64 rng(11);
  for (size_t i = 0; i < e4m3.size(); i += 8) {
    const uint64_t r = rng();
    for (int b = 0; b < 8; ++b)
      e4m3[i + b] = static_cast<uint8_t>(r >> (8 * b)) & 0xBF, e2m1[i + b] = r >> (8 * b) >> 3;
  }
  size_t offset = 0;
  for_each_backend_view(model.weights(), [&](const TensorView& v) {
    // fp4 experts keep their storage dtype (I8 or U8: two codes a byte).
    const bool fp8 = v.dtype == DType::kF8E4M3, fp4 = v.dtype == DType::kI8 || v.dtype == DType::kU8;
    const int64_t bytes = dtype_bytes(v.dtype, v.numel());
    if (!v.data || (!fp8 && !fp4) || bytes <= kUnwrittenAbove) return;
    const std::vector<uint8_t>& src = fp8 ? e4m3 : e2m1;
    for (int64_t done = 0; done < bytes;) {
      const size_t n = std::min<size_t>(bytes - done, src.size() / 2);
      offset = (offset + 4099) % (src.size() / 2);  // a different stretch for every copy
      backend.copy_to_device(static_cast<uint8_t*>(v.data) + done, src.data() + offset, n);
      done += static_cast<int64_t>(n);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows survive a run cut short by a time limit
  int layers = 24, steps = 8, flash_experts = 0, chunk = 4096;
  std::vector<int> batches = {1, 8, 32}, contexts = {128, 4096}, prefills, timeline_batches;
  bool drafter_only = false;      // the drafter's table alone (for a profiler)
  bool timeline_prefill = false;  // the first timed prompt's kernels (--timeline-prefill)
  std::string dir;
  std::vector<std::string> readbacks = {"whole"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--layers")
      layers = std::stoi(argv[i + 1]);
    else if (k == "--steps")
      steps = std::stoi(argv[i + 1]);
    else if (k == "--batch")
      batches = int_list(argv[i + 1]);
    else if (k == "--context")
      contexts = int_list(argv[i + 1]);
    else if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--flash")
      flash_experts = std::stoi(argv[i + 1]);
    else if (k == "--prefill")
      prefills = int_list(argv[i + 1]);
    else if (k == "--chunk")
      chunk = std::stoi(argv[i + 1]);
    else if (k == "--timeline")
      timeline_batches = int_list(argv[i + 1]);
    else if (k == "--timeline-prefill")
      timeline_prefill = std::stoi(argv[i + 1]) != 0;
    else if (k == "--readback")
      readbacks = word_list(argv[i + 1]);
    else if (k == "--drafter-only")
      drafter_only = std::stoi(argv[i + 1]) != 0;
  }
#ifndef DSINFER_BENCH_CUPTI
  if (!timeline_batches.empty() || timeline_prefill)
    return std::fprintf(stderr,
                        "--timeline, --timeline-prefill: this build has no CUPTI (CMake did not find CUDA::cupti)\n"),
           1;
#endif
  for (const std::string& r : readbacks)
    if (r != "whole" && r != "pick" && r != "draw")
      return std::fprintf(stderr, "--readback: whole, pick or draw, not '%s'\n", r.c_str()), 1;
  if (flash_experts > 0) layers = 40;
  if (dir.empty())
    dir = (std::filesystem::temp_directory_path() /
           (flash_experts > 0 ? "dsinfer_flash_bench" : "dsinfer_cuda_decode_bench"))
              .string();
  int max_context = *std::max_element(contexts.begin(), contexts.end());
  if (!prefills.empty()) max_context = std::max(max_context, *std::max_element(prefills.begin(), prefills.end()));
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const double copy = copy_tbs();
  std::printf("device: %s, %d SMs; device-to-device copy %.2f TB/s (read + write counted)\n", prop.name,
              prop.multiProcessorCount, copy);

  auto made = ensure_synthetic_checkpoint(dir, layers, max_context + steps + 8, flash_experts);
  if (!made.ok()) return std::fprintf(stderr, "%s\n", made.status().to_string().c_str()), 1;
  const ModelConfig& c = made->config;
  const int64_t active = made->decode_read_bytes;
  std::printf("model: %d layers, dim %d, %d experts (top-%d): %.2f GB of weights, %.2f GB read per batch-1 step\n",
              layers, c.dim, c.n_routed_experts, c.n_activated_experts, made->weight_bytes / 1e9, active / 1e9);

  // The DSINFER_CUDA_* switches as the CLI reads them, with graphs kept: whether a step runs as
  // one is the model's step recorder's choice, switched on and off below on the one loaded model.
  CudaBackendOptions options = CudaBackendOptions::from_switches(std::getenv);
  options.graph_tokens = CudaBackendOptions::kDeviceRoutedTokens;  // graphs measured at every batch
  CudaBackend backend(options);
  LocalCommunicator comm;
  const auto t0 = Clock::now();
  auto model = Model::load(dir, backend, comm);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().to_string().c_str()), 1;
  if (flash_experts > 0) fill_unwritten_weights(**model, backend);
  ModelRunner runner(**model);
  std::printf("loaded and copied to the GPU in %.1f s\n", std::chrono::duration<double>(Clock::now() - t0).count());
  // Weight bytes a step of `batch` tokens reads: everything but the unselected experts, with the
  // experts a batch selects counted as uniform routing would pick them.
  const int64_t expert_bytes = made->routed_expert_bytes / c.n_routed_experts / c.n_layers;
  const auto step_bytes = [&](int batch) {
    const double k = c.n_activated_experts, e = c.n_routed_experts;
    const double distinct = e * (1.0 - std::pow(1.0 - k / e, batch));
    return static_cast<double>(active) + (distinct - k) * expert_bytes * c.n_layers;
  };

  std::vector<uint16_t> pool(static_cast<size_t>(std::max(max_context, c.window_size)) * c.head_dim);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (uint16_t& x : pool) x = f32_to_bf16(normal(rng));

  std::printf(
      "| context | batch | steps | ms/step mean | ms/step best | tokens/s | weight bytes / step (expected) | bandwidth "
      "| "
      "per step: kernels, allocations, uploads, downloads (host waiting) | steps relaunched as graphs / recorded; "
      "graphs made; device ms a step (its graph replayed) |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::vector<std::pair<int, std::vector<bench::KernelSpan>>> timelines;  // (batch, its steps' kernels)
  for (const int context : contexts)
    for (const int batch : drafter_only ? std::vector<int>{} : batches)
      for (const std::string& readback : readbacks)
        for (const bool graphs : {false, true}) {  // each batch's steps also as CUDA graphs
          runner.set_replay_steps(graphs);         // the step recorder in front of the backend's graphs, or none
          std::vector<SequenceState> seqs;
          for (int b = 0; b < batch; ++b) seqs.push_back(filled_sequence(**model, pool, context));
          std::vector<ForwardChunk> chunks(batch);
          std::vector<float> logits(static_cast<size_t>(batch) * c.vocab_size);
          const RowReadback kind = readback == "pick"   ? RowReadback::kPick
                                   : readback == "draw" ? RowReadback::kDraw
                                                        : RowReadback::kWhole;
          const std::vector<RowReadback> rows(batch, kind);
          std::vector<int32_t> picks(batch);
          std::vector<RowDraw> draws;
          double sum = 0, best = 1e30;
          CudaBackend::Stats before;
          StepRecorder::Stats steps_before;
          // Steps -4 .. -1 warm up: the allocator's pool and the experts' tables (CudaBackend runs its
          // first single-token step as it is), then with graphs the recorder's arena, the graphs'
          // upload buffer and a kept graph of each of the two shapes decode steps alternate between
          // (at a context of a multiple of 1024 the ratio-2 layers' padded width grows at step -3).
          const auto decode_step = [&](int step) {
            for (int b = 0; b < batch; ++b) {
              chunks[b].state = &seqs[b];
              chunks[b].start_pos = seqs[b].length;
              chunks[b].decode = true;
              chunks[b].tokens = {static_cast<int32_t>(3 + (step + b + 8) % 200)};
            }
            draws.clear();
            if (kind == RowReadback::kDraw)
              for (int b = 0; b < batch; ++b)
                draws.push_back({b, {.top_p = 0.95f, .bits = mix64(static_cast<uint64_t>(step * 1000 + b))}});
            return runner.forward(chunks, LogitsReadback{logits, rows, picks, draws});
          };
          for (int step = -4; step < steps; ++step) {
            if (step == 0) before = backend.stats(), steps_before = runner.step_stats();
            const auto s0 = Clock::now();
            if (Status s = decode_step(step); !s.ok()) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
            const double dt = std::chrono::duration<double>(Clock::now() - s0).count();
            if (step >= 0) sum += dt, best = std::min(best, dt);
          }
          const double mean = sum / steps;
          const CudaBackend::Stats& after = backend.stats();
          const double bytes = step_bytes(batch);
          const int64_t captured = after.graph_steps - before.graph_steps;
          const double replay = captured ? backend.replay_last_step(steps) : 0;
          std::printf(
              "| %d | %d | %s | %.2f | %.2f | %.1f | %.2f GB | %.0f GB/s = %.1f %% of copy | %lld, %lld, %lld, %lld "
              "(%.1f "
              "ms) | ",
              context, batch,
              (std::string(graphs ? "graphs" : "launched") + (readbacks.size() > 1 ? ", " + readback : "")).c_str(),
              mean * 1e3, best * 1e3, batch / mean, bytes / 1e9, bytes / mean / 1e9, 100.0 * bytes / mean / 1e12 / copy,
              static_cast<long long>((after.ops - before.ops) / steps),
              static_cast<long long>((after.allocations - before.allocations) / steps),
              static_cast<long long>((after.uploads - before.uploads) / steps),
              static_cast<long long>((after.downloads - before.downloads) / steps),
              (after.download_wait_s - before.download_wait_s) / steps * 1e3);
          const StepRecorder::Stats& steps_after = runner.step_stats();
          if (captured)
            std::printf("%lld / %lld; %lld; %.2f |\n",
                        static_cast<long long>(steps_after.relaunched - steps_before.relaunched),
                        static_cast<long long>(steps_after.recorded - steps_before.recorded),
                        static_cast<long long>(after.graph_instantiations - before.graph_instantiations), replay * 1e3);
          else
            std::printf("- |\n");
#ifdef DSINFER_BENCH_CUPTI
          if (!graphs && context == contexts.front() && readback == readbacks.front() &&
              std::find(timeline_batches.begin(), timeline_batches.end(), batch) != timeline_batches.end()) {
            // Fresh sequences at the same context (the checkpoint's length holds the table's steps): two
            // steps to warm up, then the recorded ones.
            for (SequenceState& seq : seqs) seq = filled_sequence(**model, pool, context);
            for (int step = -2; step < steps; ++step) {
              if (step == 0 && !bench::timeline_start()) return 1;
              if (Status s = decode_step(step); !s.ok()) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
            }
            timelines.emplace_back(batch, bench::timeline_stop());
          }
#endif
        }
#ifdef DSINFER_BENCH_CUPTI
  for (const auto& [batch, spans] : timelines) {
    std::printf("\nbatch %d, context %d, launched:\n", batch, contexts.front());
    bench::print_timeline(spans, steps);
  }
#endif
  // The DSpark drafter's own cost a call: each sequence's main hidden row of its last position into
  // the rings, then a block of drafts (the 3 stages over 5 rows, the head, the Markov chain).
  if ((*model)->has_drafter() && !batches.empty()) {
    std::printf(
        "\n| drafter: batch | context | ms a call (mean of %d) | drafts sampled (temperature 1, top-p 0.95) |\n"
        "| --- | --- | --- | --- |\n",
        steps);
    const int64_t B = c.dspark_block_size, width = (*model)->main_hidden_width();
    for (const int batch : batches) {
      const int context = contexts.front();
      std::vector<SequenceState> seqs;
      for (int b = 0; b < batch; ++b) seqs.push_back(filled_sequence(**model, pool, context));
      std::vector<uint16_t> rows(static_cast<size_t>(batch) * width);
      for (uint16_t& x : rows) x = f32_to_bf16(normal(rng));
      DeviceArray<uint16_t> hidden(backend, std::span<const uint16_t>(rows));
      auto tokens = DeviceArray<int32_t>::uninitialized(backend, batch * (B + 1));
      auto base = DeviceArray<float>::uninitialized(backend, batch * B * c.vocab_size);
      auto confidence = DeviceArray<float>::uninitialized(backend, batch * B);
      std::vector<DraftChunk> draft(batch);
      for (int b = 0; b < batch; ++b) draft[b] = {&seqs[b], context - 1, 1, b, true, 3 + b};
      // Sampled drafts: the chain a row at a time, each row read back and drawn from on the host.
      SamplingParams params;
      params.top_p = 0.95f;
      std::vector<SamplerState> samplers(batch, SamplerState(params, 1, {}));
      TokenDistribution law;
      DraftSampling sampled{
          {}, B, [&](int64_t k, int64_t, std::span<const float> row) { return samplers[k].draw_draft(row, &law); }};
      for (int b = 0; b < batch; ++b) sampled.chunks.push_back(b);
      std::printf("| %d | %d |", batch, context);
      const DraftSampling greedy;
      for (const DraftSampling* sampling : {&greedy, static_cast<const DraftSampling*>(&sampled)}) {
        double sum = 0;
        for (int call = -2; call < steps; ++call) {
          const auto s0 = Clock::now();
          if (Status s = (*model)->draft(
                  draft, hidden.view(DType::kBF16, {batch, width}),
                  {tokens.view(DType::kI32, {batch, B + 1}), base.view(DType::kF32, {batch, B, c.vocab_size}),
                   confidence.view(DType::kF32, {batch, B})},
                  {}, *sampling);
              !s.ok())
            return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
          (void)tokens.download();  // the call's end
          if (call >= 0) sum += std::chrono::duration<double>(Clock::now() - s0).count();
        }
        std::printf(" %.2f |", sum / steps * 1e3);
      }
      std::printf("\n");
    }
  }
  // A speculative verify step: every sequence's chunk of k tokens at decode positions (the anchor
  // and k - 1 drafts), its logits for all k; then each sequence goes back to where it was.
  if ((*model)->has_drafter() && !batches.empty()) {
    std::printf("\n| verify: batch | context | ms a step for k = 1 .. %d tokens a sequence (mean of %d) |\n",
                c.verify_tokens(), steps);
    std::printf("| --- | --- | --- |\n");
    for (const int batch : batches) {
      const int context = contexts.front();
      std::vector<SequenceState> seqs;
      for (int b = 0; b < batch; ++b) seqs.push_back(filled_sequence(**model, pool, context));
      std::printf("| %d | %d |", batch, context);
      for (int k = 1; k <= c.verify_tokens(); ++k) {
        std::vector<ForwardChunk> chunks(batch);
        std::vector<float> logits(static_cast<size_t>(batch) * k * c.vocab_size);
        double sum = 0;
        for (int step = -2; step < steps; ++step) {
          for (int b = 0; b < batch; ++b) {
            chunks[b] = {&seqs[b], context, {}, false, 0, /*verify=*/true};
            for (int i = 0; i < k; ++i) chunks[b].tokens.push_back(3 + (step + b + i + 8) % 200);
          }
          const auto s0 = Clock::now();
          if (Status s = (*model)->forward(chunks, logits); !s.ok())
            return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
          if (step >= 0) sum += std::chrono::duration<double>(Clock::now() - s0).count();
          for (SequenceState& seq : seqs)
            if (Status s = (*model)->truncate(seq, context); !s.ok())
              return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
        }
        std::printf(" %.2f%s", sum / steps * 1e3, k < c.verify_tokens() ? "," : " |\n");
      }
    }
  }
  // Prefill: fresh prompts in chunks of `chunk` tokens (as the server's token budget feeds them).
  // FLOPs per token: 2 per weight of every linear the token passes (6 routed experts of each layer).
  const double linear_flops = 2.0 * made->token_weights;
  // A process's first prefill chunk also pays for what stays (cuBLAS's plans, the allocator's pool,
  // the scratch buffers at chunk sizes): one untimed chunk first, so that each prompt's time is the
  // steady one.
  if (!prefills.empty()) {
    SequenceState seq = (*model)->new_sequence();
    std::vector<ForwardChunk> one(1);
    one[0].state = &seq;
    one[0].prompt_len = std::min(prefills.front(), chunk);
    for (int t = 0; t < one[0].prompt_len; ++t) one[0].tokens.push_back(3 + t % 200);
    std::vector<float> last(c.vocab_size);
    if (Status s = (*model)->forward(one, last); !s.ok()) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
  }
  for (const int prompt : prefills) {
    SequenceState seq = (*model)->new_sequence();
    std::vector<float> last(c.vocab_size);
    const CudaBackend::Stats before = backend.stats();
    [[maybe_unused]] const bool recorded = timeline_prefill && prompt == prefills.front();
#ifdef DSINFER_BENCH_CUPTI
    if (recorded && !bench::timeline_start()) return 1;
#endif
    const auto p0 = Clock::now();
    cudaProfilerStart();  // a profiler started with --profile-from-start off sees the timed prompts only
    for (int at = 0; at < prompt; at += chunk) {
      std::vector<ForwardChunk> one(1);
      one[0].state = &seq;
      one[0].start_pos = at;
      one[0].prompt_len = prompt;
      for (int t = at; t < std::min(prompt, at + chunk); ++t) one[0].tokens.push_back(3 + t % 200);
      if (Status s = (*model)->forward(one, last); !s.ok())
        return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
    }
    const double dt = std::chrono::duration<double>(Clock::now() - p0).count();
    cudaProfilerStop();
    const CudaBackend::Stats& after = backend.stats();
    std::printf(
        "prefill %d tokens (chunks of %d): %.2f s, %.0f tokens/s, %.1f TFLOP/s in the linears (%.1f GFLOP/token); "
        "%lld kernels, %lld downloads (%.2f s waiting)\n",
        prompt, chunk, dt, prompt / dt, linear_flops * prompt / dt / 1e12, linear_flops / 1e9,
        static_cast<long long>(after.ops - before.ops), static_cast<long long>(after.downloads - before.downloads),
        after.download_wait_s - before.download_wait_s);
#ifdef DSINFER_BENCH_CUPTI
    if (recorded) {
      std::printf("\nprefill of %d tokens as it ran (chunks of %d):\n", prompt, chunk);
      bench::print_timeline(bench::timeline_stop(), 1, 30);
    }
#endif
  }
  return 0;
}
