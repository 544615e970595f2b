#include "backend/cpu/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_check.h"

namespace moetier::cpu {
namespace {

// About 50-100 microseconds of polling before a worker goes to sleep: long
// enough to catch back-to-back dispatches of one forward pass, short enough
// not to burn a core between requests.
constexpr int kSpinIterations = 1 << 14;

// Polls between sleeps. Every so often it yields, so that when there are
// more runnable threads than cores (a shared machine), a spinning thread hands
// its core to the thread it is waiting for.
inline void CpuRelax(int spins) {
  if ((spins & 255) == 255) {
    std::this_thread::yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::RunTasks(int thread) {
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    fn_(ctx_, task, thread);
  }
}

void ThreadPool::Run(int64_t n_tasks, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  MOETIER_CPU_CHECK(workers_busy_.load(std::memory_order_relaxed) == 0,
                    "ThreadPool::Run called concurrently or from inside a task");
  fn_ = fn;
  ctx_ = ctx;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  workers_busy_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  RunTasks(0);
  // Wait until every worker has left the job, so the next dispatch may
  // overwrite it. Workers are at most one task behind the caller here.
  for (int spins = 0;; ++spins) {
    const int busy = workers_busy_.load(std::memory_order_acquire);
    if (busy == 0) break;
    if (spins < kSpinIterations) {
      CpuRelax(spins);
    } else {
      workers_busy_.wait(busy, std::memory_order_acquire);
    }
  }
}

void ThreadPool::WorkerLoop(int thread) {
  // The generation the pool was created with, not the current one: a
  // dispatch may already have been published before this thread started.
  uint32_t seen = 0;
  for (;;) {
    uint32_t now = generation_.load(std::memory_order_acquire);
    for (int spins = 0; now == seen; ++spins) {
      if (spins < kSpinIterations) {
        CpuRelax(spins);
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load(std::memory_order_relaxed)) return;
    RunTasks(thread);
    if (workers_busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) workers_busy_.notify_one();
  }
}

}  // namespace moetier::cpu
