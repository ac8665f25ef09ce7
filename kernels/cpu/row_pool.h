// kernels/cpu/row_pool.h — persistent worker threads for the CPU kernels (matvec_q8_1, memory
// probe): work is split into chunks that threads claim dynamically, so a thread that the OS
// deschedules (other processes on the cores) does not hold the whole operation back. Which thread
// computes a chunk never changes a result: each output is computed by one call of the body.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace ds4::cpu {

/// A set of persistent worker threads that runs chunked jobs (see parallel_chunks for the contract
/// of run). Each instance has its own threads, created on first use (up to n_threads - 1) and
/// joined by the destructor; one job at a time per instance: a run() made while one is running on
/// the same instance (nested, or from another thread) runs on the calling thread only. Separate
/// instances run in parallel (e.g. one per CPU tensor-parallel rank, kernels/device_cpu.cpp).
class WorkerPool {
 public:
  WorkerPool();
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  /// body(begin, end) over [0, n) in ranges of at most `chunk` items on up to `n_threads` threads
  /// (the caller included); returns when every range is done.
  void run(int64_t n, int64_t chunk, int n_threads, const std::function<void(int64_t, int64_t)>& body);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

/// Calls body(begin, end) for consecutive ranges [begin, end) of at most `chunk` items covering
/// [0, n), on up to `n_threads` threads (the calling thread included; n_threads <= 1 or a call
/// made while another parallel_chunks call is running — e.g. nested — runs on the calling thread
/// only). Returns when every range is done. Runs on one process-wide WorkerPool (matvec_q8_1, the
/// memory probe); workers are created on first use and kept.
void parallel_chunks(int64_t n, int64_t chunk, int n_threads, const std::function<void(int64_t, int64_t)>& body);

}  // namespace ds4::cpu
