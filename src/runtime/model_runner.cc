// ModelRunner (model_runner.h).
#include "runtime/model_runner.h"

#include <algorithm>

namespace dsinfer {

ModelRunner::ModelRunner(Model& model, bool replay_steps) : model_(model), recorder_(model.backend()) {
  recorder_.set_enabled(replay_steps || model.backend().step_graphs());
}

Status ModelRunner::forward(std::span<ForwardChunk> chunks, std::span<float> logits) {
  const int64_t vocab = model_.config().vocab_size, n = static_cast<int64_t>(chunks.size());
  if (logits.size() != static_cast<size_t>(n * vocab))
    return error(ErrorKind::kInvalidArgument, "logits buffer must hold chunks x vocab floats");
  Backend& backend = model_.backend();
  if (logits_.size() < logits.size()) logits_ = DeviceArray<float>::uninitialized(backend, logits.size());
  // A decode step of few tokens reads nothing back before its logits (the router's choice and the
  // indexer's selections stay on the device): the recorder may hold it and run it as recorded.
  const bool decode = std::all_of(chunks.begin(), chunks.end(), [](const ForwardChunk& ch) { return ch.decode; });
  const bool recorded = decode && n <= backend.max_tokens_without_reads() && recorder_.begin_step();
  const Status st = model_.forward(chunks, logits_.view(DType::kF32, {n, vocab}),
                                   {.ops = recorded ? &recorder_ : nullptr, .fixed_shapes = recorded});
  if (recorded) recorder_.end_step(st.ok());
  DSINFER_RETURN_IF_ERROR(st);
  backend.copy_to_host(logits.data(), logits_.data(), logits.size() * sizeof(float));
  return {};
}

}  // namespace dsinfer
