// engine/server/prefix_cache.h — the server's prefix cache: host snapshots of a sequence's state
// (Session::save_state: window ring, compressed KV, indexer keys, compressor buffers) keyed by the
// token prefix they were computed from, taken at multiples of a block size, evicted least recently
// used beyond a byte budget. Restoring a snapshot of prefix P and feeding the rest of a prompt gives
// the logits of one prefill of the whole prompt bit for bit (the engine's chunking invariance,
// DESIGN.md "Batch invariance"; tests/server/server_unit_test.cpp checks it). Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace ds4::server {

/// Counters for /metrics.
struct PrefixCacheStats {
  uint64_t entries = 0, bytes = 0, max_bytes = 0;
  uint64_t lookups = 0, hits = 0, hit_tokens = 0, inserts = 0, evictions = 0;
};

/// LRU map token prefix -> state blob.
class PrefixCache {
 public:
  /// `max_bytes` of blobs at most (0 = the cache keeps nothing); snapshots at multiples of `block`
  /// tokens (>= 1).
  PrefixCache(uint64_t max_bytes, int block);
  int block() const { return block_; }
  /// The longest cached prefix of `tokens` whose length is a block multiple <= `limit`; sets `*len`
  /// to its length (0 and nullptr when none). Counts a lookup (and a hit) and refreshes the entry.
  std::shared_ptr<const std::vector<uint8_t>> lookup(std::span<const int32_t> tokens, size_t limit, size_t* len);
  /// Whether exactly `prefix` is cached (no counters, no refresh).
  bool contains(std::span<const int32_t> prefix) const;
  /// Stores `blob` for `prefix` (a block multiple long), evicting the least recently used entries
  /// to stay within the budget; a blob larger than the whole budget is not stored.
  void insert(std::span<const int32_t> prefix, std::vector<uint8_t> blob);
  PrefixCacheStats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::shared_ptr<const std::vector<uint8_t>> blob;
    uint64_t hash;
  };
  static uint64_t hash_of(std::span<const int32_t> t);
  std::list<Entry>::iterator find(std::span<const int32_t> prefix, uint64_t h) const;

  const uint64_t max_bytes_;
  const int block_;
  mutable std::mutex mu_;
  mutable std::list<Entry> lru_;  // most recent first
  std::unordered_multimap<uint64_t, std::list<Entry>::iterator> index_;
  PrefixCacheStats st_;
};

}  // namespace ds4::server
