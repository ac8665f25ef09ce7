// engine/sequence_state.cpp — see sequence_state.h.
#include "engine/sequence_state.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace ds4 {
namespace {

constexpr uint32_t kMagic = 0x53345344;  // "DS4S"
constexpr uint32_t kVersion = 1;

struct BlobHeader {
  uint32_t magic, version;
  int64_t pos, capacity, n_layer;
};

/// The tensors of a layer in blob order with the rows saved for position `pos`.
template <typename F>
void for_each_part(const ModelConfig& c, int l, const LayerState& s, int64_t pos, F&& f) {
  f(s.window, s.window.ne1);
  const int r = c.ratio(l);
  if (r > 0) {
    f(s.ckv, pos / r);
    f(s.cmp_cur, s.cmp_cur.ne1);
    if (!s.cmp_prev.empty()) f(s.cmp_prev, s.cmp_prev.ne1);
  }
  if (r == 4) {
    f(s.ikv, pos / 4);
    f(s.icmp_cur, s.icmp_cur.ne1);
    f(s.icmp_prev, s.icmp_prev.ne1);
  }
}

}  // namespace

SequenceState::SequenceState(const ModelConfig& c, dev::Device& d, int64_t capacity)
    : c_(&c), dev_(&d), capacity_(capacity) {
  DS4_CHECK(capacity >= 1 && capacity <= c.n_ctx);
  // Layout: every tensor 64-byte aligned in one buffer.
  struct Want {
    dev::Tensor* t;
    int64_t row_len, rows;
  };
  layers.assign(c.n_layer, LayerState{});
  std::vector<Want> want;
  for (int l = 0; l < c.n_layer; ++l) {
    LayerState& s = layers[l];
    const int r = c.ratio(l);
    want.push_back({&s.window, c.head_dim, c.window});
    if (r > 0) {
      const int64_t w = (r == 4 ? 2 : 1) * c.head_dim;
      want.push_back({&s.ckv, c.head_dim, std::max<int64_t>(1, capacity / r)});
      want.push_back({&s.cmp_cur, r * w, 2});
      if (r == 4) want.push_back({&s.cmp_prev, r * c.head_dim, 2});
    }
    if (r == 4) {
      want.push_back({&s.ikv, c.idx_head_dim, std::max<int64_t>(1, capacity / 4)});
      want.push_back({&s.icmp_cur, 4 * 2 * c.idx_head_dim, 2});
      want.push_back({&s.icmp_prev, 4 * c.idx_head_dim, 2});
    }
  }
  uint64_t total = 0;
  std::vector<uint64_t> off;
  for (const Want& w : want) {
    off.push_back(total);
    total += (static_cast<uint64_t>(w.row_len * w.rows) * 4 + 63) / 64 * 64;
  }
  buf_ = d.alloc(total);
  for (size_t i = 0; i < want.size(); ++i) {
    const uint64_t rb = static_cast<uint64_t>(want[i].row_len) * 4;
    *want[i].t = dev::Tensor{buf_.get(), off[i], GgmlType::F32, want[i].row_len, want[i].rows, 1, rb,
                             rb * static_cast<uint64_t>(want[i].rows)};
  }
}

uint64_t SequenceState::bytes() const { return buf_->bytes(); }

std::vector<uint8_t> SequenceState::save() const {
  std::vector<uint8_t> blob(sizeof(BlobHeader));
  const BlobHeader h{kMagic, kVersion, pos, capacity_, c_->n_layer};
  std::memcpy(blob.data(), &h, sizeof h);
  for (int l = 0; l < c_->n_layer; ++l)
    for_each_part(*c_, l, layers[l], pos, [&](const dev::Tensor& t, int64_t rows) {
      const uint64_t n = static_cast<uint64_t>(rows) * t.nb1;
      const size_t at = blob.size();
      blob.resize(at + n);
      if (n > 0) dev_->download(dev_->stream(), t.rows_view(0, rows), blob.data() + at, n);
    });
  return blob;
}

Result<void> SequenceState::restore(std::span<const uint8_t> blob) {
  BlobHeader h;
  if (blob.size() < sizeof h)
    return Error{"sequence state: expected a blob of at least " + std::to_string(sizeof h) + " bytes, found " +
                 std::to_string(blob.size())};
  std::memcpy(&h, blob.data(), sizeof h);
  if (h.magic != kMagic || h.version != kVersion) {
    char found[64];
    std::snprintf(found, sizeof found, "magic 0x%08x version %u", h.magic, h.version);
    return Error{"sequence state: expected magic 0x" + std::string("53345344") + " (DS4S) version " +
                 std::to_string(kVersion) + ", found " + found};
  }
  if (h.n_layer != c_->n_layer)
    return Error{"sequence state: expected " + std::to_string(c_->n_layer) + " layers, found " +
                 std::to_string(h.n_layer)};
  if (h.pos < 0 || h.pos > capacity_)
    return Error{"sequence state: position " + std::to_string(h.pos) + " exceeds this session's capacity " +
                 std::to_string(capacity_)};
  uint64_t need = sizeof h;
  for (int l = 0; l < c_->n_layer; ++l)
    for_each_part(*c_, l, layers[l], h.pos,
                  [&](const dev::Tensor& t, int64_t rows) { need += static_cast<uint64_t>(rows) * t.nb1; });
  if (blob.size() != need)
    return Error{"sequence state: expected " + std::to_string(need) + " bytes for position " + std::to_string(h.pos) +
                 ", found " + std::to_string(blob.size())};
  size_t at = sizeof h;
  for (int l = 0; l < c_->n_layer; ++l)
    for_each_part(*c_, l, layers[l], h.pos, [&](const dev::Tensor& t, int64_t rows) {
      const uint64_t n = static_cast<uint64_t>(rows) * t.nb1;
      if (n > 0) dev_->upload(dev_->stream(), t.rows_view(0, rows), blob.data() + at, n);
      at += n;
    });
  pos = h.pos;
  return ok();
}

}  // namespace ds4
