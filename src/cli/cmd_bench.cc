// `dsinfer bench`: prefill and decode throughput of a model folder for given prompt lengths and
// batch sizes (random prompt tokens; the numbers do not depend on the text).
#include <chrono>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "cli/commands.h"
#include "model/model.h"

namespace dsinfer::cli {
namespace {

struct BenchOptions {
  std::string model;
  BackendFlags backend;
  std::vector<int> prompt_lengths = {128};
  std::vector<int> batch_sizes = {1};
  int decode_steps = 16;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int run_bench(const BenchOptions& o) {
  auto loaded = load_model(o.model, o.backend, "bench");
  if (!loaded.ok()) return report_error(loaded.status());
  Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  fmt::print("{:>8} {:>6} {:>14} {:>14} {:>12}\n", "prompt", "batch", "prefill tok/s", "decode tok/s", "ms/step");
  std::mt19937 rng(1);
  for (int len : o.prompt_lengths)
    for (int batch : o.batch_sizes) {
      if (len + o.decode_steps > c.max_seq_len)
        return report_error(error(ErrorKind::kInvalidArgument, fmt::format("prompt {} + {} steps exceed max_seq_len {}",
                                                                           len, o.decode_steps, c.max_seq_len)));
      std::vector<SequenceState> seqs;
      for (int b = 0; b < batch; ++b) seqs.push_back(model.new_sequence());
      std::vector<ForwardChunk> chunks(batch);
      for (int b = 0; b < batch; ++b) {
        chunks[b].state = &seqs[b];
        chunks[b].prompt_len = len;
        for (int i = 0; i < len; ++i) chunks[b].tokens.push_back(static_cast<int32_t>(rng() % c.vocab_size));
      }
      std::vector<float> logits(static_cast<size_t>(batch) * c.vocab_size);
      auto t0 = Clock::now();
      if (Status s = model.forward(chunks, logits); !s.ok()) return report_error(s);
      const double prefill = since(t0);
      for (auto& ch : chunks) ch.decode = true, ch.tokens = {1};
      t0 = Clock::now();
      for (int step = 0; step < o.decode_steps; ++step) {
        for (auto& ch : chunks)
          ch.start_pos = ch.state->length, ch.tokens = {static_cast<int32_t>(rng() % c.vocab_size)};
        if (Status s = model.forward(chunks, logits); !s.ok()) return report_error(s);
      }
      const double decode = since(t0);
      fmt::print("{:>8} {:>6} {:>14.1f} {:>14.2f} {:>12.2f}\n", len, batch, len * batch / prefill,
                 o.decode_steps * batch / decode, 1e3 * decode / o.decode_steps);
    }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill and decode throughput for prompt lengths x batch sizes");
  cmd->add_option("--model", o->model, "Model folder")->required();
  cmd->add_option("--prompt-lengths", o->prompt_lengths, "Prompt lengths")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch-sizes", o->batch_sizes, "Batch sizes")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--decode-steps", o->decode_steps, "Decode steps timed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_backend_flags(cmd, o->backend);
  cmd->callback([o, &result] { result.exit_code = run_bench(*o); });
}

}  // namespace dsinfer::cli
