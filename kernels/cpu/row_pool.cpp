// kernels/cpu/row_pool.cpp — the persistent worker pool behind parallel_chunks.
//
// Per-call cost matters: an expert matvec reads 4-9 MB in well under a millisecond, so a futex
// wake-up per worker and a join that waits for a worker the OS has descheduled are a visible
// fraction of it. Hence:
//  * workers spin (with pause) for a short while on the job counter before blocking on the
//    condition variable, so back-to-back jobs start without a wake-up; every few microseconds of
//    spinning they yield the core (sched_yield): on a machine with more runnable threads than
//    cores a spinning worker otherwise holds a core for its whole time slice while the thread it
//    waits for (the caller, doing the serial part of a step) or other processes wait to run
//    (perf on the 2-core VM at load ~8: 20 % of the process's samples were the worker's pause
//    loop, bench/README.md issue 19);
//  * each participant first claims the chunks of its own contiguous part of [0, n) in order, then
//    steals from the others: a thread walks one range, so the kernels' prefetch of the next rows
//    lands in rows the same thread reads next (interleaved claiming left every chunk's first rows
//    unprefetched: MXFP4 2-thread cold was 10-13 % slower, bench/README.md issue 8);
//  * the caller never waits for a helper that has not started: it closes the job once all chunks
//    are claimed and waits only for helpers that checked in before the close (a late helper
//    sees the close and skips the job without touching it).
#include "kernels/cpu/row_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ds4::cpu {

namespace {

/// How long an idle worker (and the caller waiting for helpers) polls before blocking.
constexpr std::chrono::microseconds kSpin{100};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

class WorkerPool::Impl {
 public:
  ~Impl() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_.store(true);
      generation_.store(generation_.load() + 1);  // wakes spinning and blocked workers
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(int64_t n, int64_t chunk, int n_threads, const std::function<void(int64_t, int64_t)>& body) {
    std::unique_lock<std::mutex> job_lock(job_mu_, std::try_to_lock);
    const int64_t max_useful = (n + chunk - 1) / chunk;
    const int helpers = int(std::min<int64_t>(n_threads, max_useful)) - 1;
    if (!job_lock.owns_lock() || helpers <= 0) {  // busy (nested/concurrent call) or serial
      for (int64_t b = 0; b < n; b += chunk) body(b, std::min(n, b + chunk));
      return;
    }
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lk(mu_);
      while (int(workers_.size()) < helpers) {
        const int id = int(workers_.size());
        workers_.emplace_back([this, id] { worker(id); });
      }
      body_ = &body;
      n_ = n;
      chunk_ = chunk;
      parts_ = helpers + 1;
      if (int(slots_.size()) < parts_) slots_ = std::vector<Slot>(size_t(parts_));
      // Part p = chunks [p*nc/parts, (p+1)*nc/parts) in item units.
      const int64_t nc = max_useful;
      for (int p = 0; p < parts_; ++p) {
        slots_[size_t(p)].next.store(nc * p / parts_ * chunk);
        slots_[size_t(p)].end = std::min(n, nc * (p + 1) / parts_ * chunk);
      }
      helpers_ = helpers;
      gen = generation_.load() + 1;
      generation_.store(gen);
    }
    cv_.notify_all();
    drain(0);
    // Every chunk is claimed; helpers that check in from now on skip this job.
    closed_.store(gen);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; active_.load() != 0; ++i) {
      if ((i & 63) == 63) {
        if (std::chrono::steady_clock::now() - t0 > kSpin) {
          std::unique_lock<std::mutex> lk(mu_);
          done_cv_.wait(lk, [this] { return active_.load() == 0; });
          break;
        }
        std::this_thread::yield();  // a preempted helper may need this core to finish
      }
      cpu_relax();
    }
    body_ = nullptr;
  }

 private:
  /// Claims chunks of its own part `me` in order first (so a thread walks one contiguous range and
  /// its kernels' prefetches of the next rows land in rows it reads next), then the other parts'.
  void drain(int me) {
    for (int i = 0; i < parts_; ++i) {
      Slot& sl = slots_[size_t((me + i) % parts_)];
      for (int64_t b; (b = sl.next.fetch_add(chunk_)) < sl.end;) (*body_)(b, std::min(sl.end, b + chunk_));
    }
  }
  /// Waits until generation_ != seen: spins for kSpin, then blocks.
  uint64_t wait_job(uint64_t seen) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0;; ++i) {
      const uint64_t g = generation_.load(std::memory_order_acquire);
      if (g != seen) return g;
      if ((i & 63) == 63) {
        if (std::chrono::steady_clock::now() - t0 > kSpin) break;
        std::this_thread::yield();  // let a runnable thread (the caller, another process) have the core
      }
      cpu_relax();
    }
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return generation_.load() != seen || stop_.load(); });
    return generation_.load();
  }
  void worker(int id) {
    uint64_t seen = 0;
    for (;;) {
      const uint64_t g = wait_job(seen);
      if (stop_.load()) return;
      seen = g;
      int helpers;
      {
        std::lock_guard<std::mutex> lk(mu_);
        helpers = helpers_;
        if (generation_.load() != g) continue;  // a newer job already: pick that one up
      }
      if (id >= helpers) continue;  // not needed for this job
      // Check in, then make sure the job is still open (seq_cst pairs with closed_/active_ in run).
      active_.fetch_add(1);
      if (closed_.load() < g) drain(id + 1);
      if (active_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lk(mu_);
        done_cv_.notify_one();
      }
    }
  }

  std::mutex job_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};  // job number; written under mu_
  std::atomic<uint64_t> closed_{0};      // last job whose chunks are all claimed
  std::atomic<int> active_{0};           // helpers inside a job
  std::atomic<bool> stop_{false};        // set by the destructor
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  /// One contiguous part of the job's items per participant, claimed chunk by chunk.
  struct alignas(64) Slot {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  int64_t n_ = 0, chunk_ = 1;
  int parts_ = 1;
  std::vector<Slot> slots_;
  int helpers_ = 0;
};

WorkerPool::WorkerPool() : impl_(std::make_unique<Impl>()) {}

WorkerPool::~WorkerPool() = default;

void WorkerPool::run(int64_t n, int64_t chunk, int n_threads, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  impl_->run(n, std::max<int64_t>(1, chunk), n_threads, body);
}

void parallel_chunks(int64_t n, int64_t chunk, int n_threads, const std::function<void(int64_t, int64_t)>& body) {
  // Never destroyed: its workers block on a condition variable until the process exits.
  static WorkerPool* const shared = new WorkerPool;
  shared->run(n, chunk, n_threads, body);
}

}  // namespace ds4::cpu
