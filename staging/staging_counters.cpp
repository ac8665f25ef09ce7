// staging/staging_counters.cpp — StagingCounters::summary and the cache/reader counter copy.
#include "staging/staging_counters.h"

#include <cstdio>

#include "staging/expert_cache.h"
#include "staging/memory_limits.h"
#include "staging/nvme_reader.h"

namespace ds4::staging {

std::string StagingCounters::summary() const {
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof buf, "experts: tier %s, slabs %s (pinned %s, pageable %s)", tier.c_str(),
                format_bytes(slab_bytes).c_str(), format_bytes(pinned_bytes).c_str(),
                format_bytes(pageable_bytes).c_str());
  s += buf;
  if (!host_policy.empty()) s += "\n" + host_policy;
  std::snprintf(buf, sizeof buf, "\nexperts moved: resident reads %s, host->device %s, nvme->device %s",
                format_bytes(bytes_resident_reads).c_str(), format_bytes(bytes_host_to_device).c_str(),
                format_bytes(bytes_nvme_to_device).c_str());
  s += buf;
  if (bytes_cpu_reads + bytes_nvme_to_cpu > 0 || act_vram + act_host + act_cpu + act_nvme > 0) {
    std::snprintf(buf, sizeof buf, "\nexperts moved: cpu reads %s, nvme->cpu %s; expert-steps vram %llu, host %llu, cpu %llu, nvme %llu",
                  format_bytes(bytes_cpu_reads).c_str(), format_bytes(bytes_nvme_to_cpu).c_str(),
                  static_cast<unsigned long long>(act_vram), static_cast<unsigned long long>(act_host),
                  static_cast<unsigned long long>(act_cpu), static_cast<unsigned long long>(act_nvme));
    s += buf;
  }
  const uint64_t n = cache_hits + cache_misses + cache_bypass;
  if (n > 0) {
    std::snprintf(buf, sizeof buf, "\nexpert cache: %llu hits, %llu misses, %llu bypass, %llu evictions (hit rate %.1f%%)",
                  static_cast<unsigned long long>(cache_hits), static_cast<unsigned long long>(cache_misses),
                  static_cast<unsigned long long>(cache_bypass), static_cast<unsigned long long>(cache_evictions),
                  100.0 * static_cast<double>(cache_hits) / static_cast<double>(n));
    s += buf;
  }
  if (has_reader) {
    const ReaderCounters& r = reader;
    std::snprintf(buf, sizeof buf,
                  "\nnvme reader: %s; %s in %llu reads (%llu direct, %llu buffered, %llu O_DIRECT refusals, "
                  "%llu retries, %llu pread fallbacks); latency p50 %.0f us, p90 %.0f us, p99 %.0f us, max %.0f us",
                  r.backend.c_str(), format_bytes(r.bytes).c_str(), static_cast<unsigned long long>(r.reads),
                  static_cast<unsigned long long>(r.direct_reads), static_cast<unsigned long long>(r.buffered_reads),
                  static_cast<unsigned long long>(r.direct_refused), static_cast<unsigned long long>(r.retries),
                  static_cast<unsigned long long>(r.fallback_preads), r.lat_p50_us, r.lat_p90_us, r.lat_p99_us,
                  r.lat_max_us);
    s += buf;
    s += "\nnvme reader backend: " + r.backend_reason;
  }
  return s;
}

void add_cache_and_reader_counters(StagingCounters* c, const ExpertCache* cache, const NvmeReader* reader) {
  if (cache) {
    const CacheStats& s = cache->stats();
    c->cache_hits = s.hits;
    c->cache_misses = s.misses;
    c->cache_bypass = s.bypass;
    c->cache_evictions = s.evictions;
  }
  if (reader) {
    c->has_reader = true;
    c->reader = reader->counters();
  }
}

}  // namespace ds4::staging
