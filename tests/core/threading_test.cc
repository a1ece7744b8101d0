// ThreadPool: every index is visited exactly once, chunks respect the grain, and back-to-back jobs
// never leak a chunk into the next one (the ticket carries the job's generation).
#include "core/threading.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace dsinfer {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceAcrossManyJobs) {
  for (const int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int job = 0; job < 2000; ++job) {
      const int64_t n = job % 97, grain = 1 + job % 7;
      std::vector<std::atomic<int>> hits(n);
      std::atomic<bool> small_chunk{false};
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        if (e - b < grain && e != n) small_chunk = true;
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " job " << job;
      EXPECT_FALSE(small_chunk.load());
    }
  }
}

}  // namespace
}  // namespace dsinfer
