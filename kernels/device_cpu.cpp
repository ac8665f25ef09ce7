// kernels/device_cpu.cpp — the CPU backend of kernels/device.h: buffers are host memory, bound
// weights alias host memory, streams run each op at enqueue, and every op calls its reference in
// kernels/cpu/<op>.cpp on a fixed pool of worker threads, split over rows (tokens or weight
// rows) so that each output is written by exactly one worker (results do not depend on the
// thread count). Small ops run on the calling thread (no wake-up), and per-call scratch is kept
// by the device (no allocation in steady state). With fewer tokens than threads (decode) the ops
// split inside a token instead (heads, key blocks, mHC dots, columns, experts, compressor
// channels), each output still one reference call. RoPE reads its rotations from a table
// (kernels/cpu/rope_table.h, rope_angles' bits).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ds4/result.h"
#include "kernels/comm.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/cpu/rope_table.h"
#include "kernels/cpu/row_pool.h"
#include "kernels/device.h"

namespace ds4::dev {

bool is_fp8_fp4_weight(GgmlType type) {
  return type == GgmlType::F8_E4M3_R128 || type == GgmlType::MXFP4 || type == GgmlType::NVFP4_S2;
}

bool uses_q8_1(GgmlType type) {
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) return false;
  return cpu::can_dot_q8_1(type);
}

namespace {

const char kCpuBackendTag = 0;

/// Host memory owned by the buffer (zeroed; calloc, so untouched pages cost nothing). Throws
/// std::bad_alloc when the host has no memory for it (an input-sized condition, not a bug: the
/// frontends turn it into one "out of memory" error).
class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(uint64_t n) : bytes_(n), mem_(static_cast<uint8_t*>(std::calloc(n ? n : 1, 1))) {
    if (mem_ == nullptr) throw std::bad_alloc();
  }
  ~CpuBuffer() override { std::free(mem_); }
  uint64_t bytes() const override { return bytes_; }
  const void* backend() const override { return &kCpuBackendTag; }
  uint8_t* base() { return mem_; }

 private:
  uint64_t bytes_;
  uint8_t* mem_;
};

/// The whole host address space as one buffer: bound host memory is a tensor whose offset is the
/// address (the CPU backend reads weights in place).
class HostAlias final : public Buffer {
 public:
  uint64_t bytes() const override { return UINT64_MAX; }
  const void* backend() const override { return &kCpuBackendTag; }
};

class CpuStream final : public Stream {};
class CpuEvent final : public Event {};

uint8_t* ptr(const Tensor& t) {
  DS4_CHECK(t.buf != nullptr && t.buf->backend() == &kCpuBackendTag);
  if (auto* b = dynamic_cast<CpuBuffer*>(t.buf)) {
    DS4_CHECK(t.offset <= b->bytes());
    return b->base() + t.offset;
  }
  return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(t.offset));
}

cpu::F32Rows f32(const Tensor& t) {
  DS4_CHECK(t.type == GgmlType::F32 && t.nb1 % 4 == 0);
  return {reinterpret_cast<float*>(ptr(t)), static_cast<int64_t>(t.nb1 / 4)};
}
cpu::F32Rows f32_or_null(const Tensor& t) { return t.empty() ? cpu::F32Rows{} : f32(t); }
cpu::I32Rows i32(const Tensor& t) {
  DS4_CHECK(t.type == GgmlType::I32 && t.nb1 % 4 == 0);
  return {reinterpret_cast<int32_t*>(ptr(t)), static_cast<int64_t>(t.nb1 / 4)};
}
/// Raw 4-byte-element rows (copy of F32 or I32).
cpu::F32Rows raw4(const Tensor& t) {
  DS4_CHECK((t.type == GgmlType::F32 || t.type == GgmlType::I32) && t.nb1 % 4 == 0);
  return {reinterpret_cast<float*>(ptr(t)), static_cast<int64_t>(t.nb1 / 4)};
}
cpu::WRows wrows(const Tensor& t) {
  DS4_CHECK(t.type == GgmlType::F32 || cpu::can_dequantize(t.type));
  return {t.type, ptr(t), t.ne0, t.ne1, t.nb1};
}
const float* fptr(const Tensor& t) { return t.empty() ? nullptr : f32(t).p; }

