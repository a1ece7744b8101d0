// The generation loop.
#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "runtime/detokenizer.h"
#include "runtime/stop_strings.h"

namespace dsinfer {

Result<GenerateStats> generate(Model& model, const Tokenizer& tokenizer, const GenerateRequest& req,
                               const std::function<void(std::string_view)>& on_text) {
  const ModelConfig& c = model.config();
  if (req.prompt.empty()) return error(ErrorKind::kInvalidArgument, "the prompt is empty");
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
  if (req.max_tokens < 1 || total > c.max_seq_len)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("prompt of {} tokens + {} new tokens exceeds the context of {} tokens", req.prompt.size(),
                             req.max_tokens, c.max_seq_len));
  DSINFER_RETURN_IF_ERROR(req.sampling.validate());

  using Clock = std::chrono::steady_clock;
  GenerateStats stats;
  stats.prompt_tokens = static_cast<int64_t>(req.prompt.size());
  SequenceState seq = model.new_sequence();
  SamplerState sampler(req.sampling, 0x5EED, req.prompt);
  IncrementalDetokenizer detok(tokenizer);
  StopStringMatcher stops(req.stop_strings);
  std::vector<float> logits(c.vocab_size);
  std::vector<ForwardChunk> chunk(1);
  chunk[0].state = &seq;
  chunk[0].tokens = req.prompt;
  chunk[0].prompt_len = stats.prompt_tokens;
  auto t0 = Clock::now();
  DSINFER_RETURN_IF_ERROR(model.forward(chunk, logits));
  stats.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int step = 0; step < req.max_tokens; ++step) {
    const int32_t next = sampler.sample(logits);
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), next) != req.stop_ids.end()) {
      stats.stopped_by_token = true;
      break;
    }
    ++stats.generated_tokens;
    bool stopped = false;
    if (const std::string piece = stops.push(detok.push(next), &stopped); !piece.empty()) on_text(piece);
    if (stopped) {
      stats.stopped_by_string = true;
      break;
    }
    if (step + 1 == req.max_tokens) break;
    chunk[0].start_pos = seq.length;
    chunk[0].decode = true;
    chunk[0].tokens = {next};
    DSINFER_RETURN_IF_ERROR(model.forward(chunk, logits));
  }
  if (!stats.stopped_by_string) {
    bool stopped = false;
    std::string rest = stops.push(detok.flush(), &stopped);
    if (!stopped) rest += stops.flush();
    stats.stopped_by_string = stopped;
    if (!rest.empty()) on_text(rest);
  }
  stats.decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return stats;
}

}  // namespace dsinfer
