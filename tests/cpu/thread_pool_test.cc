#include "backend/cpu/thread_pool.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace moetier::cpu {
namespace {

TEST(CpuThreadPoolTest, EveryTaskRunsExactlyOnce) {
  for (int n_threads : {1, 2, 3, 5}) {
    ThreadPool pool(n_threads);
    EXPECT_EQ(pool.size(), n_threads);
    for (int64_t n_tasks : {0, 1, 2, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(n_tasks);
      std::atomic<int> bad_thread{0};
      pool.ParallelFor(n_tasks, [&](int64_t task, int thread) {
        hits[task].fetch_add(1, std::memory_order_relaxed);
        if (thread < 0 || thread >= n_threads) bad_thread.fetch_add(1);
      });
      for (int64_t t = 0; t < n_tasks; ++t) ASSERT_EQ(hits[t].load(), 1) << "task " << t;
      EXPECT_EQ(bad_thread.load(), 0);
    }
  }
}

TEST(CpuThreadPoolTest, ManyBackToBackDispatchesSeeAllPriorWrites) {
  ThreadPool pool(4);
  std::vector<int64_t> data(257, 0);
  for (int round = 0; round < 2000; ++round) {
    // Each round reads what the previous round wrote on possibly other threads.
    pool.ParallelFor(static_cast<int64_t>(data.size()), [&](int64_t i, int) {
      ASSERT_EQ(data[i], round);
      data[i] = round + 1;
    });
  }
  for (int64_t v : data) EXPECT_EQ(v, 2000);
}

TEST(CpuThreadPoolTest, UsesMoreThanOneThread) {
  ThreadPool pool(2);
  std::atomic<int> seen_worker{0};
  // Tasks that wait for each other can only finish if two threads run them.
  std::atomic<int> arrived{0};
  pool.ParallelFor(2, [&](int64_t, int thread) {
    if (thread != 0) seen_worker.store(1);
    arrived.fetch_add(1);
    while (arrived.load() < 2) {
    }
  });
  EXPECT_EQ(seen_worker.load(), 1);
}

TEST(CpuThreadPoolTest, RangesCoverExactlyOnceInGrainMultiples) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5, 64, 1000, 1001}) {
    for (int64_t grain : {1, 4, 16}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> misaligned{0};
      pool.ParallelForRange(n, grain, [&](int64_t begin, int64_t end, int) {
        if (begin % grain != 0 || (end % grain != 0 && end != n) || begin >= end) {
          misaligned.fetch_add(1);
        }
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_EQ(misaligned.load(), 0);
    }
  }
}

TEST(CpuThreadPoolTest, IdleWorkersSleepAndWakeUp) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 3; ++round) {
    // Long enough for the workers to stop spinning and block.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    pool.ParallelFor(100, [&](int64_t task, int) { sum.fetch_add(task); });
  }
  EXPECT_EQ(sum.load(), 3 * 4950);
}

}  // namespace
}  // namespace moetier::cpu
