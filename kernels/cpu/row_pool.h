// kernels/cpu/row_pool.h — persistent worker threads for the CPU kernels (matvec_q8_1, memory
// probe): work is split into chunks that threads claim dynamically, so a thread that the OS
// deschedules (other processes on the cores) does not hold the whole operation back. Which thread
// computes a chunk never changes a result: each output is computed by one call of the body.
#pragma once

#include <cstdint>
#include <functional>

namespace ds4::cpu {

/// Calls body(begin, end) for consecutive ranges [begin, end) of at most `chunk` items covering
/// [0, n), on up to `n_threads` threads (the calling thread included; n_threads <= 1 or a call
/// made while another parallel_chunks call is running — e.g. nested — runs on the calling thread
/// only). Returns when every range is done. Workers are created on first use and kept.
void parallel_chunks(int64_t n, int64_t chunk, int n_threads, const std::function<void(int64_t, int64_t)>& body);

}  // namespace ds4::cpu
