#include "runtime/engine_loop.h"

#include <chrono>

namespace dsinfer {

bool OutputStream::next(RequestOutput* out) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || ended_; });
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void OutputStream::push(const RequestOutput& out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(out);
    if (out.finish != FinishReason::kNone) ended_ = true;
  }
  cv_.notify_one();
}

EngineLoop::EngineLoop(Engine& engine, int64_t max_pending)
    : engine_(engine), max_pending_(max_pending), thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    engine_.cancel_all();  // no stream is left waiting
  }
  work_.notify_one();
  thread_.join();
}

Result<std::shared_ptr<OutputStream>> EngineLoop::submit(EngineRequest request) {
  auto stream = std::make_shared<OutputStream>();
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_ >= max_pending_)
    return error(ErrorKind::kResourceExhausted, "the server is at capacity; try again shortly");
  using Clock = std::chrono::steady_clock;
  request.on_output = [this, stream, submitted = Clock::now(),
                       first = Clock::time_point{}](const RequestOutput& out) mutable {  // runs in step(), under mu_
    const auto now = Clock::now();
    if (first == Clock::time_point{} && (!out.text.empty() || out.completion_tokens > 0)) {
      first = now;
      stats_.ttft.observe(std::chrono::duration<double>(now - submitted).count());
    }
    if (out.finish != FinishReason::kNone) {
      --pending_;
      stats_.prompt_tokens += out.prompt_tokens, stats_.completion_tokens += out.completion_tokens;
      if (out.completion_tokens > 1 && first != Clock::time_point{})
        stats_.tpot.observe(std::chrono::duration<double>(now - first).count() / (out.completion_tokens - 1));
    }
    stream->push(out);
  };
  DSINFER_ASSIGN_OR_RETURN(stream->id_, engine_.submit(std::move(request)));
  ++pending_, ++stats_.requests;
  work_.notify_one();
  return stream;
}

void EngineLoop::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_.cancel(id);
}

void EngineLoop::cancel_all() {
  std::lock_guard<std::mutex> lock(mu_);
  engine_.cancel_all();
}

EngineLoopStats EngineLoop::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  EngineLoopStats s = stats_;
  s.active = pending_;
  s.engine = engine_.stats();
  return s;
}

void EngineLoop::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (engine_.idle()) {
      work_.wait(lock, [&] { return stop_ || !engine_.idle(); });
      continue;
    }
    engine_.step();  // under the lock: submit and cancel wait for the step to end
  }
}

}  // namespace dsinfer
