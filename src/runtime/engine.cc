#include "runtime/engine.h"

#include <algorithm>
#include <cmath>

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
  std::deque<int32_t> forced;                 // tokens to emit before sampling again
  bool force_armed = false;                   // waiting for req.forced.after_token
  bool speculates = false;                    // no forced continuation: verifies drafts while they pay
  std::vector<int32_t> drafts;                // the drafter's tokens after tokens.back(), for the next step
  std::vector<TokenDistribution> draft_laws;  // sampled: the distribution each draft was drawn from
  int64_t draft_calls = 0, drafts_accepted = 0;
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
    speculates = req.forced.tokens.empty();
  }
  /// The next token: a forced one while any is pending, else sampled; none when the logits (for the
  /// sampler, the penalised logits) are not finite.
  std::optional<int32_t> next_token(std::span<const float> logits) {
    if (forced.empty()) return sampler.sample(logits);
    if (!all_finite(logits)) return std::nullopt;
    return take(forced_token());
  }
  /// What a step reads back of a row it samples from: the device's greedy pick
  /// (Backend::greedy_pick) or its draw (Backend::draw_tokens) where that is what `sample` would
  /// give and no logprobs are reported; else the logits (a verify row at temperature > 0 is
  /// judged against its draft's law on the host).
  RowReadback readback(bool verify) const {
    if (req.logprobs >= 0) return RowReadback::kWhole;
    if (sampler.picks_greedily()) return RowReadback::kPick;
    if (!verify && forced.empty() && sampler.draws_on_device()) return RowReadback::kDraw;
    return RowReadback::kWhole;
  }
  /// next_token where the device picked or drew `pick` (-1: the row is not all finite).
  std::optional<int32_t> next_token(int32_t pick) {
    if (pick < 0) return std::nullopt;
    return take(forced.empty() ? pick : forced_token());
  }
  /// The next forced token, taken off the queue.
  int32_t forced_token() {
    const int32_t t = forced.front();
    forced.pop_front();
    return t;
  }
  /// Records `t` as output (for the penalties) and returns it.
  int32_t take(int32_t t) {
    sampler.accept(t);
    return t;
  }
};

namespace {

// Drafter calls a request runs before its acceptance may stop its drafting.
constexpr int64_t kDraftProbation = 16;

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
      draft_tokens_(model.has_drafter() && !followers
                        ? std::min(config.speculative.draft_tokens, model.config().verify_tokens() - 1)
                        : 0),
      main_hidden_(model.backend()),
      draft_out_(model.backend()),
      draft_base_(model.backend()),
      draft_confidence_(model.backend()),
      min_confidence_(config.speculative.min_confidence),
      min_accepted_per_call_(config.speculative.min_accepted_per_call),
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
  s.drafted_tokens = drafted_, s.accepted_tokens = accepted_, s.verify_steps = verify_steps_;
  return s;
}

