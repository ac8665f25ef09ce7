// staging/nvme_rank_reader.cpp — see nvme_rank_reader.h.
#include "staging/nvme_rank_reader.h"

#include <algorithm>

namespace ds4::staging {

Result<std::unique_ptr<NvmeRankReader>> NvmeRankReader::open(const std::vector<std::string>& paths,
                                                             const ReaderOptions& opts) {
  std::unique_ptr<NvmeRankReader> r(new NvmeRankReader());
  DS4_TRY(r->reader_, NvmeReader::open(paths, opts));
  return r;
}

void NvmeRankReader::begin_step() {
  if (recent_used_.size() < kTrimWindow)
    recent_used_.push_back(used_);
  else
    recent_used_[recent_at_++ % kTrimWindow] = used_;
  const size_t keep = *std::max_element(recent_used_.begin(), recent_used_.end());
  while (buffers_.size() > keep) buffers_.pop_back();  // a deque: the others stay where they are
  used_ = 0;
  entries_.clear();
}

uint64_t NvmeRankReader::held_bytes() const {
  uint64_t b = 0;
  for (const std::vector<uint8_t>& v : buffers_) b += v.size();
  return b;
}

uint8_t* NvmeRankReader::buffer(uint64_t bytes) {
  if (used_ == buffers_.size()) buffers_.emplace_back();
  std::vector<uint8_t>& b = buffers_[used_++];
  if (b.size() < bytes) b.resize(bytes);
  return b.data();
}

Result<const uint8_t*> NvmeRankReader::whole(const ExpertLayout& L, int layer, int expert, uint64_t* read_bytes) {
  *read_bytes = 0;
  for (const Entry& e : entries_)
    if (!e.sliced && e.layer == layer && e.expert == expert) return e.m[0].data;
  uint8_t* dst = buffer(L.slab_bytes(layer));
  std::vector<ReadRequest> reqs;
  std::vector<uint8_t*> dsts;
  uint64_t bytes = 0;
  for (const SlabSource& s : L.sources(layer, expert)) {
    reqs.push_back({s.shard, s.file_offset, s.bytes});
    dsts.push_back(dst + s.slab_offset);
    bytes += s.bytes;
  }
  if (Result<void> r = reader_->read_into(reqs, dsts); !r) {
    --used_;  // the buffer holds nothing usable
    return r.error();
  }
  Entry e;
  e.layer = layer;
  e.expert = expert;
  e.m[0].data = dst;
  entries_.push_back(e);
  *read_bytes = bytes;
  return static_cast<const uint8_t*>(dst);
}

Result<void> NvmeRankReader::whole_many(const ExpertLayout& L, int layer, std::span<const int> experts,
                                        std::vector<uint64_t>* read_bytes) {
  read_bytes->assign(experts.size(), 0);
  const size_t used0 = used_, entries0 = entries_.size();
  std::vector<ReadRequest> reqs;
  std::vector<uint8_t*> dsts;
  for (size_t i = 0; i < experts.size(); ++i) {
    const int expert = experts[i];
    bool have = false;
    for (const Entry& e : entries_)
      have = have || (!e.sliced && e.layer == layer && e.expert == expert);
    if (have) continue;
    uint8_t* dst = buffer(L.slab_bytes(layer));
    for (const SlabSource& s : L.sources(layer, expert)) {
      reqs.push_back({s.shard, s.file_offset, s.bytes});
      dsts.push_back(dst + s.slab_offset);
      (*read_bytes)[i] += s.bytes;
    }
    Entry e;
    e.layer = layer;
    e.expert = expert;
    e.m[0].data = dst;
    entries_.push_back(e);  // also marks a second listing of the expert as read
  }
  if (reqs.empty()) return ok();
  if (Result<void> r = reader_->read_into(reqs, dsts); !r) {
    used_ = used0;  // the buffers hold nothing usable
    entries_.resize(entries0);
    read_bytes->assign(experts.size(), 0);
    return r.error();
  }
  return ok();
}

Result<std::array<dev::WeightMatrix, 3>> NvmeRankReader::slice(const ExpertLayout& L, int layer, int expert, int rank,
                                                               int ranks, uint64_t* read_bytes) {
  DS4_CHECK(ranks >= 1 && rank >= 0 && rank < ranks);
  *read_bytes = 0;
  for (const Entry& e : entries_)
    if (e.sliced && e.layer == layer && e.expert == expert) return e.m;
  std::array<dev::WeightMatrix, 3> m{};
  std::array<ReadRequest, 3> reqs{};
  std::array<uint64_t, 3> off{};
  uint64_t total = 0;
  for (int p = 0; p < 3; ++p) {
    const ExpertTensorRef& t = L.tensor(layer, static_cast<ExpertProj>(p));
    const int64_t r0 = t.out * rank / ranks, r1 = t.out * (rank + 1) / ranks;
    dev::WeightMatrix& w = m[size_t(p)];
    w.type = t.type;
    w.in = t.in;
    w.out = r1 - r0;
    w.row_bytes = t.row_bytes;
    // Row r0 of expert `expert`: (expert*out + r0) rows past the tensor's start; rows r0..r1-1
    // follow contiguously.
    reqs[size_t(p)] = {t.shard, t.file_offset + (static_cast<uint64_t>(expert) * uint64_t(t.out) + uint64_t(r0)) * t.row_bytes,
                       static_cast<uint64_t>(w.out) * t.row_bytes};
    off[size_t(p)] = total;
    total += reqs[size_t(p)].length;
  }
  uint8_t* dst = buffer(total);
  std::array<uint8_t*, 3> dsts{dst + off[0], dst + off[1], dst + off[2]};
  if (Result<void> r = reader_->read_into(reqs, dsts); !r) {
    --used_;
    return r.error();
  }
  for (int p = 0; p < 3; ++p) m[size_t(p)].data = dsts[size_t(p)];
  Entry e;
  e.layer = layer;
  e.expert = expert;
  e.sliced = true;
  e.m = m;
  entries_.push_back(e);
  *read_bytes = total;
  return m;
}

ReaderCounters merge_reader_counters(const std::vector<ReaderCounters>& parts) {
  ReaderCounters c;
  if (parts.empty()) return c;
  c.backend = parts[0].backend;
  c.backend_reason = parts[0].backend_reason;
  for (const ReaderCounters& p : parts) {
    c.bytes += p.bytes;
    c.device_bytes += p.device_bytes;
    c.reads += p.reads;
    c.direct_reads += p.direct_reads;
    c.buffered_reads += p.buffered_reads;
    c.direct_refused += p.direct_refused;
    c.retries += p.retries;
    c.fallback_preads += p.fallback_preads;
    c.short_reads += p.short_reads;
    c.lat_p50_us = std::max(c.lat_p50_us, p.lat_p50_us);
    c.lat_p90_us = std::max(c.lat_p90_us, p.lat_p90_us);
    c.lat_p99_us = std::max(c.lat_p99_us, p.lat_p99_us);
    c.lat_max_us = std::max(c.lat_max_us, p.lat_max_us);
  }
  return c;
}

}  // namespace ds4::staging
