// A fixed set of worker threads for parallel loops in the token loop.
//
// Threads are created once. A dispatch publishes one job and wakes the
// workers; tasks are handed out through one atomic counter, so uneven tasks
// balance themselves. Idle workers spin briefly (the next dispatch of a
// forward pass usually follows within microseconds) and then sleep on a
// futex-backed atomic wait. Dispatching allocates nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace moetier::cpu {

class ThreadPool {
 public:
  // `n_threads` counts the calling thread, which takes part in every loop;
  // n_threads - 1 workers are started. n_threads < 1 is treated as 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(task, thread) for every task in [0, n_tasks) and returns when all
  // have finished. `thread` is in [0, size()) and names the thread running the
  // task (0 is the caller), for per-thread scratch. Must not be called from
  // inside a task, nor from two threads at once.
  template <typename Fn>
  void ParallelFor(int64_t n_tasks, Fn&& fn) {
    auto trampoline = [](void* ctx, int64_t task, int thread) {
      (*static_cast<std::remove_reference_t<Fn>*>(ctx))(task, thread);
    };
    Run(n_tasks, trampoline, &fn);
  }

  // Splits [0, n) into at most `max_chunks_per_thread` * size() contiguous
  // chunks of at least `grain` items (a multiple of `grain` except the last)
  // and calls fn(begin, end, thread) for each.
  template <typename Fn>
  void ParallelForRange(int64_t n, int64_t grain, Fn&& fn, int max_chunks_per_thread = 4) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    const int64_t units = (n + grain - 1) / grain;
    int64_t chunks = static_cast<int64_t>(n_threads_) * max_chunks_per_thread;
    if (chunks > units) chunks = units;
    const int64_t units_per_chunk = (units + chunks - 1) / chunks;
    const int64_t chunk_items = units_per_chunk * grain;
    const int64_t n_chunks = (n + chunk_items - 1) / chunk_items;
    ParallelFor(n_chunks, [&](int64_t c, int thread) {
      const int64_t begin = c * chunk_items;
      const int64_t end = begin + chunk_items < n ? begin + chunk_items : n;
      fn(begin, end, thread);
    });
  }

  using TaskFn = void (*)(void* ctx, int64_t task, int thread);
  void Run(int64_t n_tasks, TaskFn fn, void* ctx);

 private:
  void WorkerLoop(int thread);
  void RunTasks(int thread);

  const int n_threads_;
  std::vector<std::thread> workers_;

  // The published job; written by the dispatcher before `generation_` is
  // bumped and read by workers after they observe the new generation.
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_tasks_ = 0;

  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int64_t> next_task_{0};
  alignas(64) std::atomic<int> workers_busy_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace moetier::cpu