bool Engine::step() {
  if (requests_.empty()) return false;
  // Each speculating request at its next token verifies its drafts (as far as its budget goes).
  for (auto& [id, r] : requests_)
    if (!r->drafts.empty()) {
      // Within its budget, and no more tokens than positions before them (Batch::validate).
      const int64_t left =
          std::min<int64_t>(r->req.max_tokens - r->generated, static_cast<int64_t>(r->tokens.size()) - 1);
      scheduler_.set_lookahead(id, std::min<int64_t>(static_cast<int64_t>(r->drafts.size()), left - 1));
    }
  const SchedulerOutput scheduled = scheduler_.schedule();
  // A preempted request's blocks go back with its sequence state (and the same for a finished one).
  for (uint64_t id : scheduled.preempted) {
    Live& r = *requests_.at(id);
    r.state = model_.new_sequence();
    r.drafts.clear();
    runner_.release(id);
  }
  const std::vector<ScheduledChunk>& plan = scheduled.chunks;
  if (plan.empty()) return true;
  std::vector<ForwardChunk> chunks(plan.size());
  std::vector<uint64_t> ids(plan.size());
  std::vector<int64_t> hidden_rows(plan.size());  // each chunk's first row of the step's tokens
  int64_t tokens = 0;
  bool speculating = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    Live& r = *requests_.at(plan[i].id);
    ids[i] = plan[i].id;
    ForwardChunk& c = chunks[i];
    c.state = &r.state;
    c.start_pos = plan[i].start;
    c.prompt_len = plan[i].prompt_tokens;
    if (plan[i].decode && plan[i].count > 1) {  // the next token, then drafts: a verify chunk
      c.verify = true;
      c.tokens = {r.tokens.back()};
      c.tokens.insert(c.tokens.end(), r.drafts.begin(), r.drafts.begin() + plan[i].count - 1);
    } else {
      c.decode = plan[i].decode;
      c.tokens.assign(r.tokens.begin() + plan[i].start, r.tokens.begin() + plan[i].start + plan[i].count);
    }
    hidden_rows[i] = tokens;
    tokens += plan[i].count;
    speculating = speculating || (draft_tokens_ > 0 && r.speculates);
  }
  const int64_t vocab = model_.config().vocab_size, width = model_.main_hidden_width();
  // The step's logits in a buffer kept between steps: a batch of 64 rows of a 129K vocabulary is
  // 33 MB, which a new vector would zero and fault in, page by page, at every step. Only the rows
  // the host samples from come back whole (logprobs, penalties, a verify row at temperature > 0);
  // another request's row comes back as its greedy pick or its draw, a prompt's piece before its
  // end as nothing.
  const int64_t rows = Model::logit_rows(chunks);
  const size_t logit_floats = static_cast<size_t>(rows * vocab);
  if (logits_.size() < logit_floats) logits_.resize(logit_floats);
  const std::span<float> logits(logits_.data(), logit_floats);
  readback_.clear();
  draws_.clear();
  for (size_t i = 0; i < plan.size(); ++i) {
    Live& r = *requests_.at(plan[i].id);
    const bool samples = plan[i].start + plan[i].count >= static_cast<int64_t>(r.tokens.size());
    const RowReadback kind = samples ? r.readback(chunks[i].verify) : RowReadback::kNone;
    if (kind == RowReadback::kDraw) draws_.push_back({static_cast<int32_t>(readback_.size()), r.sampler.next_draw()});
    readback_.insert(readback_.end(), chunks[i].verify ? plan[i].count : 1, kind);
  }
  picks_.resize(rows);
  TensorView hidden;
  if (speculating) {
    if (main_hidden_.size() < static_cast<size_t>(tokens * width))
      main_hidden_ = DeviceArray<uint16_t>::uninitialized(model_.backend(), tokens * width);
    hidden = main_hidden_.view(DType::kBF16, {tokens, width});
  }
  if (Status s = runner_.forward(chunks, LogitsReadback{logits, readback_, picks_, draws_}, ids, hidden); !s.ok()) {
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
  std::vector<int64_t> kept(plan.size());  // the positions each chunk leaves in its sequence's caches
  for (size_t i = 0, row = 0; i < plan.size(); row += chunks[i].verify ? plan[i].count : 1, ++i) {
    const uint64_t id = plan[i].id;
    Live& r = *requests_.at(id);
    kept[i] = plan[i].count;
    // Mid-prompt, or recomputing known output after a preemption: nothing to sample yet.
    if (plan[i].start + plan[i].count < static_cast<int64_t>(r.tokens.size())) continue;
    r.drafts.clear();
    // A verify chunk's rows in order: each row's token is the model's own next one; the next row
    // counts only while the draft it ran on is that token.
    for (int64_t j = 0;; ++j) {
      const bool picked = readback_[row + j] == RowReadback::kPick || readback_[row + j] == RowReadback::kDraw;
      const std::span<const float> rowj = picked ? std::span<const float>() : logits.subspan((row + j) * vocab, vocab);
      const bool drafted = chunks[i].verify && j + 1 < plan[i].count;  // row j's token was drafted
      // A NaN or an infinity (a broken checkpoint, an overflow) ends the request: sampling from it
      // would emit arbitrary tokens (greedy picked id 0, BOS, every step). A greedy verify row's
      // token is its pick, as verify_draft's.
      const std::optional<int32_t> sampled =
          picked    ? r.next_token(picks_[row + j])
          : drafted ? r.sampler.verify_draft(rowj, chunks[i].tokens[j + 1], r.draft_laws[j])
                    : r.next_token(rowj);
      if (!sampled) {
        finish(id, FinishReason::kError,
               fmt::format("the logits are not finite at step {} (NaN or infinity; step 1 picks the first output "
                           "token)",
                           r.generated + 1));
        break;
      }
      if (!emit(id, r, *sampled, rowj)) break;
      const bool accepted = drafted && chunks[i].tokens[j + 1] == *sampled;
      if (!chunks[i].verify || !accepted) {
        if (chunks[i].verify) {  // positions past row j ran on rejected drafts
          kept[i] = j + 1;
          if (Status s = model_.truncate(r.state, plan[i].start + kept[i]); !s.ok())
            finish(id, FinishReason::kError, s.message());
          else
            scheduler_.rewind(id, plan[i].start + kept[i]);
        }
        break;
      }
      ++accepted_, ++r.drafts_accepted;
    }
    if (chunks[i].verify) drafted_ += plan[i].count - 1, ++verify_steps_;
  }
  if (speculating) draft(plan, kept, hidden_rows);
  return !requests_.empty();
}

