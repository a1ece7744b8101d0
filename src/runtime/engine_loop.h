// EngineLoop: an Engine on its own thread, for callers on other threads (the HTTP server). A
// request's outputs arrive on its OutputStream; cancelling (a client that went away) ends it at
// the next step and frees its state.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/engine.h"
#include "runtime/histogram.h"

namespace dsinfer {

class OutputStream {
 public:
  /// Blocks until the next output; false once the request has ended and everything was read.
  bool next(RequestOutput* out);
  uint64_t id() const { return id_; }

 private:
  friend class EngineLoop;
  void push(const RequestOutput& out);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool ended_ = false;
  uint64_t id_ = 0;
};

struct EngineLoopStats {
  int64_t active = 0;  // submitted and not finished (running or waiting)
  int64_t requests = 0, prompt_tokens = 0, completion_tokens = 0;
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};   // submission to first text
  Histogram tpot{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}};  // per output token after it
  EngineStats engine;  // running / waiting, cache blocks, preemptions
};

class EngineLoop {
 public:
  /// max_pending: requests waiting beyond this are refused (kResourceExhausted: the server's 503).
  EngineLoop(Engine& engine, int64_t max_pending);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  /// The request's errors (kInvalidArgument), or kResourceExhausted when too many wait.
  Result<std::shared_ptr<OutputStream>> submit(EngineRequest request);
  void cancel(uint64_t id);
  /// Ends every request (their streams end with kCancelled), e.g. before the server stops.
  void cancel_all();
  EngineLoopStats stats();

 private:
  void run();
  Engine& engine_;
  const int64_t max_pending_;
  std::mutex mu_;  // guards engine_ and stats_
  std::condition_variable work_;
  EngineLoopStats stats_;
  int64_t pending_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dsinfer
