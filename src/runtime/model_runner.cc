// ModelRunner (model_runner.h).
#include "runtime/model_runner.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace dsinfer {

ModelRunner::ModelRunner(Model& model, bool replay_steps, StepChannel* followers)
    : model_(model), recorder_(model.backend()), followers_(followers) {
  recorder_.set_enabled(replay_steps || model.backend().step_graphs());
}

ModelRunner::~ModelRunner() {
  if (!followers_) return;
  StepPlan stop;
  stop.stop = true;
  (void)followers_->send(encode_step_plan(stop));  // a failed channel: the job is being aborted anyway
}

void ModelRunner::release(uint64_t sequence) {
  if (followers_) released_.push_back(sequence);
}

Status ModelRunner::forward(std::span<ForwardChunk> chunks, const LogitsReadback& out,
                            std::span<const uint64_t> sequences, const TensorView& main_hidden) {
  const int64_t vocab = model_.config().vocab_size, n = Model::logit_rows(chunks);
  if (out.logits.size() != static_cast<size_t>(n * vocab))
    return error(ErrorKind::kInvalidArgument, "logits buffer must hold logit_rows x vocab floats");
  if (!out.rows.empty() && (out.rows.size() != static_cast<size_t>(n) || out.picks.size() != static_cast<size_t>(n)))
    return error(ErrorKind::kInvalidArgument, "a readback names each logit row's part and has a pick a row");
  if (std::count(out.rows.begin(), out.rows.end(), RowReadback::kDraw) !=
          static_cast<std::ptrdiff_t>(out.draws.size()) ||
      std::any_of(out.draws.begin(), out.draws.end(),
                  [&](const RowDraw& d) { return d.row < 0 || d.row >= n || out.rows[d.row] != RowReadback::kDraw; }))
    return error(ErrorKind::kInvalidArgument, "a readback has a draw for each row it draws, and for no other");
  const bool speculates =
      main_hidden.data || std::any_of(chunks.begin(), chunks.end(), [](const ForwardChunk& ch) { return ch.verify; });
  if (followers_ && speculates)
    return error(ErrorKind::kUnsupported, "speculative decoding on several ranks is not there yet");
  if (followers_) {
    if (sequences.size() != chunks.size())
      return error(ErrorKind::kInvalidArgument, "a forward led on several ranks names each chunk's sequence");
    StepPlan plan;
    plan.released = std::move(released_);
    released_.clear();
    for (size_t i = 0; i < chunks.size(); ++i)
      plan.chunks.push_back(
          {sequences[i], chunks[i].start_pos, chunks[i].decode, chunks[i].prompt_len, chunks[i].tokens});
    DSINFER_RETURN_IF_ERROR(followers_->send(encode_step_plan(plan)));
  }
  Backend& backend = model_.backend();
  if (logits_.size() < out.logits.size()) logits_ = DeviceArray<float>::uninitialized(backend, out.logits.size());
  // A decode step of few tokens reads nothing back before its logits (the router's choice and the
  // indexer's selections stay on the device): the recorder may hold it and run it as recorded, up
  // to the size the backend's kept steps pay at.
  const bool decode = std::all_of(chunks.begin(), chunks.end(), [](const ForwardChunk& ch) { return ch.decode; });
  const StepGraphs* graphs = backend.step_graphs();
  const int64_t recordable =
      std::min(backend.max_tokens_without_reads(), graphs ? graphs->max_step_tokens() : INT64_MAX);
  // Collectives enqueued on the device (NCCL) happen at the model's call, which a recorded step skips.
  const bool recorded =
      decode && !speculates && n <= recordable && !model_.communicator().enqueues_on_device() && recorder_.begin_step();
  ForwardContext ctx{.ops = recorded ? &recorder_ : nullptr, .fixed_shapes = recorded};
  ctx.main_hidden = main_hidden;
  const Status st = model_.forward(chunks, logits_.view(DType::kF32, {n, vocab}), ctx);
  if (recorded) recorder_.end_step(st.ok());
  DSINFER_RETURN_IF_ERROR(st);
  read_back(out, n, vocab);
  return {};
}

void ModelRunner::read_back(const LogitsReadback& out, int64_t n, int64_t vocab) {
  Backend& backend = model_.backend();
  const auto whole = [&](int64_t row) { return out.rows.empty() || out.rows[row] == RowReadback::kWhole; };
  // The whole rows in runs of consecutive ones: a copy a run.
  for (int64_t r = 0; r < n;) {
    if (!whole(r)) {
      ++r;
      continue;
    }
    int64_t end = r + 1;
    while (end < n && whole(end)) ++end;
    backend.copy_to_host(out.logits.data() + r * vocab, logits_.data() + r * vocab, (end - r) * vocab * sizeof(float));
    r = end;
  }
  const bool picks =
      std::any_of(out.rows.begin(), out.rows.end(), [](RowReadback w) { return w == RowReadback::kPick; });
  if (!picks && out.draws.empty()) return;
  if (picks_.size() < static_cast<size_t>(n)) picks_ = DeviceArray<int32_t>::uninitialized(backend, n);
  const TensorView all = logits_.view(DType::kF32, {n, vocab}), tokens = picks_.view(DType::kI32, {n});
  if (picks) backend.greedy_pick({all, tokens});
  backend.draw_tokens({all, out.draws, tokens});
  backend.copy_to_host(out.picks.data(), picks_.data(), n * sizeof(int32_t));
}

Status follow_steps(ModelRunner& runner, StepChannel& leader, const StepObserver& after_step) {
  Model& model = runner.model();
  std::map<uint64_t, SequenceState> states;
  std::vector<float> logits;
  for (;;) {
    DSINFER_ASSIGN_OR_RETURN(std::vector<uint8_t> message, leader.receive());
    DSINFER_ASSIGN_OR_RETURN(StepPlan plan, decode_step_plan(message));
    if (plan.stop) return {};
    for (uint64_t id : plan.released) states.erase(id);
    std::vector<ForwardChunk> chunks(plan.chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      PlannedChunk& p = plan.chunks[i];
      auto it = states.find(p.sequence);
      if (it == states.end()) {
        if (p.start_pos != 0)
          return error(ErrorKind::kInternal,
                       fmt::format("rank 0's step continues sequence {} at position {}, which this rank never began",
                                   p.sequence, p.start_pos));
        it = states.emplace(p.sequence, model.new_sequence()).first;
      }
      chunks[i] = {&it->second, p.start_pos, p.tokens, p.decode, p.prompt_len};
    }
    logits.resize(chunks.size() * model.config().vocab_size);
    const Status s = runner.forward(chunks, logits);
    if (!s.ok() && s.kind() == ErrorKind::kUnavailable) return s;
    if (s.ok() && after_step) after_step(plan, logits);
  }
}

}  // namespace dsinfer
