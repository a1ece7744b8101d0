// EngineLoop: an Engine on its own thread, for callers on other threads (the HTTP server). The loop
// thread alone touches the Engine. submit, cancel and cancel_all only put their work in queues
// under a small mutex that is never held across a step; the loop takes the queues between steps.
// So no caller waits for a forward pass: a new request joins the running ones at the next step,
// cancelling (a client that went away) ends a request at the next step and frees its state, and
// stats() reads the snapshot the loop publishes after each step. A request's outputs arrive on its
// OutputStream; its callbacks run on the loop thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/engine.h"
#include "runtime/histogram.h"

namespace dsinfer {

class OutputStream {
 public:
  /// Blocks until the next output; false once the request has ended and everything was read.
  bool next(RequestOutput* out);
  /// As next, but gives up after `timeout_ms` without an output: then false with *timed_out set.
  bool next_for(RequestOutput* out, int timeout_ms, bool* timed_out);
  uint64_t id() const { return id_; }

 private:
  friend class EngineLoop;
  void push(RequestOutput out);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool ended_ = false;
  uint64_t id_ = 0;
};

struct EngineLoopStats {
  int64_t active = 0;  // submitted and not finished (running, waiting or not yet taken by the loop)
  int64_t requests = 0, prompt_tokens = 0, completion_tokens = 0;
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};   // submission to first text
  Histogram tpot{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}};  // per output token after it
  EngineStats engine;  // running / waiting, cache blocks, preemptions: as of the last step
};

class EngineLoop {
 public:
  /// max_pending: requests waiting beyond this are refused (kResourceExhausted: the server's 503).
  /// on_broken: called once, on the loop thread, when the engine breaks (Engine::broken).
  EngineLoop(Engine& engine, int64_t max_pending, std::function<void(const Status&)> on_broken = {});
  /// Cancels what runs or waits (at most the step in progress ends first) and joins the thread.
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  /// The request's errors (kInvalidArgument, checked here by Engine::validate, without waiting for
  /// the loop), or kResourceExhausted when too many wait. The request starts at the next step.
  Result<std::shared_ptr<OutputStream>> submit(EngineRequest request);
  /// Ends the request at the next step (its stream ends with kCancelled); unknown or finished ids
  /// are ignored. Does not wait.
  void cancel(uint64_t id);
  /// Ends every request submitted so far (their streams end with kCancelled), e.g. before the
  /// server stops. Does not wait.
  void cancel_all();
  /// The server's shutdown: refuses every later submission (kResourceExhausted, "the server is
  /// stopping") and ends every request submitted so far, as cancel_all. Does not wait.
  void shut_down();
  /// The counters and the engine's state as of the last step; does not wait for a step.
  EngineLoopStats stats();

 private:
  struct Incoming {
    uint64_t id;
    EngineRequest request;
  };
  void run();
  void publish();  // the loop thread's stats into published_

  Engine& engine_;
  const int64_t max_pending_;
  std::function<void(const Status&)> on_broken_;

  std::mutex mu_;  // guards what follows up to the loop thread's own state; never held in a step
  std::condition_variable work_;
  std::vector<Incoming> incoming_;  // submitted, not yet given to the engine
  std::vector<uint64_t> cancels_;
  uint64_t cancel_below_ = 0;  // cancel_all: every request with a smaller id
  bool shut_down_ = false;     // shut_down: no more submissions
  uint64_t next_id_ = 1;
  int64_t pending_ = 0;   // submitted and not finished
  int64_t requests_ = 0;  // accepted
  EngineLoopStats published_;
  bool stop_ = false;

  // The loop thread's own: the engine ids of its requests, and what the callbacks count (published
  // after each step, with the engine's state).
  std::unordered_map<uint64_t, uint64_t> engine_ids_;  // loop id -> engine id, while running
  EngineLoopStats stats_;
  int64_t finished_ = 0;  // requests ended since the last publish

  std::thread thread_;  // last: starts once the members above are made
};

}  // namespace dsinfer
