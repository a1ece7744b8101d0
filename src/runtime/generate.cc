// generate (generate.h).
#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace dsinfer {

Result<GenerateStats> generate(Model& model, const Tokenizer& tokenizer, EngineRequest request,
                               const std::function<void(std::string_view)>& on_text,
                               const SpeculativeConfig& speculative) {
  using Clock = std::chrono::steady_clock;
  const int64_t prompt_tokens = static_cast<int64_t>(request.prompt.size());
  Engine engine(model, tokenizer,
                {.token_budget = std::max<int64_t>(prompt_tokens, 1) + speculative.draft_tokens,
                 .max_running = 1,
                 .speculative = speculative});
  GenerateStats stats;
  stats.prompt_tokens = prompt_tokens;
  FinishReason finish = FinishReason::kNone;
  std::string error_text;
  request.on_output = [&](const RequestOutput& out) {
    if (!out.text.empty()) on_text(out.text);
    if (out.finish == FinishReason::kNone) return;
    finish = out.finish, error_text = out.error, stats.generated_tokens = out.completion_tokens;
  };
  DSINFER_RETURN_IF_ERROR(engine.submit(std::move(request)).status());
  const auto t0 = Clock::now();
  bool more = engine.step();  // the prompt in one piece, then the first token
  const auto t1 = Clock::now();
  while (more) more = engine.step();
  stats.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  stats.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  if (finish == FinishReason::kError) return error(ErrorKind::kInternal, error_text);
  stats.stopped_by_token = finish == FinishReason::kStopToken;
  stats.stopped_by_string = finish == FinishReason::kStopString;
  const EngineStats es = engine.stats();
  stats.drafted_tokens = es.drafted_tokens, stats.accepted_tokens = es.accepted_tokens;
  stats.verify_steps = es.verify_steps;
  return stats;
}

}  // namespace dsinfer
