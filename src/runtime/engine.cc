#include "runtime/engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/detokenizer.h"
#include "runtime/stop_strings.h"

namespace dsinfer {

struct Engine::Live {
  EngineRequest req;
  std::vector<int32_t> tokens;  // prompt, then the generated tokens: what a preempted request recomputes
  SequenceState state;
  SamplerState sampler;
  IncrementalDetokenizer detok;
  StopStringMatcher stops;
  int64_t generated = 0;
  std::deque<int32_t> forced;  // tokens to emit before sampling again
  bool force_armed = false;    // waiting for req.forced.after_token
  Live(EngineRequest r, const Model& model, const Tokenizer& tok, uint64_t id)
      : req(std::move(r)),
        tokens(req.prompt),
        state(model.new_sequence()),
        sampler(req.sampling, 0x5EED ^ id, req.prompt),
        detok(tok),
        stops(req.stop_strings) {
    if (req.forced.after_token < 0)
      forced.assign(req.forced.tokens.begin(), req.forced.tokens.end());
    else
      force_armed = !req.forced.tokens.empty();
  }
  /// The next token: a forced one while any is pending, else sampled; none when the sampler finds
  /// the (penalised) logits not finite.
  std::optional<int32_t> next_token(std::span<const float> logits) {
    if (forced.empty()) return sampler.sample(logits);
    const int32_t t = forced.front();
    forced.pop_front();
    sampler.accept(t);
    return t;
  }
};

namespace {

// The model's store of the growing caches for the engine: bounded by the budget's layout when one
// is given (the running requests' fixed caches counted from the same blocks), else unbounded.
const CacheStore* engine_cache_store(Model& model, const std::optional<CacheLayout>& cache) {
  const Status s = cache ? model.reserve_cache(*cache) : model.reserve_cache(Model::kDefaultCacheBlockTokens);
  DSINFER_CHECK(s.ok(), "Engine: {}", s.message());
  return &model.cache_store();
}

}  // namespace

Engine::Engine(Model& model, const Tokenizer& tokenizer, SchedulerConfig config, std::optional<CacheLayout> cache,
               StepChannel* followers)
    : model_(model),
      runner_(model, false, followers),
      tokenizer_(tokenizer),
      scheduler_(config, engine_cache_store(model, cache)),
      context_(model.config().max_seq_len),
      cache_capacity_(model.cache_store().bounded() ? model.cache_store().pool().capacity() : -1) {}

Engine::~Engine() = default;

Status Engine::validate(const EngineRequest& request) const {
  const int64_t context = context_;
  if (request.prompt.empty()) return error(ErrorKind::kInvalidArgument, "the prompt is empty");
  if (request.max_tokens < 1) return error(ErrorKind::kInvalidArgument, "max_tokens must be >= 1");
  if (static_cast<int64_t>(request.prompt.size()) + request.max_tokens > context)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("prompt of {} tokens + {} new tokens exceeds the context of {} tokens",
                             request.prompt.size(), request.max_tokens, context));
  DSINFER_RETURN_IF_ERROR(request.sampling.validate());
  if (cache_capacity_ >= 0) {
    // blocks_for reads the store's block geometry, fixed when it was made.
    const int64_t blocks =
        model_.cache_store().blocks_for(static_cast<int64_t>(request.prompt.size()) + request.max_tokens);
    if (blocks > cache_capacity_)
      return error(ErrorKind::kInvalidArgument,
                   fmt::format("prompt + {} new tokens needs {} cache blocks; the cache budget holds {}",
                               request.max_tokens, blocks, cache_capacity_));
  }
  return {};
}

Result<uint64_t> Engine::submit(EngineRequest request) {
  DSINFER_RETURN_IF_ERROR(broken_);
  DSINFER_RETURN_IF_ERROR(validate(request));
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
  runner_.release(id);
  if (r.req.on_output) r.req.on_output(out);
  requests_.erase(it);
}

void Engine::cancel(uint64_t id) {
  finish(id, FinishReason::kCancelled);
}

