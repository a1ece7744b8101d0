// ThreadPool: one job at a time, cut into a few chunks per thread that the caller and the workers
// claim from a shared ticket (generation in the high half, so a late worker cannot claim a chunk
// of the next job): a thread slowed down by the machine leaves its share to the others.
#include "core/threading.h"

#include <algorithm>

namespace dsinfer {
namespace {

constexpr int kChunksPerThread = 4;
// Pauses (~40-140 cycles each: up to about a millisecond) before a thread blocks: the gaps
// between a decode step's parallel regions are often longer than 100 us, and waking a thread that
// blocked costs a futex call on the critical path (2,000 pauses measured 20 % slower, perf-notes).
constexpr int kSpins = 20000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

int hardware_threads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = hardware_threads();
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  const int chunks = static_cast<int>(std::min<int64_t>(int64_t{size()} * kChunksPerThread, max_chunks));
  if (chunks == 1 || size() == 1) return fn(0, n);
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn, job_n_ = n, job_chunk_ = (n + chunks - 1) / chunks, job_chunks_ = chunks;
    pending_.store(chunks, std::memory_order_relaxed);
    generation = generation_.fetch_add(1, std::memory_order_relaxed) + 1;
    ticket_.store(generation << 32, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunks(generation, fn, n, job_chunk_, chunks);
  for (int i = 0; i < kSpins && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }
}

void ThreadPool::run_chunks(uint64_t generation, const std::function<void(int64_t, int64_t)>& fn, int64_t n,
                            int64_t chunk, int chunks) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  while (t >> 32 == generation && static_cast<int64_t>(t & 0xFFFFFFFFu) < chunks) {
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
    const int64_t begin = static_cast<int64_t>(t & 0xFFFFFFFFu) * chunk;
    fn(begin, std::min(n, begin + chunk));
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // pairs with the caller's predicate check
      done_.notify_one();
    }
    t = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpins && generation_.load(std::memory_order_acquire) == seen; ++i) cpu_relax();
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n, chunk;
    int chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
      job = job_, n = job_n_, chunk = job_chunk_, chunks = job_chunks_;
    }
    run_chunks(seen, *job, n, chunk, chunks);
  }
}

}  // namespace dsinfer
