// staging/staging_counters.h — what the staging tiers did during a run: bytes moved per tier,
// cache hits/misses, host memory policy and the NVMe reader's counters. Printed by the run summary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds4::staging {

/// Counters of one NvmeReader (all byte counts are bytes handed to callers, not covering bytes).
struct ReaderCounters {
  std::string backend;          // "io_uring+fixed-buffers", "io_uring", "pread-pool", or "" (none)
  std::string backend_reason;   // why the probe chose it
  uint64_t bytes = 0;           // requested bytes delivered
  uint64_t device_bytes = 0;    // bytes actually read from the file (aligned covering reads)
  uint64_t reads = 0;           // read operations completed (covering pieces)
  uint64_t direct_reads = 0;    // of which through an O_DIRECT descriptor
  uint64_t buffered_reads = 0;  // of which through the page cache
  uint64_t direct_refused = 0;  // O_DIRECT refused (EINVAL at open or read) -> buffered fallback
  uint64_t retries = 0;         // EAGAIN/ENOMEM/EINTR resubmissions (backoff)
  uint64_t fallback_preads = 0; // pieces finished by pread after io_uring kept failing
  uint64_t short_reads = 0;     // completions shorter than asked, finished by pread
  double lat_p50_us = 0, lat_p90_us = 0, lat_p99_us = 0, lat_max_us = 0;  // per piece
};

/// Summary of an ExpertStore's staging activity (ExpertStore::counters()).
struct StagingCounters {
  std::string tier;                 // "mmap", "resident", "host", "nvme", "plan"
  uint64_t slab_bytes = 0;          // bytes of all repacked expert slabs held by the store
  uint64_t pinned_bytes = 0;        // of which pinned (mlock / cudaHostRegister)
  uint64_t pageable_bytes = 0;      // of which pageable
  std::string host_policy;          // the one-line host memory decision ("" when all pinned)
  uint64_t bytes_resident_reads = 0;// bytes served straight from resident/host slabs (no copy)
  uint64_t bytes_host_to_device = 0;// bytes copied host slab -> device cache slot
  uint64_t bytes_nvme_to_device = 0;// bytes read from the file into device cache slots
  // Per-tier traffic of the plan-driven mixed store (make_mixed_expert_store); the single-tier
  // stores fill the fields of their tier. "Device" is host memory in a CPU build.
  uint64_t bytes_cpu_reads = 0;     // bytes of CPU-computed experts read by the cores (host slabs,
                                    // or the host buffer an NVMe-then-CPU expert was read into)
  uint64_t bytes_nvme_to_cpu = 0;   // bytes read from the file into a host buffer for CPU compute
  std::vector<uint64_t> cpu_reads_by_node;  // bytes_cpu_reads split by the plan's node index
  // Expert-steps per tier: one per (step, expert) the step uses (= activations at batch 1, decode).
  uint64_t act_vram = 0, act_host = 0, act_cpu = 0, act_nvme = 0;
  uint64_t cache_hits = 0, cache_misses = 0, cache_bypass = 0, cache_evictions = 0;
  bool has_reader = false;
  ReaderCounters reader;
  /// Multi-line human summary ("experts: tier host, ..."), one fact per line, no trailing newline.
  std::string summary() const;
};

class ExpertCache;  // staging/expert_cache.h
class NvmeReader;   // staging/nvme_reader.h

/// Copies the cache's hit/miss/bypass/eviction counts and the reader's counters into `c`; either
/// may be null (nothing copied for it).
void add_cache_and_reader_counters(StagingCounters* c, const ExpertCache* cache, const NvmeReader* reader);

}  // namespace ds4::staging