void Engine::cancel_all() {
  while (!requests_.empty()) finish(requests_.begin()->first, FinishReason::kCancelled);
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.running = static_cast<int64_t>(scheduler_.num_running());
  s.waiting = static_cast<int64_t>(scheduler_.num_waiting());
  if (const CacheStore& store = model_.cache_store(); store.bounded())
    s.cache_blocks = store.pool().capacity(), s.cache_blocks_free = store.pool().num_free();
  s.preemptions = scheduler_.num_preemptions();
  return s;
}

bool Engine::step() {
  if (requests_.empty()) return false;
  const SchedulerOutput scheduled = scheduler_.schedule();
  // A preempted request's blocks go back with its sequence state (and the same for a finished one).
  for (uint64_t id : scheduled.preempted) {
    requests_.at(id)->state = model_.new_sequence();
    runner_.release(id);
  }
  const std::vector<ScheduledChunk>& plan = scheduled.chunks;
  if (plan.empty()) return true;
  std::vector<ForwardChunk> chunks(plan.size());
  std::vector<uint64_t> ids(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    Live& r = *requests_.at(plan[i].id);
    ids[i] = plan[i].id;
    ForwardChunk& c = chunks[i];
    c.state = &r.state;
    c.start_pos = plan[i].start;
    c.decode = plan[i].decode;
    c.prompt_len = plan[i].prompt_tokens;
    c.tokens.assign(r.tokens.begin() + plan[i].start, r.tokens.begin() + plan[i].start + plan[i].count);
  }
  const int64_t vocab = model_.config().vocab_size;
  std::vector<float> logits(plan.size() * vocab);
  if (Status s = runner_.forward(chunks, logits, ids); !s.ok()) {
    // On several ranks a failed collective or step message leaves the ranks apart: nothing more runs.
    if (runner_.leads_followers() && s.kind() == ErrorKind::kUnavailable) {
      broken_ = s;
      while (!requests_.empty()) finish(requests_.begin()->first, FinishReason::kError, s.message());
      return false;
    }
    for (const ScheduledChunk& c : plan) finish(c.id, FinishReason::kError, s.message());
    return !requests_.empty();
  }
  scheduler_.update(plan);
  for (size_t i = 0; i < plan.size(); ++i) {
    Live& r = *requests_.at(plan[i].id);
    // Mid-prompt, or recomputing known output after a preemption: nothing to sample yet.
    if (plan[i].start + plan[i].count < static_cast<int64_t>(r.tokens.size())) continue;
    const std::span<const float> row = std::span<const float>(logits).subspan(i * vocab, vocab);
    // A NaN or an infinity (a broken checkpoint, an overflow) ends the request: sampling from it
    // would emit arbitrary tokens (greedy picked id 0, BOS, every step).
    const std::optional<int32_t> sampled = all_finite(row) ? r.next_token(row) : std::nullopt;
    if (!sampled) {
      finish(plan[i].id, FinishReason::kError,
             fmt::format("the logits are not finite at step {} (NaN or infinity; step 1 picks the first output "
                         "token)",
                         r.generated + 1));
      continue;
    }
    const int32_t next = *sampled;
    if (std::find(r.req.stop_ids.begin(), r.req.stop_ids.end(), next) != r.req.stop_ids.end()) {
      finish(plan[i].id, FinishReason::kStopToken);
      continue;
    }
    ++r.generated;
    r.tokens.push_back(next);
    if (r.force_armed && next == r.req.forced.after_token) {  // once: the trigger may come again later
      r.force_armed = false;
      r.forced.assign(r.req.forced.tokens.begin(), r.req.forced.tokens.end());
    }
    bool stopped = false;
    RequestOutput out;
    out.id = plan[i].id;
    out.text = r.stops.push(r.detok.push(next), &stopped);
    if (r.req.logprobs >= 0) out.logprobs.push_back(token_logprobs(row, next, r.req.logprobs));
    if ((!out.text.empty() || !out.logprobs.empty()) && r.req.on_output) r.req.on_output(out);
    if (stopped)
      finish(plan[i].id, FinishReason::kStopString);
    else if (r.generated >= r.req.max_tokens)
      finish(plan[i].id, FinishReason::kLength);
  }
  return !requests_.empty();
}

}  // namespace dsinfer
