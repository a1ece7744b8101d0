#include "runtime/engine_loop.h"

#include <chrono>
#include <limits>
#include <utility>

namespace dsinfer {

bool OutputStream::next(RequestOutput* out) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || ended_; });
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool OutputStream::next_for(RequestOutput* out, int timeout_ms, bool* timed_out) {
  std::unique_lock<std::mutex> lock(mu_);
  *timed_out = !cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !queue_.empty() || ended_; });
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void OutputStream::push(RequestOutput out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (out.finish != FinishReason::kNone) ended_ = true;
    queue_.push_back(std::move(out));
  }
  cv_.notify_one();
}

EngineLoop::EngineLoop(Engine& engine, int64_t max_pending, std::function<void(const Status&)> on_broken)
    : engine_(engine), max_pending_(max_pending), on_broken_(std::move(on_broken)), thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // the loop cancels everything after the step in progress, then returns
  }
  work_.notify_one();
  thread_.join();
}

Result<std::shared_ptr<OutputStream>> EngineLoop::submit(EngineRequest request) {
  DSINFER_RETURN_IF_ERROR(engine_.validate(request));  // reads no running state: no lock
  auto stream = std::make_shared<OutputStream>();
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_ || shut_down_) return error(ErrorKind::kResourceExhausted, "the server is stopping");
  if (pending_ >= max_pending_)
    return error(ErrorKind::kResourceExhausted, "the server is at capacity; try again shortly");
  const uint64_t id = next_id_++;
  stream->id_ = id;
  using Clock = std::chrono::steady_clock;
  // Runs on the loop thread (in the engine's step or cancel): counts into the loop's own stats_.
  request.on_output = [this, stream, id, submitted = Clock::now(),
                       first = Clock::time_point{}](const RequestOutput& out) mutable {
    const auto now = Clock::now();
    if (first == Clock::time_point{} && (!out.text.empty() || out.completion_tokens > 0)) {
      first = now;
      stats_.ttft.observe(std::chrono::duration<double>(now - submitted).count());
    }
    if (out.finish != FinishReason::kNone) {
      ++finished_;
      engine_ids_.erase(id);
      stats_.prompt_tokens += out.prompt_tokens, stats_.completion_tokens += out.completion_tokens;
      if (out.completion_tokens > 1 && first != Clock::time_point{})
        stats_.tpot.observe(std::chrono::duration<double>(now - first).count() / (out.completion_tokens - 1));
    }
    RequestOutput copy = out;
    copy.id = id;  // the stream's id, the one cancel takes
    stream->push(std::move(copy));
  };
  incoming_.push_back({id, std::move(request)});
  ++pending_, ++requests_;
  work_.notify_one();
  return stream;
}

void EngineLoop::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  work_.notify_one();
}

void EngineLoop::cancel_all() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_below_ = next_id_;
  }
  work_.notify_one();
}

void EngineLoop::shut_down() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    cancel_below_ = next_id_;
  }
  work_.notify_one();
}

EngineLoopStats EngineLoop::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  EngineLoopStats s = published_;
  s.active = pending_;
  s.requests = requests_;
  return s;
}

void EngineLoop::publish() {
  EngineLoopStats s = stats_;
  s.engine = engine_.stats();
  std::lock_guard<std::mutex> lock(mu_);
  published_ = std::move(s);
  pending_ -= std::exchange(finished_, 0);  // with the engine's state of the same moment
}

void EngineLoop::run() {
  for (;;) {
    std::vector<Incoming> incoming;
    std::vector<uint64_t> cancels;
    uint64_t cancel_below = 0;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] {
        return stop_ || !incoming_.empty() || !cancels_.empty() || cancel_below_ > 0 || !engine_.idle();
      });
      incoming.swap(incoming_);
      cancels.swap(cancels_);
      cancel_below = std::exchange(cancel_below_, 0);
      stop = stop_;
    }
    // Between steps, without the lock: the new requests join, then the cancellations apply (a
    // request cancelled right after its submission is among the new ones).
    for (Incoming& in : incoming) {
      auto on_output = in.request.on_output;
      const int64_t prompt_tokens = static_cast<int64_t>(in.request.prompt.size());
      Result<uint64_t> engine_id = engine_.submit(std::move(in.request));
      if (engine_id.ok()) {
        engine_ids_[in.id] = *engine_id;
        continue;
      }
      RequestOutput out;  // submit validated it already; only a check added since lands here
      out.finish = FinishReason::kError, out.error = engine_id.status().message();
      out.prompt_tokens = prompt_tokens;
      on_output(out);
    }
    if (stop) cancel_below = std::numeric_limits<uint64_t>::max();
    for (uint64_t id : cancels)
      if (const auto it = engine_ids_.find(id); it != engine_ids_.end()) engine_.cancel(it->second);
    if (cancel_below > 0) {
      std::vector<uint64_t> ids;  // the callbacks erase from engine_ids_: collect first
      for (const auto& [loop_id, engine_id] : engine_ids_)
        if (loop_id < cancel_below) ids.push_back(engine_id);
      for (uint64_t id : ids) engine_.cancel(id);
    }
    if (!stop && !engine_.idle()) engine_.step();
    if (!engine_.broken().ok() && on_broken_) std::exchange(on_broken_, nullptr)(engine_.broken());
    publish();
    if (stop) return;
  }
}

}  // namespace dsinfer
