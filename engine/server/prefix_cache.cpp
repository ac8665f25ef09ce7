// engine/server/prefix_cache.cpp — see prefix_cache.h.
#include "engine/server/prefix_cache.h"

#include <algorithm>

namespace ds4::server {

PrefixCache::PrefixCache(uint64_t max_bytes, int block) : max_bytes_(max_bytes), block_(std::max(1, block)) {
  st_.max_bytes = max_bytes;
}

// FNV-1a over the token ids' bytes (a bucket key; entries compare the full token list).
uint64_t PrefixCache::hash_of(std::span<const int32_t> t) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t v : t)
    for (int b = 0; b < 4; ++b) {
      h ^= (uint32_t(v) >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  return h;
}

std::list<PrefixCache::Entry>::iterator PrefixCache::find(std::span<const int32_t> prefix, uint64_t h) const {
  auto [b, e] = index_.equal_range(h);
  for (auto it = b; it != e; ++it)
    if (std::equal(it->second->tokens.begin(), it->second->tokens.end(), prefix.begin(), prefix.end()))
      return it->second;
  return lru_.end();
}

std::shared_ptr<const std::vector<uint8_t>> PrefixCache::lookup(std::span<const int32_t> tokens, size_t limit,
                                                                 size_t* len) {
  std::lock_guard lk(mu_);
  ++st_.lookups;
  *len = 0;
  limit = std::min(limit, tokens.size());
  for (size_t n = limit / block_ * block_; n >= size_t(block_); n -= block_) {
    auto p = tokens.first(n);
    auto it = find(p, hash_of(p));
    if (it == lru_.end()) continue;
    lru_.splice(lru_.begin(), lru_, it);
    ++st_.hits;
    st_.hit_tokens += n;
    *len = n;
    return it->blob;
  }
  return nullptr;
}

bool PrefixCache::contains(std::span<const int32_t> prefix) const {
  std::lock_guard lk(mu_);
  return find(prefix, hash_of(prefix)) != lru_.end();
}

void PrefixCache::insert(std::span<const int32_t> prefix, std::vector<uint8_t> blob) {
  std::lock_guard lk(mu_);
  if (blob.size() > max_bytes_) return;
  const uint64_t h = hash_of(prefix);
  if (find(prefix, h) != lru_.end()) return;
  while (!lru_.empty() && st_.bytes + blob.size() > max_bytes_) {
    const Entry& old = lru_.back();
    auto [b, e] = index_.equal_range(old.hash);
    for (auto it = b; it != e; ++it)
      if (it->second == std::prev(lru_.end())) {
        index_.erase(it);
        break;
      }
    st_.bytes -= old.blob->size();
    --st_.entries;
    ++st_.evictions;
    lru_.pop_back();
  }
  st_.bytes += blob.size();
  ++st_.entries;
  ++st_.inserts;
  lru_.push_front(Entry{std::vector<int32_t>(prefix.begin(), prefix.end()),
                        std::make_shared<const std::vector<uint8_t>>(std::move(blob)), h});
  index_.emplace(h, lru_.begin());
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard lk(mu_);
  return st_;
}

}  // namespace ds4::server
