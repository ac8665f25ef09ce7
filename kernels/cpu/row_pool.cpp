// kernels/cpu/row_pool.cpp — the persistent worker pool behind parallel_chunks.
#include "kernels/cpu/row_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace ds4::cpu {

namespace {

class Pool {
 public:
  void run(int64_t n, int64_t chunk, int n_threads, const std::function<void(int64_t, int64_t)>& body) {
    std::unique_lock<std::mutex> job_lock(job_mu_, std::try_to_lock);
    const int64_t max_useful = (n + chunk - 1) / chunk;
    const int helpers = int(std::min<int64_t>(n_threads, max_useful)) - 1;
    if (!job_lock.owns_lock() || helpers <= 0) {  // busy (nested/concurrent call) or serial
      for (int64_t b = 0; b < n; b += chunk) body(b, std::min(n, b + chunk));
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      while (int(workers_.size()) < helpers) {
        const int id = int(workers_.size());
        workers_.emplace_back([this, id] { worker(id); });
      }
      body_ = &body;
      n_ = n;
      chunk_ = chunk;
      next_.store(0);
      helpers_ = helpers;
      pending_ = helpers;
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return pending_ == 0; });
    body_ = nullptr;
  }

 private:
  void drain() {
    for (int64_t b; (b = next_.fetch_add(chunk_)) < n_;) (*body_)(b, std::min(n_, b + chunk_));
  }
  void worker(int id) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (id >= helpers_) continue;  // not needed for this job
      }
      drain();
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex job_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  uint64_t generation_ = 0;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int helpers_ = 0, pending_ = 0;
};

Pool& pool() {
  // Never destroyed: workers block on the condition variable until the process exits.
  static Pool* p = [] {
    auto* q = new Pool;
    return q;
  }();
  return *p;
}

}  // namespace

void parallel_chunks(int64_t n, int64_t chunk, int n_threads, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  pool().run(n, std::max<int64_t>(1, chunk), n_threads, body);
}

}  // namespace ds4::cpu
