// ThreadPool: a fixed set of workers and a blocking parallel_for over an index range. The CPU
// kernels split work by output rows or heads, so results never depend on the thread count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsinfer {

/// The host's hardware threads (at least 1).
int hardware_threads();

class ThreadPool {
 public:
  /// n_threads <= 0: one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  /// Calls fn(begin, end) on disjoint chunks covering [0, n) (a few per thread, each of at least
  /// `grain` items, in any order on any thread) and returns when all are done. The caller's
  /// thread takes part. Not reentrant: fn must not call parallel_for.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void run_chunks(uint64_t generation, const std::function<void(int64_t, int64_t)>& fn, int64_t n, int64_t chunk,
                  int chunks);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_chunk_ = 0;
  int job_chunks_ = 0;
  // A decode step issues ~1000 short parallel regions: both sides spin briefly before sleeping, so
  // a region costs microseconds, not a futex wake-up each.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};      // chunks not finished
  std::atomic<uint64_t> ticket_{0};  // generation << 32 | next unclaimed chunk
  bool stop_ = false;
};

}  // namespace dsinfer
