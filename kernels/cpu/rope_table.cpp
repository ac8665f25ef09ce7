// kernels/cpu/rope_table.cpp — lazily filled RoPE rotation tables (see rope_table.h).
#include "kernels/cpu/rope_table.h"

#include <cstring>

#include "ds4/result.h"
#include "kernels/cpu/ops.h"

namespace ds4::cpu {

struct RopeRotationTable::Table {
  std::vector<float> freqs;                     // the key: half frequencies
  std::vector<std::unique_ptr<float[]>> blocks;  // block b = positions [b*kBlock, (b+1)*kBlock); null until used
};

RopeRotationTable::RopeRotationTable() = default;
RopeRotationTable::~RopeRotationTable() = default;

RopeRotationTable::Table* RopeRotationTable::find_or_add(const float* freqs, int half) {
  const size_t bytes = static_cast<size_t>(half) * sizeof(float);
  for (auto& t : tables_)
    if (t->freqs.size() == static_cast<size_t>(half) && std::memcmp(t->freqs.data(), freqs, bytes) == 0) return t.get();
  if (tables_.size() >= kMaxTables) return nullptr;
  auto t = std::make_unique<Table>();
  t->freqs.assign(freqs, freqs + half);
  tables_.push_back(std::move(t));
  return tables_.back().get();
}

const float* RopeRotationTable::row_locked(Table& t, int64_t pos) {
  const int half = static_cast<int>(t.freqs.size());
  const size_t b = static_cast<size_t>(pos / kBlock);
  if (t.blocks.size() <= b) t.blocks.resize(b + 1);
  if (!t.blocks[b]) {
    // The rows are rope_angles' own output (the definition of the rotation; kernels/cpu/rope.cpp).
    auto blk = std::make_unique<float[]>(static_cast<size_t>(kBlock * 2 * half));
    for (int64_t i = 0; i < kBlock; ++i)
      rope_angles(t.freqs.data(), half, static_cast<int64_t>(b) * kBlock + i, blk.get() + i * 2 * half);
    t.blocks[b] = std::move(blk);
  }
  return t.blocks[b].get() + (pos % kBlock) * 2 * half;
}

bool RopeRotationTable::rows(const float* freqs, int half, const int32_t* pos, int64_t n, const float** out) {
  DS4_CHECK(half > 0 && half <= 4096);
  for (int64_t t = 0; t < n; ++t)
    if (pos[t] < 0 || pos[t] >= kMaxPos) return false;
  std::lock_guard<std::mutex> lk(mu_);
  Table* tab = find_or_add(freqs, half);
  if (tab == nullptr) return false;
  for (int64_t t = 0; t < n; ++t) out[t] = row_locked(*tab, pos[t]);
  return true;
}

const float* RopeRotationTable::row(const float* freqs, int half, int64_t pos) {
  if (pos < 0 || pos >= kMaxPos) return nullptr;
  const int32_t p = static_cast<int32_t>(pos);
  const float* r = nullptr;
  return rows(freqs, half, &p, 1, &r) ? r : nullptr;
}

}  // namespace ds4::cpu
