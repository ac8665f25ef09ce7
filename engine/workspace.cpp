// engine/workspace.cpp — see workspace.h.
#include "engine/workspace.h"

#include <algorithm>

#include "ds4/result.h"

namespace ds4 {

void Workspace::reset() {
  if (chunks_.size() > 1) {
    uint64_t total = 0;
    for (const Chunk& c : chunks_) total += c.buf->bytes();
    chunks_.clear();
    chunks_.push_back(Chunk{dev_.alloc(total), 0});
  }
  for (Chunk& c : chunks_) c.used = 0;
  cur_ = 0;
}

void Workspace::release(const Mark& m) {
  for (size_t i = m.chunk + 1; i < chunks_.size(); ++i) chunks_[i].used = 0;
  if (m.chunk < chunks_.size()) chunks_[m.chunk].used = m.used;
  cur_ = m.chunk;
}

dev::Tensor Workspace::take(GgmlType type, int64_t row_len, int64_t rows, int64_t planes) {
  const uint64_t rb = dev::row_bytes_of(type, row_len);
  const uint64_t bytes = std::max<uint64_t>(64, (rb * static_cast<uint64_t>(rows * planes) + 63) / 64 * 64);
  while (cur_ < chunks_.size() && chunks_[cur_].used + bytes > chunks_[cur_].buf->bytes()) {
    ++cur_;
    if (cur_ < chunks_.size()) chunks_[cur_].used = 0;
  }
  if (cur_ == chunks_.size()) {
    const uint64_t last = chunks_.empty() ? 0 : chunks_.back().buf->bytes();
    chunks_.push_back(Chunk{dev_.alloc(std::max<uint64_t>({bytes, 2 * last, uint64_t{1} << 20})), 0});
  }
  Chunk& c = chunks_[cur_];
  dev::Tensor t{c.buf.get(), c.used, type, row_len, rows, planes, rb, rb * static_cast<uint64_t>(rows)};
  c.used += bytes;
  return t;
}

}  // namespace ds4
