#include "runtime/engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/detokenizer.h"
#include "runtime/stop_strings.h"

namespace dsinfer {

struct Engine::Live {
  EngineRequest req;
  SequenceState state;
  SamplerState sampler;
  IncrementalDetokenizer detok;
  StopStringMatcher stops;
  int32_t last_token = -1;  // the token the next decode feeds
  int64_t generated = 0;
  Live(EngineRequest r, const Model& model, const Tokenizer& tok, uint64_t id)
      : req(std::move(r)), state(model.new_sequence()), sampler(req.sampling, 0x5EED ^ id, req.prompt), detok(tok),
        stops(req.stop_strings) {}
};

Engine::Engine(Model& model, const Tokenizer& tokenizer, SchedulerConfig config)
    : model_(model), tokenizer_(tokenizer), scheduler_(config) {}

Engine::~Engine() = default;

Result<uint64_t> Engine::submit(EngineRequest request) {
  const int64_t context = model_.config().max_seq_len;
  if (request.prompt.empty()) return error(ErrorKind::kInvalidArgument, "the prompt is empty");
  if (request.max_tokens < 1) return error(ErrorKind::kInvalidArgument, "max_tokens must be >= 1");
  if (static_cast<int64_t>(request.prompt.size()) + request.max_tokens > context)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("prompt of {} tokens + {} new tokens exceeds the context of {} tokens",
                             request.prompt.size(), request.max_tokens, context));
  DSINFER_RETURN_IF_ERROR(request.sampling.validate());
  const uint64_t id = next_id_++;
  const int64_t prompt_tokens = static_cast<int64_t>(request.prompt.size());
  requests_[id] = std::make_unique<Live>(std::move(request), model_, tokenizer_, id);
  scheduler_.add(id, prompt_tokens);
  return id;
}

void Engine::finish(uint64_t id, FinishReason reason, std::string error_text) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Live& r = *it->second;
  RequestOutput out;
  out.id = id, out.finish = reason, out.error = std::move(error_text);
  out.prompt_tokens = static_cast<int64_t>(r.req.prompt.size()), out.completion_tokens = r.generated;
  if (reason != FinishReason::kCancelled && reason != FinishReason::kError && reason != FinishReason::kStopString) {
    bool stopped = false;
    out.text = r.stops.push(r.detok.flush(), &stopped);
    if (!stopped) out.text += r.stops.flush();
  }
  scheduler_.remove(id);
  if (r.req.on_output) r.req.on_output(out);
  requests_.erase(it);
}

void Engine::cancel(uint64_t id) {
  finish(id, FinishReason::kCancelled);
}

void Engine::cancel_all() {
  while (!requests_.empty()) finish(requests_.begin()->first, FinishReason::kCancelled);
}

bool Engine::step() {
  if (requests_.empty()) return false;
  const std::vector<ScheduledChunk> plan = scheduler_.schedule();
  if (plan.empty()) return true;
  std::vector<ForwardChunk> chunks(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    Live& r = *requests_.at(plan[i].id);
    ForwardChunk& c = chunks[i];
    c.state = &r.state;
    c.start_pos = plan[i].start;
    c.decode = plan[i].decode;
    c.prompt_len = static_cast<int64_t>(r.req.prompt.size());
    if (c.decode)
      c.tokens = {r.last_token};
    else
      c.tokens.assign(r.req.prompt.begin() + plan[i].start, r.req.prompt.begin() + plan[i].start + plan[i].count);
  }
  const int64_t vocab = model_.config().vocab_size;
  std::vector<float> logits(plan.size() * vocab);
  if (Status s = model_.forward(chunks, logits); !s.ok()) {
    for (const ScheduledChunk& c : plan) finish(c.id, FinishReason::kError, s.message());
    return !requests_.empty();
  }
  scheduler_.update(plan);
  for (size_t i = 0; i < plan.size(); ++i) {
    Live& r = *requests_.at(plan[i].id);
    if (plan[i].start + plan[i].count < static_cast<int64_t>(r.req.prompt.size())) continue;  // mid-prompt
    const int32_t next = r.sampler.sample(std::span<const float>(logits).subspan(i * vocab, vocab));
    if (std::find(r.req.stop_ids.begin(), r.req.stop_ids.end(), next) != r.req.stop_ids.end()) {
      finish(plan[i].id, FinishReason::kStopToken);
      continue;
    }
    ++r.generated;
    r.last_token = next;
    bool stopped = false;
    RequestOutput out;
    out.id = plan[i].id;
    out.text = r.stops.push(r.detok.push(next), &stopped);
    if (!out.text.empty() && r.req.on_output) r.req.on_output(out);
    if (stopped)
      finish(plan[i].id, FinishReason::kStopString);
    else if (r.generated >= r.req.max_tokens)
      finish(plan[i].id, FinishReason::kLength);
  }
  return !requests_.empty();
}

}  // namespace dsinfer