bool Engine::emit(uint64_t id, Live& r, int32_t next, std::span<const float> logits) {
  if (std::find(r.req.stop_ids.begin(), r.req.stop_ids.end(), next) != r.req.stop_ids.end()) {
    finish(id, FinishReason::kStopToken);
    return false;
  }
  ++r.generated;
  r.tokens.push_back(next);
  if (r.force_armed && next == r.req.forced.after_token) {  // once: the trigger may come again later
    r.force_armed = false;
    r.forced.assign(r.req.forced.tokens.begin(), r.req.forced.tokens.end());
  }
  bool stopped = false;
  RequestOutput out;
  out.id = id;
  out.text = r.stops.push(r.detok.push(next), &stopped);
  if (r.req.logprobs >= 0) out.logprobs.push_back(token_logprobs(logits, next, r.req.logprobs));
  if ((!out.text.empty() || !out.logprobs.empty()) && r.req.on_output) r.req.on_output(out);
  if (stopped) {
    finish(id, FinishReason::kStopString);
    return false;
  }
  if (r.generated >= r.req.max_tokens) {
    finish(id, FinishReason::kLength);
    return false;
  }
  return true;
}

void Engine::draft(const std::vector<ScheduledChunk>& plan, const std::vector<int64_t>& kept,
                   const std::vector<int64_t>& hidden_rows) {
  std::vector<DraftChunk> chunks;
  std::vector<Live*> owners, drafting;  // each chunk's request; those that draft
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto it = requests_.find(plan[i].id);
    if (it == requests_.end() || !it->second->speculates) continue;  // finished in this step, or not speculating
    Live& r = *it->second;
    // Its next token waits (not mid-prompt, not recomputing): drafts follow it.
    const bool next = r.state.length + 1 == static_cast<int64_t>(r.tokens.size());
    chunks.push_back({&r.state, plan[i].start, kept[i], hidden_rows[i], next, next ? r.tokens.back() : 0});
    owners.push_back(&r);
    if (next) drafting.push_back(&r);
  }
  if (chunks.empty()) return;
  const ModelConfig& c = model_.config();
  const int64_t n = static_cast<int64_t>(drafting.size()), B = c.dspark_block_size;
  Backend& be = model_.backend();
  if (draft_out_.size() < static_cast<size_t>(n * (B + 1))) {
    draft_out_ = DeviceArray<int32_t>::uninitialized(be, n * (B + 1));
    draft_base_ = DeviceArray<float>::uninitialized(be, n * B * c.vocab_size);
    draft_confidence_ = DeviceArray<float>::uninitialized(be, n * B);
  }
  const int64_t width = model_.main_hidden_width();
  // Sampled requests draw their drafts with their own sampling parameters (speculative rejection
  // sampling needs each draft's distribution); greedy ones take the chain's maxima.
  DraftSampling sampling{{}, draft_tokens_, [&](int64_t k, int64_t j, std::span<const float> base) {
                           return drafting[k]->sampler.draw_draft(base, &drafting[k]->draft_laws[j]);
                         }};
  for (int64_t k = 0; k < n; ++k) {
    drafting[k]->draft_laws.assign(draft_tokens_, {});
    if (drafting[k]->sampler.params().temperature > 0) sampling.chunks.push_back(k);
  }
  const Status s =
      model_.draft(chunks, main_hidden_.view(DType::kBF16, {static_cast<int64_t>(main_hidden_.size()) / width, width}),
                   {draft_out_.view(DType::kI32, {n, B + 1}), draft_base_.view(DType::kF32, {n, B, c.vocab_size}),
                    draft_confidence_.view(DType::kF32, {n, B})},
                   {}, sampling);
  // A drafter that fails costs the speed-up only: the requests go on one token a step (their
  // rings missed rows, so they draft no more).
  if (!s.ok()) {
    for (Live* r : owners) r->speculates = false;
    return;
  }
  if (n == 0) return;
  const std::vector<int32_t> out = draft_out_.download(0, n * (B + 1));
  const std::vector<float> confidence = draft_confidence_.download(0, n * B);
  for (int64_t k = 0; k < n; ++k) {
    Live& r = *drafting[k];
    // Drafts that have not paid for the drafter's calls: it stops for this request.
    if (++r.draft_calls >= kDraftProbation &&
        static_cast<double>(r.drafts_accepted) < min_accepted_per_call_ * static_cast<double>(r.draft_calls)) {
      r.speculates = false;
      r.draft_laws.clear();
      continue;
    }
    // Draft j + 1 is verified while the product of sigmoid(confidence) over rows 0..j (the head's
    // chance that every draft up to it is accepted) stays at or above the threshold.
    int64_t len = 0;
    for (double chance = 1; len < draft_tokens_; ++len) {
      chance /= 1 + std::exp(-static_cast<double>(confidence[k * B + len]));
      if (chance < min_confidence_) break;
    }
    r.drafts.assign(out.begin() + k * (B + 1) + 1, out.begin() + k * (B + 1) + 1 + len);
  }
}

}  // namespace dsinfer