/// Work below this many "element operations" runs on the calling thread.
constexpr int64_t kInlineWork = 1 << 15;

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int threads) : threads_(threads < 1 ? 1 : threads) {
    name_ = "cpu (" + std::to_string(threads_) + " threads)";
  }
  const char* name() const override { return name_.c_str(); }
  int threads() const override { return threads_; }

  std::unique_ptr<Buffer> alloc(uint64_t bytes) override { return std::make_unique<CpuBuffer>(bytes); }
  Tensor bind(const WeightMatrix& w) override {
    DS4_CHECK(w.data != nullptr || w.out == 0);
    Tensor t;
    t.buf = &alias_;
    t.offset = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(w.data));
    t.type = w.type;
    t.ne0 = w.in;
    t.ne1 = w.out;
    t.nb1 = w.row_bytes;
    t.nb2 = w.row_bytes * static_cast<uint64_t>(w.out);
    return t;
  }
  void upload(Stream&, const Tensor& dst, const void* src, uint64_t bytes) override {
    DS4_CHECK(dst.contiguous() || bytes <= dst.row_data_bytes());
    std::memcpy(ptr(dst), src, bytes);
  }
  void download(Stream&, const Tensor& src, void* dst, uint64_t bytes) override {
    DS4_CHECK(src.contiguous() || bytes <= src.row_data_bytes());
    std::memcpy(dst, ptr(src), bytes);
  }

  Stream& stream() override { return stream_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Event> record(Stream&) override { return std::make_unique<CpuEvent>(); }
  void wait(Stream&, const Event&) override {}
  void synchronize(Stream&) override {}

  void matmul(Stream& s, const Tensor& w, const Tensor& x, const Tensor& y, ActFormat act) override {
    const Tensor* ws[1] = {&w};
    const Tensor* ys[1] = {&y};
    run_matmuls(ws, ys, 1, x, act);
  }
  void matmul2(Stream& s, const Tensor& w0, const Tensor& y0, const Tensor& w1, const Tensor& y1, const Tensor& x,
               ActFormat act) override {
    const Tensor* ws[2] = {&w0, &w1};
    const Tensor* ys[2] = {&y0, &y1};
    run_matmuls(ws, ys, 2, x, act);
  }

  void embed_rows(Stream&, const Tensor& w, const Tensor& ids, int64_t vocab0, int64_t vocab1,
                  const Tensor& out) override {
    DS4_CHECK(out.ne0 == w.ne0 && ids.ne0 * ids.ne1 == out.ne1);
    const cpu::WRows W = wrows(w);
    const int32_t* id = i32(ids).p;
    const cpu::F32Rows o = f32(out);
    rows_par(out.ne1, w.ne0 * 4, [&](int64_t a, int64_t b) { cpu::embed_rows(W, id, vocab0, vocab1, o, a, b); });
  }
  void owner_rows(Stream&, const Tensor& all, const Tensor& ids, int64_t rows_per_rank, const Tensor& out) override {
    const int64_t n = out.ne1;
    DS4_CHECK(all.ne0 == out.ne0 && all.ne1 % n == 0);
    cpu::owner_rows(f32(all), i32(ids).p, rows_per_rank, n, out.ne0, f32(out), 0, n);
  }
  void hc_expand(Stream&, const Tensor& e, int hc, const Tensor& x) override {
    DS4_CHECK(x.ne0 == hc * e.ne0 && x.ne1 == e.ne1);
    cpu::hc_expand(f32(e), e.ne0, hc, f32(x), 0, e.ne1);
  }
  void rmsnorm(Stream&, const Tensor& x, const Tensor& weight, float eps, const Tensor& y) override {
    DS4_CHECK(x.ne0 == y.ne0 && x.ne1 == y.ne1 && (weight.empty() || weight.ne0 * weight.ne1 == x.ne0));
    const cpu::F32Rows X = f32(x), Y = f32(y);
    const float* w = fptr(weight);
    const int64_t dim = x.ne0;
    rows_par(x.ne1, dim * 3, [&](int64_t a, int64_t b) {
      for (int64_t t = a; t < b; ++t) cpu::rmsnorm_row(X.row(t), w, dim, eps, Y.row(t));
    });
  }
  void hc_pre(Stream&, const Tensor& x, const Tensor& fn, const Tensor& scale, const Tensor& base, int hc, int iters,
              float hc_eps, float norm_eps, const Tensor& y, const Tensor& mix) override {
    const int64_t dim = y.ne0;
    DS4_CHECK(x.ne0 == hc * dim && mix.ne0 == (2 + hc) * hc && x.ne1 == y.ne1 && x.ne1 == mix.ne1);
    const cpu::F32Rows X = f32(x), Y = f32(y), M = f32(mix);
    const float *F = fptr(fn), *S = fptr(scale), *B = fptr(base);
    const int64_t n = x.ne1, mr = (2 + hc) * hc, len = hc * dim;
    if (n >= threads_ || threads_ == 1 || n * mr * len < kInlineWork) {
      rows_par(n, mr * len, [&](int64_t a, int64_t b) {
        for (int64_t t = a; t < b; ++t)
          cpu::hc_pre_row(X.row(t), F, S, B, hc, dim, iters, hc_eps, norm_eps, Y.row(t), M.row(t));
      });
      return;
    }
    // Fewer tokens than threads (decode): the (2 + hc) * hc mix dots and the RMS factor of every
    // token split over the threads first (one dispatch), then each token's Sinkhorn split and
    // weighted sum (hc_pre_finish_row_scaled).
    float* dots = hc_dots(n, mr, len, X, F, norm_eps);
    for (int64_t t = 0; t < n; ++t)
      cpu::hc_pre_finish_row_scaled(X.row(t), dots + t * mr, dots[n * mr + t], S, B, hc, dim, iters, hc_eps, Y.row(t),
                                    M.row(t));
  }
  void hc_post(Stream&, const Tensor& f, const Tensor& mix, int hc, const Tensor& x) override {
    const int64_t dim = f.ne0;
    DS4_CHECK(x.ne0 == hc * dim && x.ne1 == f.ne1 && mix.ne1 == f.ne1);
    const cpu::F32Rows Fv = f32(f), M = f32(mix), X = f32(x);
    const int64_t n = f.ne1;
    if (n >= threads_ || n * hc * hc * dim < kInlineWork) {
      rows_par(n, hc * hc * dim, [&](int64_t a, int64_t b) {
        thread_local std::vector<float> tmp;
        if (tmp.size() < static_cast<size_t>(hc * dim)) tmp.resize(static_cast<size_t>(hc * dim));
        for (int64_t t = a; t < b; ++t) cpu::hc_post_row(Fv.row(t), M.row(t), hc, dim, X.row(t), tmp.data());
      });
      return;
    }
    // Fewer tokens than threads (decode): items are (token, block of kCols columns); a column's
    // outputs read only that column of the copies (hc_post_cols), so the split cannot change a bit.
    constexpr int64_t kCols = 128;
    const int64_t cb = (dim + kCols - 1) / kCols;
    rows_par(n * cb, hc * hc * std::min(dim, kCols), [&](int64_t a, int64_t b) {
      float tmp[16 * kCols];
      DS4_CHECK(hc <= 16);
      for (int64_t i = a; i < b; ++i) {
        const int64_t t = i / cb, d0 = i % cb * kCols, d1 = std::min(dim, d0 + kCols);
        cpu::hc_post_cols(Fv.row(t), M.row(t), hc, dim, X.row(t), tmp, d0, d1);
      }
    });
  }
  void hc_head(Stream&, const Tensor& x, const Tensor& fn, const Tensor& scale, const Tensor& base, int hc,
               float hc_eps, float norm_eps, const Tensor& h) override {
    const int64_t dim = h.ne0;
    DS4_CHECK(x.ne0 == hc * dim && x.ne1 == h.ne1);
    const cpu::F32Rows X = f32(x), H = f32(h);
    const float *F = fptr(fn), *S = fptr(scale), *B = fptr(base);
    const int64_t n = x.ne1, len = hc * dim;
    if (n >= threads_ || n * hc * len < kInlineWork) {
      rows_par(n, hc * len, [&](int64_t a, int64_t b) {
        for (int64_t t = a; t < b; ++t) cpu::hc_head_row(X.row(t), F, S, B, hc, dim, hc_eps, norm_eps, H.row(t));
      });
      return;
    }
    // Fewer tokens than threads: the hc dots and the RMS factor split over the threads, as hc_pre.
    float* dots = hc_dots(n, hc, len, X, F, norm_eps);
    for (int64_t t = 0; t < n; ++t)
      cpu::hc_head_finish_row(X.row(t), dots + t * hc, dots[n * hc + t], S, B, hc, dim, hc_eps, H.row(t));
  }
  void rope(Stream&, const Tensor& x, int64_t heads, const Tensor& freqs, const Tensor& pos, bool inverse) override {
    DS4_CHECK(x.ne0 % heads == 0 && pos.ne0 * pos.ne1 == x.ne1);
    const int64_t D = x.ne0 / heads;
    const int half = static_cast<int>(freqs.ne0 * freqs.ne1);
    DS4_CHECK(2 * half <= D);
    const cpu::F32Rows X = f32(x);
    const float* fr = fptr(freqs);
    const int32_t* P = i32(pos).p;
    const int64_t n = x.ne1;
    // Each row's rotation from the device's table (rope_angles' bits, computed once per position),
    // shared by its heads; computed on the spot where the table does not serve the positions.
    thread_local std::vector<const float*> table_rows;  // concurrent sessions may share the device
    if (table_rows.size() < static_cast<size_t>(n)) table_rows.resize(static_cast<size_t>(n));
    const float** rows = table_rows.data();
    const bool tab = rope_table_.rows(fr, half, P, n, rows);
    rows_par(n, (heads + (tab ? 0 : 20)) * half * 4, [&](int64_t a, int64_t b) {
      thread_local std::vector<float> cs;
      if (!tab && cs.size() < static_cast<size_t>(2 * half)) cs.resize(static_cast<size_t>(2 * half));
      for (int64_t t = a; t < b; ++t) {
        const float* r = rows[t];
        if (!tab) {
          cpu::rope_angles(fr, half, P[t], cs.data());
          r = cs.data();
        }
        for (int64_t h = 0; h < heads; ++h) cpu::rope_apply_cs(X.row(t) + h * D, D, r, half, inverse);
      }
    });
  }
  void compressor(Stream&, const Tensor& a, const Tensor& g, const Tensor& ape, const Tensor& norm, float eps,
                  const Tensor& freqs, int ratio, int64_t pos0, const Tensor& cur, const Tensor& prev,
                  const Tensor& cache) override {
    const int64_t d = cache.ne0, w = a.ne0;
    const bool overlap = !prev.empty();
    DS4_CHECK(ratio > 0 && ratio <= 128 && w == (overlap ? 2 * d : d) && g.ne0 == w && a.ne1 == g.ne1);
    DS4_CHECK(cur.ne0 * cur.ne1 == 2 * ratio * w && (!overlap || prev.ne0 * prev.ne1 == 2 * ratio * d));
    DS4_CHECK(cur.contiguous() && (prev.empty() || prev.contiguous()));
    float* cp = f32(cur).p;
    float* pp = overlap ? f32(prev).p : nullptr;
    cpu::CompressorView v{ratio, d, cp, cp + ratio * w, pp, pp ? pp + ratio * d : nullptr};
    const cpu::F32Rows A = f32(a), G = f32(g), C = f32(cache);
    const float *ap = fptr(ape), *nw = fptr(norm), *fr = fptr(freqs);
    const int half = static_cast<int>(freqs.ne0 * freqs.ne1);
    // Sequential in the tokens (a state machine); a completed block's channels are pooled on all
    // threads (each channel independent: compressor_pool), then normed and rotated.
    const int64_t per_channel = (overlap ? 2 : 1) * ratio * 16;
    for (int64_t t = 0; t < a.ne1; ++t) {
      const int64_t pos = pos0 + t, b = pos / ratio;
      if (!cpu::compressor_store(v, pos, A.row(t), G.row(t), ap)) continue;
      DS4_CHECK(b < cache.ne1);
      float* blk = C.row(b);
      rows_par(d, per_channel, [&](int64_t c0, int64_t c1) { cpu::compressor_pool(v, pos, blk, c0, c1); });
      cpu::compressor_shift(v);
      cpu::rmsnorm_row(blk, nw, d, eps, blk);
      // RoPE at the block start position (the table holds rope_angles' bits).
      if (const float* cs = rope_table_.row(fr, half, b * ratio))
        cpu::rope_apply_cs(blk, d, cs, half, false);
      else
        cpu::rope_apply(blk, d, fr, half, b * ratio, false);
    }
  }
  void indexer_scores(Stream&, const Tensor& q, const Tensor& w, const Tensor& keys, int64_t hs, int64_t pos0,
                      const Tensor& out) override {
    const int64_t n = q.ne1, D = keys.ne0, shards = out.ne2, H = w.ne0;
    DS4_CHECK(q.ne0 == H * D && w.ne1 == n && out.ne1 == n && shards * hs <= H);
    const cpu::F32Rows Q = f32(q), W = f32(w), K = f32(keys);
    uint8_t* base = ptr(out);
    const int64_t ld = static_cast<int64_t>(out.nb1 / 4);
    // Items are (shard, token, block of kKeys keys): each score is one indexer_scores term list
    // whatever the split, so one decode token spreads its keys over all threads.
    constexpr int64_t kKeys = 64;
    const int64_t maxvis = std::max<int64_t>(1, cpu::compressed_visible(pos0 + n - 1, 4));
    const int64_t kb = (maxvis + kKeys - 1) / kKeys;
    rows_par(n * shards * kb, hs * D * std::min(maxvis, kKeys), [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const int64_t blk = i % kb, k = i / kb / n, t = i / kb % n, nvis = cpu::compressed_visible(pos0 + t, 4);
        DS4_CHECK(nvis <= out.ne0 && nvis <= keys.ne1);
        const int64_t j0 = blk * kKeys, j1 = std::min(nvis, j0 + kKeys);
        if (j0 >= j1) continue;
        float* dst = reinterpret_cast<float*>(base + k * out.nb2) + t * ld;
        cpu::indexer_scores(Q.row(t) + k * hs * D, W.row(t) + k * hs, hs, D, K.p + j0 * D, j1 - j0, dst + j0);
      }
    });
  }
  void ordered_sum(Stream&, const Tensor& src, int64_t parts, const Tensor& dst) override {
    const int64_t m = dst.ne0 * dst.ne1 * dst.ne2;
    DS4_CHECK(src.contiguous() && dst.contiguous() && src.ne0 * src.ne1 * src.ne2 == parts * m);
    const float* S = f32(src).p;
    float* Dp = f32(dst).p;
    rows_par(m, parts, [&](int64_t a, int64_t b) { cpu::ordered_sum(S, parts, m, Dp, a, b); });
  }
  void topk(Stream&, const Tensor& scores, int64_t pos0, int ratio, const Tensor& out) override {
    const cpu::F32Rows S = f32(scores);
    const cpu::I32Rows O = i32(out);
    const int64_t k = out.ne0;
    DS4_CHECK(scores.ne1 == out.ne1);
    rows_par(out.ne1, std::max<int64_t>(1, scores.ne0) * 8, [&](int64_t a, int64_t b) {
      thread_local std::vector<int32_t> idx;
      if (idx.size() < static_cast<size_t>(scores.ne0)) idx.resize(static_cast<size_t>(scores.ne0));
      for (int64_t t = a; t < b; ++t) {
        const int64_t nvis = std::min<int64_t>(scores.ne0, cpu::compressed_visible(pos0 + t, ratio));
        int32_t* o = O.row(t);
        const int64_t m = cpu::topk_desc_into(S.row(t), nvis, k, o, idx.data());
        for (int64_t i = m; i < k; ++i) o[i] = -1;
      }
    });
  }
  void sparse_attention(Stream&, const Tensor& q, const Tensor& kv, const Tensor& ring, const Tensor& ckv,
                        const Tensor& sel, const Tensor& sinks, int ratio, int64_t pos0, float scale,
                        const Tensor& out) override {
    const int64_t n = q.ne1, D = kv.ne0, win = ring.ne1, H = q.ne0 / D;
    DS4_CHECK(q.ne0 == H * D && out.ne0 == q.ne0 && out.ne1 == n && kv.ne1 == n && ring.ne0 == D);
    DS4_CHECK(sinks.ne0 * sinks.ne1 >= H);
    const cpu::F32Rows Q = f32(q), KV = f32(kv), R = f32(ring), O = f32(out);
    const cpu::F32Rows C = f32_or_null(ckv);
    const bool has_sel = !sel.empty();
    const cpu::I32Rows Sl = has_sel ? i32(sel) : cpu::I32Rows{};
    const int64_t ksel = has_sel ? sel.ne0 : 0;
    const float* sk = fptr(sinks);
    // Items are (token, head) pairs, token-major: every head's output is one attend_with_sink call
    // whatever the split, so a single token (decode) spreads its heads over all threads. A worker
    // rebuilds a token's candidate list when its range enters that token.
    rows_par(n * H, D * (win + ksel + 1) * 2, [&](int64_t a, int64_t b) {
      thread_local std::vector<const float*> cand;
      thread_local std::vector<float> scratch;
      int64_t built = -1;
      for (int64_t i = a; i < b; ++i) {
        const int64_t t = i / H, h = i % H;
        if (t != built) {
          built = t;
          const int64_t pos = pos0 + t;
          cand.clear();
          for (int64_t p = std::max<int64_t>(0, pos - win + 1); p <= pos; ++p)
            cand.push_back(p >= pos0 ? KV.row(p - pos0) : R.row(p % win));
          if (ratio == 4) {
            for (int64_t k = 0; k < ksel; ++k)
              if (Sl.row(t)[k] >= 0) cand.push_back(C.row(Sl.row(t)[k]));
          } else if (ratio > 0) {
            const int64_t nvis = cpu::compressed_visible(pos, ratio);
            for (int64_t j = 0; j < nvis; ++j) cand.push_back(C.row(j));
          }
          if (scratch.size() < cand.size()) scratch.resize(cand.size());
        }
        cpu::attend_with_sink(Q.row(t) + h * D, cand.data(), static_cast<int64_t>(cand.size()), D, scale, sk[h],
                              O.row(t) + h * D, scratch.data());
      }
    });
  }
  void window_store(Stream&, const Tensor& kv, int64_t pos0, const Tensor& ring) override {
    DS4_CHECK(kv.ne0 == ring.ne0);
    cpu::window_store(f32(kv), kv.ne1, kv.ne0, pos0, f32(ring), ring.ne1);
  }
  void act_qdq(Stream&, const Tensor& x, int64_t heads, QdqMode mode, int64_t len, int64_t block) override {
    DS4_CHECK(x.type == GgmlType::F32 && heads > 0 && x.ne0 % heads == 0 && x.ne2 == 1);
    const int64_t D = x.ne0 / heads;
    const cpu::F32Rows X = f32(x);
    const bool h4 = mode == QdqMode::HadamardFp4;
    rows_par(x.ne1, x.ne0 * (h4 ? 8 : 3),
             [&](int64_t a, int64_t b) { cpu::act_qdq_rows(X, heads, D, h4, len, block, a, b); });
  }
  void copy(Stream&, const Tensor& src, const Tensor& dst) override {
    DS4_CHECK(src.ne0 == dst.ne0 && src.ne1 == dst.ne1 && src.type == dst.type);
    const cpu::F32Rows S = raw4(src), Dd = raw4(dst);
    rows_par(src.ne1, src.ne0, [&](int64_t a, int64_t b) { cpu::copy_rows(S, Dd, src.ne0, a, b); });
  }
  void add(Stream&, const Tensor& dst, const Tensor& src) override {
    DS4_CHECK(src.ne0 == dst.ne0 && src.ne1 == dst.ne1);
    const cpu::F32Rows S = f32(src), Dd = f32(dst);
    rows_par(src.ne1, src.ne0, [&](int64_t a, int64_t b) { cpu::add_rows(Dd, S, src.ne0, a, b); });
  }
  void scale(Stream&, const Tensor& x, float factor) override {
    const cpu::F32Rows X = f32(x);
    rows_par(x.ne1, x.ne0, [&](int64_t a, int64_t b) { cpu::scale_rows(X, factor, x.ne0, a, b); });
  }
  void fill(Stream&, const Tensor& x, float value) override {
    const cpu::F32Rows X = f32(x);
    rows_par(x.ne1, x.ne0, [&](int64_t a, int64_t b) { cpu::fill_rows(X, value, x.ne0, a, b); });
  }
  void router(Stream&, const Tensor& logits, const Tensor& bias, const Tensor& tid2eid, const Tensor& tokens,
              bool normalize, float route_scale, const Tensor& ids, const Tensor& weights) override {
    const int64_t n = logits.ne1, E = logits.ne0, K = ids.ne0;
    DS4_CHECK(ids.ne1 == n && weights.ne1 == n && weights.ne0 == K);
    const cpu::F32Rows L = f32(logits), Wt = f32(weights);
    const cpu::I32Rows I = i32(ids);
    const float* b = fptr(bias);
    const bool hash = !tid2eid.empty();
    const cpu::I32Rows T = hash ? i32(tid2eid) : cpu::I32Rows{};
    const int32_t* tok = hash ? i32(tokens).p : nullptr;
    DS4_CHECK(!hash || tid2eid.ne0 == K);
    DS4_CHECK(K <= E);
    // sqrt_softplus (double exp and log) costs about 150 units per expert.
    if (n < threads_ && n * E * 150 >= kInlineWork) {
      // Fewer tokens than threads (decode): the scores of (token, block of experts) items on all
      // threads, then each token's selection (route_scores + route_select = route_token_into).
      thread_local std::vector<float> rs;  // concurrent sessions may share the device
      thread_local std::vector<int32_t> ri;
      if (rs.size() < static_cast<size_t>(2 * E * n)) rs.resize(static_cast<size_t>(2 * E * n));
      if (ri.size() < static_cast<size_t>(E)) ri.resize(static_cast<size_t>(E));
      float* sc = rs.data();
      constexpr int64_t kExperts = 32;
      const int64_t eb = (E + kExperts - 1) / kExperts;
      pool_.run(n * eb, 1, threads_, [&](int64_t a, int64_t e) {
        for (int64_t i = a; i < e; ++i) {
          const int64_t t = i / eb, e0 = i % eb * kExperts;
          cpu::route_scores(L.row(t), static_cast<int>(E), b, sc + t * 2 * E, e0, std::min(E, e0 + kExperts));
        }
      });
      for (int64_t t = 0; t < n; ++t) {
        const int32_t* h = nullptr;
        if (hash) {
          DS4_CHECK(tok[t] >= 0 && tok[t] < tid2eid.ne1);
          h = T.row(tok[t]);
        }
        cpu::route_select(sc + t * 2 * E, static_cast<int>(E), static_cast<int>(K), h, normalize, route_scale,
                          I.row(t), Wt.row(t), ri.data());
      }
      return;
    }
    rows_par(n, E * 150, [&](int64_t a, int64_t e) {
      thread_local std::vector<float> scratch;
      thread_local std::vector<int32_t> iscratch;
      if (scratch.size() < static_cast<size_t>(2 * E)) scratch.resize(static_cast<size_t>(2 * E));
      if (iscratch.size() < static_cast<size_t>(E)) iscratch.resize(static_cast<size_t>(E));
      for (int64_t t = a; t < e; ++t) {
        const int32_t* h = nullptr;
        if (hash) {
          DS4_CHECK(tok[t] >= 0 && tok[t] < tid2eid.ne1);
          h = T.row(tok[t]);
        }
        cpu::route_token_into(L.row(t), static_cast<int>(E), static_cast<int>(K), b, h, normalize, route_scale, I.row(t),
                              Wt.row(t), scratch.data(), iscratch.data());
      }
    });
  }
  void swiglu(Stream&, const Tensor& g, const Tensor& u, float limit, const Tensor& row_weight) override {
    DS4_CHECK(g.ne0 == u.ne0 && g.ne1 == u.ne1);
    const cpu::F32Rows G = f32(g), U = f32(u);
    const float* rw = fptr(row_weight);
    const int64_t ff = g.ne0;
    rows_par(g.ne1, ff * 20, [&](int64_t a, int64_t b) {
      for (int64_t t = a; t < b; ++t) {
        cpu::swiglu_clamped(G.row(t), U.row(t), ff, limit);
        if (rw)
          for (int64_t j = 0; j < ff; ++j) G.row(t)[j] *= rw[t];
      }
    });
  }
  void moe_experts(Stream& s, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   std::span<const ExpertTensors> experts, float limit, ActFormat act, const Tensor& slots,
                   std::span<const int32_t> /*ids_host: ids are read in place*/) override {
    const int64_t n = x.ne1, dim = x.ne0, K = ids.ne0;
    DS4_CHECK(ids.ne1 == n && weights.ne0 == K && slots.ne1 == n * K && slots.ne0 == dim);
    const cpu::I32Rows I = i32(ids);
    const cpu::F32Rows X = f32(x), Wt = f32(weights), Y = f32(slots);
    std::lock_guard<std::mutex> lock(moe_mu_);  // the scratch below is the device's
    for (size_t ei = 0; ei < experts.size(); ++ei) {
      const ExpertTensors& e = experts[ei];
      DS4_CHECK(ei == 0 || experts[ei - 1].id < e.id);
      cpu::moe_slots_of(I, n, K, e.id, &moe_slots_);
      if (moe_slots_.empty()) continue;
      const int64_t m = static_cast<int64_t>(moe_slots_.size()), ff = e.gate.ne1;
      DS4_CHECK(e.gate.ne0 == dim && e.up.ne1 == ff && e.down.ne0 == ff && e.down.ne1 == dim);
      ensure(moe_x_, m * dim);
      ensure(moe_g_, m * ff);
      ensure(moe_u_, m * ff);
      ensure(moe_y_, m * dim);
      ensure(moe_w_, m);
      float* xe = f32(moe_x_.t).p;
      float* rw = f32(moe_w_.t).p;
      for (int64_t i = 0; i < m; ++i) {
        std::copy_n(X.row(moe_slots_[i] / K), dim, xe + i * dim);
        rw[i] = Wt.row(moe_slots_[i] / K)[moe_slots_[i] % K];
      }
      const Tensor xt = packed(moe_x_, dim, m), gt = packed(moe_g_, ff, m), ut = packed(moe_u_, ff, m);
      const Tensor yt = packed(moe_y_, dim, m), wt = packed(moe_w_, m, 1);
      matmul2(s, e.gate, gt, e.up, ut, xt, act);
      swiglu(s, gt, ut, limit, wt);
      matmul(s, e.down, gt, yt, act);
      const float* yp = f32(yt).p;
      for (int64_t i = 0; i < m; ++i) std::copy_n(yp + i * dim, dim, Y.row(moe_slots_[i]));
    }
  }
  void moe_combine(Stream&, const Tensor& slots, const Tensor& ids, const Tensor& out) override {
    const int64_t n = out.ne1, dim = out.ne0, K = ids.ne0;
    DS4_CHECK(slots.ne1 == n * K && slots.ne0 == dim && ids.ne1 == n);
    const cpu::F32Rows S = f32(slots), O = f32(out);
    const cpu::I32Rows I = i32(ids);
    rows_par(n, K * dim, [&](int64_t a, int64_t b) {
      for (int64_t t = a; t < b; ++t) {
        const cpu::F32Rows st{S.row(t * K), S.ld};
        cpu::moe_combine_row(st, I.row(t), K, dim, O.row(t));
      }
    });
  }
  Result<void> all_gather(Stream&, comm::Comm& c, const Tensor& src, const Tensor& recv) override {
    const int64_t m = src.ne0 * src.ne1 * src.ne2;
    DS4_CHECK(src.contiguous() && recv.contiguous() && recv.ne0 * recv.ne1 * recv.ne2 == c.size() * m);
    return c.all_gather_f32(f32(src).p, m, f32(recv).p);
  }
  Result<void> all_reduce_sum(Stream&, comm::Comm& c, const Tensor& buf) override {
    DS4_CHECK(buf.contiguous());
    return c.all_reduce_sum_f32(f32(buf).p, buf.ne0 * buf.ne1 * buf.ne2);
  }

  uint64_t weight_bytes_read() const override { return weight_bytes_.load(std::memory_order_relaxed); }

 private:
  /// body(a, b) over [0, n) rows: inline when n * per_row is small, else on the pool.
  void rows_par(int64_t n, int64_t per_row, const std::function<void(int64_t, int64_t)>& body) {
    if (n <= 0) return;
    if (threads_ == 1 || n == 1 || n * per_row < kInlineWork) return body(0, n);
    const int64_t chunk = std::max<int64_t>(1, n / (4 * threads_));
    pool_.run(n, chunk, threads_, body);
  }
  /// The mHC dots of n tokens on all threads in one dispatch: out[t*rows + r] = dot_f32(fn row r,
  /// x_t) (r < rows, rows of len floats) and out[n*rows + t] = hc_norm_scale(x_t, len, norm_eps);
  /// the caller's thread-local scratch (concurrent sessions may share the device).
  float* hc_dots(int64_t n, int64_t rows, int64_t len, const cpu::F32Rows& X, const float* fn, float norm_eps) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>(n * (rows + 1))) scratch.resize(static_cast<size_t>(n * (rows + 1)));
    float* dots = scratch.data();
    pool_.run(n * (rows + 1), 1, threads_, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i)
        dots[i] = i < n * rows ? cpu::dot_f32(fn + (i % rows) * len, X.row(i / rows), len)
                               : cpu::hc_norm_scale(X.row(i - n * rows), len, norm_eps);
    });
    return dots;
  }
  static void ensure(OwnedTensor& o, int64_t floats) {
    if (o.buffer && o.buffer->bytes() >= static_cast<uint64_t>(floats) * 4) return;
    const uint64_t want = std::max<uint64_t>(static_cast<uint64_t>(floats) * 4, o.buffer ? 2 * o.buffer->bytes() : 0);
    o.buffer = std::make_unique<CpuBuffer>(want);
    o.t = Tensor{o.buffer.get(), 0, GgmlType::F32, static_cast<int64_t>(want / 4), 1, 1, want, want};
  }
  static Tensor packed(const OwnedTensor& o, int64_t row_len, int64_t rows) {
    return Tensor{o.buffer.get(), 0, GgmlType::F32, row_len, rows, 1, static_cast<uint64_t>(row_len) * 4,
                  static_cast<uint64_t>(row_len * rows) * 4};
  }

  void run_matmuls(const Tensor* const* ws, const Tensor* const* ys, int nw, const Tensor& x, ActFormat act) {
    const int64_t in = ws[0]->ne0, n = x.ne1;
    DS4_CHECK(x.ne0 == in);
    cpu::WRows W[2];
    cpu::F32Rows Y[2];
    bool q8[2] = {false, false}, any_q8 = false, qdq[2] = {false, false}, any_qdq = false;
    for (int k = 0; k < nw; ++k) {
      DS4_CHECK(ws[k]->ne0 == in && ys[k]->ne0 == ws[k]->ne1 && ys[k]->ne1 == n);
      W[k] = wrows(*ws[k]);
      Y[k] = f32(*ys[k]);
      // The matrix's own bytes: a column view (wo_b's canonical shard) counts only its columns.
      weight_bytes_.fetch_add(static_cast<uint64_t>(ws[k]->ne1) * ws[k]->row_data_bytes(), std::memory_order_relaxed);
      q8[k] = act == ActFormat::Q8_1 && uses_q8_1(ws[k]->type);
      any_q8 = any_q8 || q8[k];
      qdq[k] = act == ActFormat::FP8_QDQ && is_fp8_fp4_weight(ws[k]->type);
      any_qdq = any_qdq || qdq[k];
    }
    const cpu::F32Rows X = f32(x);
    thread_local cpu::MatmulScratch scratch;  // concurrent sessions may share the device
    bool any_mmq = false;
    for (int k = 0; k < nw; ++k) any_mmq = any_mmq || (q8[k] && cpu::matmul_uses_mmq(W[k].type, n));
    if (any_q8) {
      // Activation quantization (and the multi-token kernels' per-token sums) split over tokens.
      // (A thread_local named inside the lambda would be each worker's own: pass a reference.)
      cpu::MatmulScratch& sc = scratch;
      cpu::matmul_quantize_prepare(n, in, any_mmq, sc);
      rows_par(n, in * 4, [&sc, &X, in](int64_t a, int64_t b) { cpu::matmul_quantize_rows(X, in, sc, a, b); });
    }
    cpu::MmqTokens tok;
    if (any_mmq) tok = cpu::matmul_tokens(scratch, in);
    // FP8_QDQ: one QDQ'd copy of the activations (reused scratch) for the FP8/FP4 weights.
    cpu::F32Rows Xk[2] = {X, X};
    if (any_qdq) {
      const cpu::F32Rows Xq = cpu::matmul_qdq_fp8(X, n, in, scratch);
      for (int k = 0; k < nw; ++k)
        if (qdq[k]) Xk[k] = Xq;
    }
    const uint8_t* xq = scratch.xq.data();
    constexpr int64_t kRowsPerTask = 16;
    int64_t tasks[2] = {0, 0}, total = 0;
    for (int k = 0; k < nw; ++k) {
      tasks[k] = (W[k].out + kRowsPerTask - 1) / kRowsPerTask;
      total += tasks[k];
    }
    auto body = [&](int64_t a, int64_t b) {
      for (int64_t task = a; task < b; ++task) {
        int64_t tk = task;
        int k = 0;
        while (tk >= tasks[k]) tk -= tasks[k++];
        const int64_t r0 = tk * kRowsPerTask, r1 = std::min(W[k].out, r0 + kRowsPerTask);
        cpu::matmul_rows(W[k], Xk[k], xq, n, q8[k], Y[k], r0, r1, any_mmq ? &tok : nullptr);
      }
    };
    if (threads_ == 1 || total == 1) return body(0, total);
    pool_.run(total, 1, threads_, body);
  }

  int threads_;
  std::string name_;
  cpu::WorkerPool pool_;
  cpu::RopeRotationTable rope_table_;
  HostAlias alias_;
  CpuStream stream_;
  std::atomic<uint64_t> weight_bytes_{0};  // launches may come from several sessions
  std::mutex moe_mu_;
  std::vector<int64_t> moe_slots_;
  OwnedTensor moe_x_, moe_g_, moe_u_, moe_y_, moe_w_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuDevice>(threads);
}

}  // namespace ds4::dev
