// The host's part of a decode step of the V4.1-Flash-shaped model (bench/e2e/synthetic_model.h,
// 40 layers at real dimensions), measured on any machine: the model runs on a backend whose ops do
// nothing (its memory is host memory, its copies are memcpy), so a step's time is what the host
// does for it besides the driver's calls: the model's bookkeeping and argument building, and
// with the step recorder (runtime/step_recorder.h) the comparisons that find the recording to
// relaunch. The backend keeps steps as CudaBackend's graphs do (a relaunch costs it nothing here),
// so "recorded" rows are what a replayed GPU step costs the host before its one graph launch.
// --prefill P1,P2 also times the host's part of a fresh prompt's first chunk of each length (the
// Engram lookups, the bookkeeping; what the device's reads back would give is zeros here).
//   host_step_bench [--steps N] [--context 4096,32768] [--batch 1,64] [--prefill 4096] [--dir PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "e2e/synthetic_model.h"
#include "model/model.h"
#include "runtime/model_runner.h"

using namespace dsinfer;
using Clock = std::chrono::steady_clock;

namespace {

// Memory as the CPU backend's, every op a no-op; counts the calls.
class NullBackend final : public Backend, private StepGraphs {
 public:
  int64_t calls = 0;
  Device device() const override { return Device::kCpu; }
  void* allocate(size_t bytes) override {
    return std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  }
  void deallocate(void* p) override { std::free(p); }
  // Zeroing and copies within the "device" are the device's work (a launch each on the GPU): counted,
  // not done. An upload costs the host what the driver does with pageable memory, a copy into its
  // staging buffer (the "device" memory itself stays unwritten: the ops that would read it do nothing).
  void zero(void*, size_t) override { ++calls; }
  void copy_to_device(void*, const void* src, size_t bytes) override {
    for (size_t at = 0; at < bytes; at += staging_.size())
      std::memcpy(staging_.data(), static_cast<const uint8_t*>(src) + at, std::min(staging_.size(), bytes - at));
    ++calls;
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_on_device(void*, const void*, size_t) override { ++calls; }
  StepGraphs* step_graphs() override { return this; }
  // As a device backend's (device_host_thread_count).
  ThreadPool* host_threads() override { return &threads_; }

  // routed_experts too: on the device's choice, as CudaBackend runs a decode step's.
#define DSINFER_COUNT_OP(name, Args) \
  void name(const Args&) override {  \
    ++calls;                         \
  }
  DSINFER_OPS(DSINFER_COUNT_OP)
#undef DSINFER_COUNT_OP

 private:
  bool begin_capture() override {
    return true;
  }
  uint64_t end_capture(bool run) override {
    return run ? 1 : 0;
  }
  bool relaunch(uint64_t, std::span<const std::span<const uint8_t>>) override {
    return true;
  }
  void release(uint64_t) override {}
  // The recorder at every batch.
  int64_t max_step_tokens() const override {
    return INT64_MAX;
  }
  std::vector<uint8_t> staging_ = std::vector<uint8_t>(size_t{2} << 20);
  ThreadPool threads_{device_host_thread_count()};
};

std::vector<int> int_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::stoi(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int steps = 64;
  std::vector<int> contexts = {4096, 32768}, batches = {1}, prefills;
  std::string dir = (std::filesystem::temp_directory_path() / "dsinfer_flash_bench").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--steps")
      steps = std::stoi(argv[i + 1]);
    else if (k == "--context")
      contexts = int_list(argv[i + 1]);
    else if (k == "--batch")
      batches = int_list(argv[i + 1]);
    else if (k == "--prefill")
      prefills = int_list(argv[i + 1]);
    else if (k == "--dir")
      dir = argv[i + 1];
  }
  int max_context = *std::max_element(contexts.begin(), contexts.end());
  if (!prefills.empty()) max_context = std::max(max_context, *std::max_element(prefills.begin(), prefills.end()));
  auto made = ensure_synthetic_checkpoint(dir, 40, max_context + steps + 8, /*flash_experts=*/64);
  if (!made.ok()) return std::fprintf(stderr, "%s\n", made.status().to_string().c_str()), 1;
  NullBackend backend;
  LocalCommunicator comm;
  auto model = Model::load(dir, backend, comm);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().to_string().c_str()), 1;
  const ModelConfig& c = (*model)->config();
  ModelRunner runner(**model);
  const std::vector<uint16_t> rows(static_cast<size_t>(std::max(max_context, c.window_size)) * c.head_dim, 0x3F80);

  std::printf(
      "| context | batch | steps | recorder | host ms a step: mean / best | calls issued to the backend a step | "
      "relaunched / recorded |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const int context : contexts)
    for (const int batch : batches)
      for (const bool recorded : {false, true}) {
        runner.set_replay_steps(recorded);
        std::vector<SequenceState> seqs;
        for (int b = 0; b < batch; ++b) seqs.push_back(filled_sequence(**model, rows, context));
        std::vector<ForwardChunk> chunk(batch);
        std::vector<float> logits(static_cast<size_t>(batch) * c.vocab_size);
        double sum = 0, best = 1e30;
        int64_t calls = 0;
        StepRecorder::Stats before;
        for (int step = -3; step < steps; ++step) {  // warm-up: the arena, then a recording of each step shape
          if (step == 0) before = runner.step_stats(), calls = backend.calls;
          for (int b = 0; b < batch; ++b) {
            chunk[b].state = &seqs[b], chunk[b].start_pos = seqs[b].length, chunk[b].decode = true;
            chunk[b].tokens = {static_cast<int32_t>(3 + (step + b + 8) % 200)};
          }
          const auto t0 = Clock::now();
          if (Status s = runner.forward(chunk, logits); !s.ok())
            return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
          const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
          if (step >= 0) sum += dt, best = std::min(best, dt);
        }
        const StepRecorder::Stats& after = runner.step_stats();
        std::printf("| %d | %d | %d | %s | %.3f / %.3f | %lld | %lld / %lld |\n", context, batch, steps,
                    recorded ? "on" : "off", sum / steps * 1e3, best * 1e3,
                    static_cast<long long>((backend.calls - calls) / steps),
                    static_cast<long long>(after.relaunched - before.relaunched),
                    static_cast<long long>(after.recorded - before.recorded));
      }
  if (prefills.empty()) return 0;
  std::printf("\n| prompt chunk | chunks | host ms a chunk: mean / best | calls issued to the backend a chunk |\n");
  std::printf("| --- | --- | --- | --- |\n");
  runner.set_replay_steps(false);
  const int chunks = std::max(1, steps / 16);
  for (const int prompt : prefills) {
    std::vector<float> last(c.vocab_size);
    double sum = 0, best = 1e30;
    int64_t calls = 0;
    for (int i = -1; i < chunks; ++i) {  // warm-up: the arena at this chunk's size
      SequenceState seq = (*model)->new_sequence();
      std::vector<ForwardChunk> one(1);
      one[0].state = &seq, one[0].prompt_len = prompt;
      for (int t = 0; t < prompt; ++t) one[0].tokens.push_back(3 + (t + i) % 200);
      if (i == 0) calls = backend.calls;
      const auto t0 = Clock::now();
      if (Status s = runner.forward(one, last); !s.ok()) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (i >= 0) sum += dt, best = std::min(best, dt);
    }
    std::printf("| %d | %d | %.1f / %.1f | %lld |\n", prompt, chunks, sum / chunks * 1e3, best * 1e3,
                static_cast<long long>((backend.calls - calls) / chunks));
  }
  return 0;
}
