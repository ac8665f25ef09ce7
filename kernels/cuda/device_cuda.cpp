// kernels/cuda/device_cuda.cpp — the CUDA backend of kernels/device.h (see device_cuda.h).
// Each op maps its Tensors to raw device pointers and row strides and calls a launcher:
// the matrix products from kernels/cuda/ops/ops_cuda_matmul.h (F32 / FP8_QDQ: exact decode +
// the dot_f32 order; Q8_1: quantize_q8_1 + MMVQ (n <= 8) or MMQ from quant_matmul.h, bit-exact
// to cpu::vec_dot_q8_1), the other ops from kernels/cuda/ops/ops_cuda.h.
#include "kernels/cuda/device_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/comm.h"
#ifdef DS4_HAVE_NCCL
#include "kernels/cuda/comm_nccl.h"
#endif
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_tensor_ptr.h"
#include "kernels/cuda/graph_cuda.h"
#include "kernels/cuda/moe_grouped.h"
#include "kernels/cuda/ops/ops_cuda_matmul.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "staging/bounce_ring.h"
#include "staging/copy_engine.h"

namespace ds4::cuda {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

namespace {

using dev::ActFormat;
using dev::Buffer;
using dev::ExpertTensors;
using dev::Tensor;
using detail::CudaBuffer;
using detail::CudaEvent;
using detail::CudaStream;
using detail::kCudaBackendTag;
using detail::Scratch;
using detail::use_device;

using detail::cbuf;
using detail::check_launch;
using detail::cs;
using detail::cst;
using detail::fp;
using detail::fp_or_null;
using detail::ip;
using detail::is_pinned;
using detail::must;
using detail::nan_check_enabled;
using detail::ptr;

class CudaDevice final : public dev::Device {
 public:
  explicit CudaDevice(const CudaDeviceOptions& o) : opts_(o), stream_(false, o.ordinal) {
    DS4_CUDA_CHECK(cudaSetDevice(o.ordinal));
    cudaDeviceProp p{};
    DS4_CUDA_CHECK(cudaGetDeviceProperties(&p, o.ordinal));
    sms_ = p.multiProcessorCount;
    name_ = std::string("cuda:") + std::to_string(o.ordinal) + " (" + p.name + ", sm_" + std::to_string(p.major) +
            std::to_string(p.minor) + ", " + std::to_string(p.totalGlobalMem >> 20) + " MiB)";
    DS4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_.s_, cudaStreamNonBlocking));
    DS4_CUDA_CHECK(cudaStreamCreateWithFlags(&alloc_stream_, cudaStreamNonBlocking));
    const char* g = std::getenv("DS4_CUDA_GROUPED_MOE");  // A/B switch (README "Prefill and grouped MMQ")
    grouped_moe_ = o.grouped_moe && !(g && std::strcmp(g, "0") == 0);
  }
  ~CudaDevice() override {
    (void)cudaStreamSynchronize(stream_.s_);  // readers of the staging slots; then the members go
    (void)cudaStreamDestroy(alloc_stream_);
  }
  const char* name() const override { return name_.c_str(); }
  int threads() const override { return sms_; }
  bool owns_memory() const override { return true; }
  MemoryInfo memory_info() const override {
    size_t f = 0, t = 0;
    DS4_CUDA_CHECK(cudaSetDevice(opts_.ordinal));
    DS4_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    return {static_cast<uint64_t>(f), static_cast<uint64_t>(t)};
  }

  // ---- memory ------------------------------------------------------------------------------
  /// Zeroed on the device's own allocation stream, then waits for that stream: a memset on the
  /// legacy stream (cudaMemset) is not ordered with the non-blocking streams, so kernels could
  /// write the buffer before the zeroing lands; the wait makes the zeros visible to work on any
  /// stream (allocs are rare). Not on the compute stream, which may be capturing a graph region
  /// (a Workspace that grows inside one): the buffer is new, so nothing queued there reads it yet.
  std::unique_ptr<Buffer> alloc(uint64_t bytes) override {
    use_device(opts_.ordinal);
    auto b = std::make_unique<CudaBuffer>(bytes, false);
    DS4_CUDA_CHECK(cudaMemsetAsync(b->base(), 0, bytes ? bytes : 1, alloc_stream_));
    DS4_CUDA_CHECK(cudaStreamSynchronize(alloc_stream_));
    return b;
  }

  Tensor bind(const dev::WeightMatrix& w) override {
    no_region("bind");
    DS4_CHECK(w.data != nullptr || w.out == 0);
    const uint64_t bytes = w.row_bytes * static_cast<uint64_t>(w.out);
    std::lock_guard<std::mutex> lock(bind_mu_);
    use_device(opts_.ordinal);
    if (mode_ == dev::BindMode::Staged) return stage(w, bytes);
    const auto key = std::make_tuple(w.data, static_cast<int>(w.type), w.in, w.out, w.row_bytes);
    if (auto it = bound_.find(key); it != bound_.end()) return it->second;
    // A strided view (a column slice: its rows shorter than the stride) is copied packed, so the
    // kernels read it like any matrix (no per-launch repacking) and only its own bytes are held.
    dev::WeightMatrix packed = w;
    Tensor shape;
    shape.type = w.type;
    shape.ne0 = w.in;
    packed.row_bytes = shape.row_data_bytes();
    DS4_CHECK(packed.row_bytes <= w.row_bytes);
    const uint64_t held = packed.row_bytes * static_cast<uint64_t>(w.out);
    auto b = std::make_unique<CudaBuffer>(held, false);
    // On the compute stream (where every reader of the weight runs): a cudaMemcpy from pageable
    // memory may return before its DMA lands and is not ordered with the non-blocking streams.
    // The pageable source is staged by the runtime before cudaMemcpyAsync returns; a pinned one
    // (host slabs) stays valid for the store's lifetime.
    if (held && packed.row_bytes == w.row_bytes)
      DS4_CUDA_CHECK(cudaMemcpyAsync(b->base(), w.data, held, cudaMemcpyHostToDevice, stream_.s_));
    else if (held)
      DS4_CUDA_CHECK(cudaMemcpy2DAsync(b->base(), packed.row_bytes, w.data, w.row_bytes, packed.row_bytes,
                                       static_cast<size_t>(w.out), cudaMemcpyHostToDevice, stream_.s_));
    tier_.h2d_persistent += held;
    Tensor t = tensor_of(b.get(), packed);
    owned_.push_back(std::move(b));
    bound_.emplace(key, t);
    return t;
  }
  void set_bind_mode(dev::BindMode m) override {
    std::lock_guard<std::mutex> lock(bind_mu_);
    mode_ = m;
  }
  /// The staging ring sized for `matrix_bytes` (made or remade now, see ensure_stager); its slot
  /// count is how many staged binds may await their readers at once.
  int reserve_staged_binds(uint64_t matrix_bytes) override {
    std::lock_guard<std::mutex> lock(bind_mu_);
    use_device(opts_.ordinal);
    release_retired();
    ensure_stager(matrix_bytes);
    return static_cast<int>(slot_views_.size());
  }
  dev::StagedBindStats staged_bind_stats() const override {
    std::lock_guard<std::mutex> lock(bind_mu_);
    return staged_stats_;
  }
  void upload(dev::Stream& s, const Tensor& dst, const void* src, uint64_t bytes) override {
    no_region("upload");
    DS4_CHECK(dst.contiguous() || bytes <= dst.row_data_bytes());
    DS4_CHECK(dst.offset + bytes <= cbuf(dst)->bytes());
    DS4_CUDA_CHECK(cudaMemcpyAsync(ptr(dst), src, bytes, cudaMemcpyHostToDevice, cs(s)));
    // The API lets `src` go once the stream is synchronized; pageable sources are copied by the
    // runtime before cudaMemcpyAsync returns, so nothing else is needed here.
  }
  void download(dev::Stream& s, const Tensor& src, void* dst, uint64_t bytes) override {
    no_region("download");
    DS4_CHECK(src.contiguous() || bytes <= src.row_data_bytes());
    DS4_CHECK(src.offset + bytes <= cbuf(src)->bytes());
    DS4_CUDA_CHECK(cudaMemcpyAsync(dst, ptr(src), bytes, cudaMemcpyDeviceToHost, cs(s)));
    DS4_CUDA_CHECK(cudaStreamSynchronize(cs(s)));
  }

  // ---- streams and events ------------------------------------------------------------------
  dev::Stream& stream() override { return stream_; }
  std::unique_ptr<dev::Stream> create_stream() override { return std::make_unique<CudaStream>(true, opts_.ordinal); }
  std::unique_ptr<dev::Event> record(dev::Stream& s) override {
    no_region("record");
    cudaStream_t st = cs(s);  // the stream's device current before the event is made
    auto e = std::make_unique<CudaEvent>();
    DS4_CUDA_CHECK(cudaEventRecord(e->e_, st));
    return e;
  }
  std::unique_ptr<dev::Event> record_timed(dev::Stream& s) override {
    no_region("record_timed");
    cudaStream_t st = cs(s);
    auto e = std::make_unique<CudaEvent>(true);
    DS4_CUDA_CHECK(cudaEventRecord(e->e_, st));
    return e;
  }
  double elapsed_s(const dev::Event& a, const dev::Event& b) override {
    const cudaEvent_t ea = static_cast<const CudaEvent&>(a).e_, eb = static_cast<const CudaEvent&>(b).e_;
    DS4_CUDA_CHECK(cudaEventSynchronize(eb));
    float ms = 0;
    DS4_CUDA_CHECK(cudaEventElapsedTime(&ms, ea, eb));
    return double(ms) * 1e-3;
  }
  void wait(dev::Stream& s, const dev::Event& e) override {
    no_region("wait");
    DS4_CUDA_CHECK(cudaStreamWaitEvent(cs(s), static_cast<const CudaEvent&>(e).e_, 0));
  }
  void synchronize(dev::Stream& s) override {
    no_region("synchronize");
    DS4_CUDA_CHECK(cudaStreamSynchronize(cs(s)));
  }

  // ---- graph regions (graph_cuda.h) ----------------------------------------------------------
  /// Captures the compute stream (the only stream a region may use); not under
  /// DS4_CUDA_CHECK_NAN (every op waits for its stream there).
  bool begin_graph(dev::Stream& s, uint64_t key) override {
    if (nan_check_enabled()) return false;
    DS4_CHECK(&s == &stream_);
    graphs_.begin(cs(s), key);
    region_comm_ = nullptr;
    return true;
  }
  /// Ends the open region: launches it, unless it captured a collective of a rank group that was
  /// aborted meanwhile (its communicator is gone): then the region is dropped, and the rank's
  /// next collective returns kAbortedMessage. The group cannot be aborted during the launch.
  void end_graph(dev::Stream& s) override {
    const comm::Comm* c = region_comm_;
    region_comm_ = nullptr;
#ifdef DS4_HAVE_NCCL
    if (c != nullptr) {
      if (!comm::nccl_run_unless_aborted(*c, [&] { graphs_.end(cs(s)); })) graphs_.end(cs(s), false);
      return;
    }
#else
    (void)c;
#endif
    graphs_.end(cs(s));
  }
  dev::GraphStats graph_stats() const override { return graphs_.stats(); }
  /// Aborts naming `call` when a graph region is open: `call` waits on the host, copies host
  /// memory or orders work across streams, none of which a captured graph may hold.
  void no_region(const char* call) const {
    if (!graphs_.open()) return;
    std::fprintf(stderr, "ds4: CUDA backend: %s inside graph region %llu (a region holds ops on its stream only: no "
                 "upload, download, synchronize, record, wait, bind or moe_experts)\n",
                 call, static_cast<unsigned long long>(graphs_.key()));
    std::abort();
  }

  /// nan_check_enabled(): NaN scan of `t` (F32 rows) after `op`, reported once per op name.
  void nan_check(dev::Stream& s, const char* op, const Tensor& t) {
    if (!nan_check_enabled() || t.empty() || t.type != GgmlType::F32 || t.ne1 == 0) return;
    const uint64_t planes = static_cast<uint64_t>(std::max<int64_t>(1, t.ne2));
    const uint64_t span = (planes - 1) * t.nb2 + static_cast<uint64_t>(t.ne1 - 1) * t.nb1 + static_cast<uint64_t>(t.ne0) * 4;
    std::vector<float> h(span / 4 + 1);
    DS4_CUDA_CHECK(cudaStreamSynchronize(cs(s)));
    DS4_CUDA_CHECK(cudaMemcpy(h.data(), ptr(t), span, cudaMemcpyDeviceToHost));
    int64_t bad = 0, first = -1;  // NaN count, first NaN's element index (row-major)
    for (uint64_t p = 0; p < planes; ++p)
      for (int64_t r = 0; r < t.ne1; ++r)
        for (int64_t c = 0; c < t.ne0; ++c)
          if (std::isnan(h[(p * t.nb2 + static_cast<uint64_t>(r) * t.nb1) / 4 + static_cast<uint64_t>(c)])) {
            if (first < 0) first = (static_cast<int64_t>(p) * t.ne1 + r) * t.ne0 + c;
            ++bad;
          }
    static std::mutex mu;
    static std::map<std::string, int> seen;
    std::lock_guard<std::mutex> lock(mu);
    if (bad && seen[op]++ == 0)
      std::fprintf(stderr, "ds4: CUDA backend: NaN check: %s: %lld NaN of [%lld, %lld, %lld], first at %lld (op #%llu)\n",
                   op, static_cast<long long>(bad), static_cast<long long>(t.ne0), static_cast<long long>(t.ne1),
                   static_cast<long long>(t.ne2), static_cast<long long>(first), static_cast<unsigned long long>(ops_seen_));
    ++ops_seen_;
  }
  uint64_t ops_seen_ = 0;

  // ---- matrix products (ops_cuda_matmul.h) -------------------------------------------------
  void matmul(dev::Stream& s, const Tensor& w, const Tensor& x, const Tensor& y, ActFormat act) override {
    const Tensor* ws[1] = {&w};
    const Tensor* ys[1] = {&y};
    run_matmuls(cst(s), ws, ys, 1, x, act);
    nan_check(s, "matmul", y);
  }
  void matmul2(dev::Stream& s, const Tensor& w0, const Tensor& y0, const Tensor& w1, const Tensor& y1,
               const Tensor& x, ActFormat act) override {
    const Tensor* ws[2] = {&w0, &w1};
    const Tensor* ys[2] = {&y0, &y1};
    run_matmuls(cst(s), ws, ys, 2, x, act);
    nan_check(s, "matmul2 y0", y0);
    nan_check(s, "matmul2 y1", y1);
  }
  void embed_rows(dev::Stream& s, const Tensor& w, const Tensor& ids, int64_t vocab0, int64_t vocab1,
                  const Tensor& out) override {
    DS4_CHECK(out.ne0 == w.ne0 && ids.ne0 * ids.ne1 == out.ne1);
    check_launch(launch_embed_rows(cs(s), w.type, ptr(w), w.ne0, w.nb1, ip(ids), out.ne1, vocab0, vocab1, fp(out),
                                   out.nb1),
                 "embed_rows");
    nan_check(s, "embed_rows", out);
  }
  void moe_experts(dev::Stream& s, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   std::span<const ExpertTensors> experts, float limit, ActFormat act, const Tensor& slots,
                   std::span<const int32_t> ids_host) override {
    const int64_t n = x.ne1, dim = x.ne0, K = ids.ne0;
    DS4_CHECK(ids.ne1 == n && weights.ne0 == K && slots.ne1 == n * K && slots.ne0 == dim);
    DS4_CHECK(x.type == GgmlType::F32 && weights.type == GgmlType::F32 && slots.type == GgmlType::F32);
    no_region("moe_experts");  // host-built slot lists, waits on staged copies
    if (experts.empty() || n == 0) return;
    CudaStream& cs_ = cst(s);
    cudaStream_t st = cs_.s_;
    std::lock_guard<std::mutex> lock(moe_mu_);
    // The slot lists are made on the host from the routing ids (the CPU's moe_slots_of order:
    // ascending (t, k)): the caller's host copy, else a download (it waits for the router's work
    // on `s`, and for everything else queued there).
    host_ids_.resize(static_cast<size_t>(n * K));
    if (!ids_host.empty()) {
      DS4_CHECK(ids_host.size() == static_cast<size_t>(n * K));
      std::copy(ids_host.begin(), ids_host.end(), host_ids_.begin());
    } else {
      DS4_CHECK(ids.contiguous() || n == 1);
      download(s, ids, host_ids_.data(), static_cast<uint64_t>(n * K) * 4);
    }
    if (grouped_moe(cs_, x, weights, experts, limit, act, slots)) return;
    host_pairs_.clear();
    std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) of each expert's pairs
    for (size_t ei = 0; ei < experts.size(); ++ei) {
      DS4_CHECK(ei == 0 || experts[ei - 1].id < experts[ei].id);
      const int64_t b = static_cast<int64_t>(host_pairs_.size());
      for (int64_t p = 0; p < n * K; ++p)
        if (host_ids_[static_cast<size_t>(p)] == experts[ei].id) host_pairs_.push_back(static_cast<int32_t>(p));
      ranges.emplace_back(b, static_cast<int64_t>(host_pairs_.size()));
    }
    const int64_t total = static_cast<int64_t>(host_pairs_.size());
    if (total == 0) return;
    ++moe_stats_.per_expert_calls;
    moe_stats_.per_expert_pairs += static_cast<uint64_t>(total);
    auto* pairs = reinterpret_cast<int32_t*>(cs_.moe_pairs.get(static_cast<uint64_t>(total) * 4, st));
    DS4_CUDA_CHECK(cudaMemcpyAsync(pairs, host_pairs_.data(), static_cast<uint64_t>(total) * 4, cudaMemcpyHostToDevice, st));
    for (size_t ei = 0; ei < experts.size(); ++ei) {
      const ExpertTensors& e = experts[ei];
      const int64_t m = ranges[ei].second - ranges[ei].first;
      if (m == 0) continue;
      const int64_t ff = e.gate.ne1;
      DS4_CHECK(e.gate.ne0 == dim && e.up.ne1 == ff && e.down.ne0 == ff && e.down.ne1 == dim);
      note_expert_launch(e);
      const int32_t* pr = pairs + ranges[ei].first;
      auto* g = reinterpret_cast<float*>(cs_.moe_g.get(static_cast<uint64_t>(m * ff) * 4, st));
      auto* u = reinterpret_cast<float*>(cs_.moe_u.get(static_cast<uint64_t>(m * ff) * 4, st));
      const Tensor gt = raw_f32(cs_.moe_g, ff, m), ut = raw_f32(cs_.moe_u, ff, m);
      // One slot (every expert of a decode step): no gather / scatter launches. The products read
      // the token's row of x in place and the down product writes the slot's row directly (a
      // single row has no stride, see run_matmuls); the SwiGLU reads the routing weight where it
      // lies. The same values reach the same kernels, so the bits are those of the copies.
      Tensor xt, yt;
      const float* rw = nullptr;
      float* ye = nullptr;
      if (m == 1) {
        const int64_t p = host_pairs_[static_cast<size_t>(ranges[ei].first)], t = p / K;
        xt = x.rows_view(t, t + 1);
        yt = slots.rows_view(p, p + 1);
        rw = reinterpret_cast<const float*>(ptr(weights) + static_cast<uint64_t>(t) * weights.nb1) + p % K;
      } else {
        auto* xe = reinterpret_cast<float*>(cs_.moe_x.get(static_cast<uint64_t>(m * dim) * 4, st));
        auto* rwg = reinterpret_cast<float*>(cs_.moe_w.get(static_cast<uint64_t>(m) * 4, st));
        ye = reinterpret_cast<float*>(cs_.moe_y.get(static_cast<uint64_t>(m * dim) * 4, st));
        check_launch(launch_moe_gather(st, fp(x), x.nb1, dim, fp(weights), weights.nb1, static_cast<int>(K), pr, m, xe,
                                       rwg),
                     "moe_experts gather");
        xt = raw_f32(cs_.moe_x, dim, m);
        yt = raw_f32(cs_.moe_y, dim, m);
        rw = rwg;
      }
      const Tensor* ws[2] = {&e.gate, &e.up};
      const Tensor* ys[2] = {&gt, &ut};
      run_matmuls(cs_, ws, ys, 2, xt, act);
      check_launch(launch_moe_swiglu(st, g, u, m, ff, limit, rw), "moe_experts swiglu");
      const Tensor* wd[1] = {&e.down};
      const Tensor* yd[1] = {&yt};
      run_matmuls(cs_, wd, yd, 1, gt, act);
      if (m > 1) check_launch(launch_moe_scatter(st, ye, dim, pr, m, fp(slots), slots.nb1), "moe_experts scatter");
      nan_check(s, "moe_experts gate", gt);
      nan_check(s, "moe_experts expert out", yt);
    }
  }

  /// moe_experts by the grouped launches (moe_grouped.h) when enabled, the batch has >= 2 tokens
  /// and kGroupedMoeMinPairs pairs of `experts`, and the kernels take the matrices; false (nothing
  /// queued) otherwise. Staged slots, stats and byte counters as the per-expert path: per expert
  /// with pairs, in ascending id, note_expert_launch then the waits for its three copies.
  bool grouped_moe(CudaStream& cs_, const Tensor& x, const Tensor& weights, std::span<const ExpertTensors> experts,
                   float limit, ActFormat act, const Tensor& slots) {
    const int64_t n = x.ne1, dim = x.ne0, K = weights.ne0;
    if (!grouped_moe_ || n < 2 || nan_check_enabled() || weights.nb1 != uint64_t(K) * 4 || slots.nb1 != uint64_t(dim) * 4)
      return false;
    auto mat = [](const Tensor& t) { return detail::GroupedMatrix{ptr(t), t.type, t.ne0, t.ne1, t.nb1}; };
    grouped_.clear();
    for (const ExpertTensors& e : experts) grouped_.push_back({e.id, mat(e.gate), mat(e.up), mat(e.down)});
    if (detail::grouped_moe_refusal(grouped_, dim, n * K, act == ActFormat::Q8_1)) return false;
    const int64_t pairs = detail::grouped_moe_remap(host_ids_, grouped_, grouped_local_, grouped_count_);
    if (pairs < detail::kGroupedMoeMinPairs) return false;
    for (size_t i = 0; i < experts.size(); ++i) {
      if (grouped_count_[i] == 0) continue;
      note_expert_launch(experts[i]);
      for (const Tensor* w : {&experts[i].gate, &experts[i].up, &experts[i].down}) count_read(*w, cs_.s_);
      ++moe_stats_.grouped_experts;
    }
    detail::queue_grouped_moe(cs_, {fp(x), x.nb1, n, dim, static_cast<int>(K), fp(weights), grouped_local_, grouped_,
                                    limit, fp(slots)});
    ++moe_stats_.grouped_calls;
    moe_stats_.grouped_pairs += static_cast<uint64_t>(pairs);
    return true;
  }
  GroupedMoeStats moe_path_stats() const {
    std::lock_guard<std::mutex> lock(moe_mu_);
    return moe_stats_;
  }

  // ---- the other ops (kernels/cuda/ops/ops_cuda.h, helper h18c's launchers) -----------------
  void owner_rows(dev::Stream& s, const Tensor& all, const Tensor& ids, int64_t rows_per_rank, const Tensor& out) override {
    const int64_t n = out.ne1;
    DS4_CHECK(all.ne0 == out.ne0 && n > 0 && all.ne1 % n == 0);
    check_launch(launch_owner_rows(cs(s), fp(all), all.nb1, all.ne1, ip(ids), rows_per_rank, n, out.ne0, fp(out), out.nb1),
                 "owner_rows");
    nan_check(s, "owner_rows", out);
  }
  void hc_expand(dev::Stream& s, const Tensor& e, int hc, const Tensor& x) override {
    DS4_CHECK(x.ne0 == hc * e.ne0 && x.ne1 == e.ne1);
    check_launch(launch_hc_expand(cs(s), fp(e), e.nb1, e.ne1, e.ne0, hc, fp(x), x.nb1), "hc_expand");
    nan_check(s, "hc_expand", x);
  }
  void rmsnorm(dev::Stream& s, const Tensor& x, const Tensor& weight, float eps, const Tensor& y) override {
    DS4_CHECK(x.ne0 == y.ne0 && x.ne1 == y.ne1 && (weight.empty() || weight.ne0 * weight.ne1 == x.ne0));
    check_launch(launch_rmsnorm(cs(s), fp(x), x.nb1, fp_or_null(weight), x.ne1, x.ne0, eps, fp(y), y.nb1), "rmsnorm");
    nan_check(s, "rmsnorm", y);
  }
  void hc_pre(dev::Stream& s, const Tensor& x, const Tensor& fn, const Tensor& scale, const Tensor& base, int hc,
              int iters, float hc_eps, float norm_eps, const Tensor& y, const Tensor& mix) override {
    const int64_t dim = y.ne0;
    DS4_CHECK(x.ne0 == hc * dim && mix.ne0 == (2 + hc) * hc && x.ne1 == y.ne1 && x.ne1 == mix.ne1);
    // fn holds (2+hc)*hc packed rows of hc*dim floats, whatever its Tensor shape: the engine binds
    // it as one flat vector (bind_f32), so fn.nb1 is not its row stride (the CPU reads it packed).
    DS4_CHECK(fn.contiguous() && fn.ne0 * fn.ne1 * fn.ne2 == (2 + hc) * hc * x.ne0);
    check_launch(launch_hc_pre(cs(s), fp(x), x.nb1, fp(fn), static_cast<uint64_t>(x.ne0) * 4, fp(scale), fp(base), hc, dim, x.ne1, iters, hc_eps,
                               norm_eps, fp(y), y.nb1, fp(mix), mix.nb1),
                 "hc_pre");
    nan_check(s, "hc_pre", y);
    nan_check(s, "hc_pre mix", mix);
  }
  void hc_post(dev::Stream& s, const Tensor& f, const Tensor& mix, int hc, const Tensor& x) override {
    const int64_t dim = f.ne0;
    DS4_CHECK(x.ne0 == hc * dim && x.ne1 == f.ne1 && mix.ne1 == f.ne1);
    check_launch(launch_hc_post(cs(s), fp(f), f.nb1, fp(mix), mix.nb1, hc, dim, f.ne1, fp(x), x.nb1), "hc_post");
    nan_check(s, "hc_post", x);
  }
  void hc_head(dev::Stream& s, const Tensor& x, const Tensor& fn, const Tensor& scale, const Tensor& base, int hc,
               float hc_eps, float norm_eps, const Tensor& h) override {
    const int64_t dim = h.ne0;
    DS4_CHECK(x.ne0 == hc * dim && x.ne1 == h.ne1);
    // fn: hc packed rows of hc*dim floats (bound flat, as in hc_pre).
    DS4_CHECK(fn.contiguous() && fn.ne0 * fn.ne1 * fn.ne2 == hc * x.ne0);
    check_launch(launch_hc_head(cs(s), fp(x), x.nb1, fp(fn), static_cast<uint64_t>(x.ne0) * 4, fp(scale), fp(base), hc, dim, x.ne1, hc_eps,
                                norm_eps, fp(h), h.nb1),
                 "hc_head");
    nan_check(s, "hc_head", h);
  }
  void rope(dev::Stream& s, const Tensor& x, int64_t heads, const Tensor& freqs, const Tensor& pos, bool inverse) override {
    DS4_CHECK(x.ne0 % heads == 0 && pos.ne0 * pos.ne1 == x.ne1);
    const int64_t D = x.ne0 / heads;
    const int half = static_cast<int>(freqs.ne0 * freqs.ne1);
    DS4_CHECK(2 * half <= D);
    check_launch(launch_rope(cs(s), fp(x), x.nb1, x.ne1, heads, D, fp(freqs), half, ip(pos), inverse), "rope");
    nan_check(s, "rope", x);
  }
  void compressor(dev::Stream& s, const Tensor& a, const Tensor& g, const Tensor& ape, const Tensor& norm, float eps,
                  const Tensor& freqs, int ratio, int64_t pos0, const Tensor& cur, const Tensor& prev,
                  const Tensor& cache) override {
    const int64_t d = cache.ne0, w = a.ne0;
    const bool overlap = !prev.empty();
    DS4_CHECK(ratio > 0 && ratio <= 128 && w == (overlap ? 2 * d : d) && g.ne0 == w && a.ne1 == g.ne1);
    DS4_CHECK(cur.ne0 * cur.ne1 == 2 * ratio * w && (!overlap || prev.ne0 * prev.ne1 == 2 * ratio * d));
    DS4_CHECK(cur.contiguous() && (prev.empty() || prev.contiguous()));
    const int half = static_cast<int>(freqs.ne0 * freqs.ne1);
    check_launch(launch_compressor(cs(s), fp(a), a.nb1, fp(g), g.nb1, a.ne1, fp(ape), fp_or_null(norm), eps, fp(freqs),
                                   half, ratio, d, pos0, fp(cur), overlap ? fp(prev) : nullptr, fp(cache), cache.nb1,
                                   cache.ne1),
                 "compressor");
    nan_check(s, "compressor", cache);
  }
  void indexer_scores(dev::Stream& s, const Tensor& q, const Tensor& w, const Tensor& keys, int64_t hs, int64_t pos0,
                      const Tensor& out) override {
    const int64_t n = q.ne1, D = keys.ne0, shards = out.ne2, H = w.ne0;
    DS4_CHECK(q.ne0 == H * D && w.ne1 == n && out.ne1 == n && shards * hs <= H);
    check_launch(launch_indexer_scores(cs(s), fp(q), q.nb1, fp(w), w.nb1, fp(keys), keys.nb1, keys.ne1, n, D, hs, shards,
                                       pos0, fp(out), out.nb1, out.nb2, out.ne0),
                 "indexer_scores");
    nan_check(s, "indexer_scores", out);
  }
  void ordered_sum(dev::Stream& s, const Tensor& src, int64_t parts, const Tensor& dst) override {
    const int64_t m = dst.ne0 * dst.ne1 * dst.ne2;
    DS4_CHECK(src.contiguous() && dst.contiguous() && src.ne0 * src.ne1 * src.ne2 == parts * m);
    check_launch(launch_ordered_sum(cs(s), fp(src), parts, m, fp(dst)), "ordered_sum");
    nan_check(s, "ordered_sum", dst);
  }
  void topk(dev::Stream& s, const Tensor& scores, int64_t pos0, int ratio, const Tensor& out) override {
    DS4_CHECK(scores.ne1 == out.ne1);
    check_launch(launch_topk(cs(s), fp(scores), scores.nb1, out.ne1, scores.ne0, pos0, ratio, ip(out), out.nb1, out.ne0),
                 "topk");
  }
  void sparse_attention(dev::Stream& s, const Tensor& q, const Tensor& kv, const Tensor& ring, const Tensor& ckv,
                        const Tensor& sel, const Tensor& sinks, int ratio, int64_t pos0, float scale,
                        const Tensor& out) override {
    const int64_t n = q.ne1, D = kv.ne0, win = ring.ne1, H = q.ne0 / D;
    DS4_CHECK(q.ne0 == H * D && out.ne0 == q.ne0 && out.ne1 == n && kv.ne1 == n && ring.ne0 == D);
    DS4_CHECK(sinks.ne0 * sinks.ne1 >= H);
    const bool has_sel = !sel.empty();
    check_launch(launch_sparse_attention(cs(s), fp(q), q.nb1, fp(kv), kv.nb1, fp(ring), ring.nb1, win,
                                         ckv.empty() ? nullptr : fp(ckv), ckv.empty() ? 0 : ckv.nb1,
                                         ckv.empty() ? 0 : ckv.ne1, has_sel ? ip(sel) : nullptr, has_sel ? sel.nb1 : 0,
                                         has_sel ? sel.ne0 : 0, fp(sinks), ratio, n, H, D, pos0, scale, fp(out), out.nb1),
                 "sparse_attention");
    nan_check(s, "sparse_attention", out);
  }
  void window_store(dev::Stream& s, const Tensor& kv, int64_t pos0, const Tensor& ring) override {
    DS4_CHECK(kv.ne0 == ring.ne0);
    check_launch(launch_window_store(cs(s), fp(kv), kv.nb1, kv.ne1, kv.ne0, pos0, fp(ring), ring.nb1, ring.ne1),
                 "window_store");
    nan_check(s, "window_store", ring);
  }
  void act_qdq(dev::Stream& s, const Tensor& x, int64_t heads, dev::QdqMode mode, int64_t len, int64_t block) override {
    DS4_CHECK(x.type == GgmlType::F32 && heads > 0 && x.ne0 % heads == 0 && x.ne2 == 1);
    check_launch(launch_act_qdq(cs(s), fp(x), x.nb1, x.ne1, heads, x.ne0 / heads, mode == dev::QdqMode::HadamardFp4,
                                len, block),
                 "act_qdq");
    nan_check(s, "act_qdq", x);
  }
  void copy(dev::Stream& s, const Tensor& src, const Tensor& dst) override {
    DS4_CHECK(src.ne0 == dst.ne0 && src.ne1 == dst.ne1 && src.type == dst.type);
    DS4_CHECK((src.type == GgmlType::F32 || src.type == GgmlType::I32) && src.nb1 % 4 == 0 && dst.nb1 % 4 == 0);
    check_launch(launch_copy(cs(s), ptr(src), src.nb1, ptr(dst), dst.nb1, src.ne1, src.ne0), "copy");
    nan_check(s, "copy", dst);
  }
  void add(dev::Stream& s, const Tensor& dst, const Tensor& src) override {
    DS4_CHECK(src.ne0 == dst.ne0 && src.ne1 == dst.ne1);
    check_launch(launch_add(cs(s), fp(dst), dst.nb1, fp(src), src.nb1, src.ne1, src.ne0), "add");
    nan_check(s, "add", dst);
  }
  void scale(dev::Stream& s, const Tensor& x, float factor) override {
    check_launch(launch_scale(cs(s), fp(x), x.nb1, x.ne1, x.ne0, factor), "scale");
    nan_check(s, "scale", x);
  }
  void fill(dev::Stream& s, const Tensor& x, float value) override {
    check_launch(launch_fill(cs(s), fp(x), x.nb1, x.ne1, x.ne0, value), "fill");
    nan_check(s, "fill", x);
  }
  void router(dev::Stream& s, const Tensor& logits, const Tensor& bias, const Tensor& tid2eid, const Tensor& tokens,
              bool normalize, float route_scale, const Tensor& ids, const Tensor& weights) override {
    const int64_t n = logits.ne1, E = logits.ne0, K = ids.ne0;
    DS4_CHECK(ids.ne1 == n && weights.ne1 == n && weights.ne0 == K && K <= E);
    const bool hash = !tid2eid.empty();
    DS4_CHECK(!hash || tid2eid.ne0 == K);
    check_launch(launch_router(cs(s), fp(logits), logits.nb1, n, E, K, fp_or_null(bias), hash ? ip(tid2eid) : nullptr,
                               hash ? tid2eid.nb1 : 0, hash ? tid2eid.ne1 : 0, hash ? ip(tokens) : nullptr, normalize,
                               route_scale, ip(ids), ids.nb1, fp(weights), weights.nb1),
                 "router");
    nan_check(s, "router", weights);
  }
  void swiglu(dev::Stream& s, const Tensor& g, const Tensor& u, float limit, const Tensor& row_weight) override {
    DS4_CHECK(g.ne0 == u.ne0 && g.ne1 == u.ne1);
    check_launch(launch_swiglu(cs(s), fp(g), g.nb1, fp(u), u.nb1, g.ne1, g.ne0, limit, fp_or_null(row_weight)), "swiglu");
    nan_check(s, "swiglu", g);
  }
  void moe_combine(dev::Stream& s, const Tensor& slots, const Tensor& ids, const Tensor& out) override {
    const int64_t n = out.ne1, dim = out.ne0, K = ids.ne0;
    DS4_CHECK(slots.ne1 == n * K && slots.ne0 == dim && ids.ne1 == n);
    check_launch(launch_moe_combine(cs(s), fp(slots), slots.nb1, ip(ids), ids.nb1, n, K, dim, fp(out), out.nb1),
                 "moe_combine");
    nan_check(s, "moe_combine", out);
  }
  /// recv[r * m + i] = rank r's src[i]. One rank: a device copy on `s`. More ranks: ncclAllGather
  /// enqueued on `s` (the compute stream; the host does not wait), `c` an endpoint of
  /// make_nccl_group on this device.
  Result<void> all_gather(dev::Stream& s, comm::Comm& c, const Tensor& src, const Tensor& recv) override {
    DS4_CHECK(src.contiguous() && recv.contiguous() && src.type == GgmlType::F32 && recv.type == GgmlType::F32);
    const int64_t count = src.ne0 * src.ne1 * src.ne2;
    DS4_CHECK(recv.ne0 * recv.ne1 * recv.ne2 == count * c.size());
    cudaStream_t st = cs(s);
    if (c.size() == 1) {
      if (count) DS4_CUDA_CHECK(cudaMemcpyAsync(ptr(recv), ptr(src), static_cast<uint64_t>(count) * 4,
                                                cudaMemcpyDeviceToDevice, st));
      return ok();
    }
    DS4_TRY_VOID(nccl_of(c, "all_gather"));
    if (count) DS4_TRY_VOID(nccl_all_gather(c, ptr(src), ptr(recv), count, st, "all_gather"));
    if (graphs_.open()) region_comm_ = &c;
    return ok();
  }
  /// buf = ((p0 + p1) + ...) + p(R-1) over the ranks' bufs, the CPU group's order and bits. One
  /// rank: nothing. More ranks: ncclAllGather of every rank's buf into this stream's scratch
  /// [R, count], then the ordered_sum kernel into buf, both on `s` (never ncclAllReduce, whose
  /// algorithm picks the order); the host does not wait (only a scratch that must grow waits for
  /// the stream first, Scratch::get).
  Result<void> all_reduce_sum(dev::Stream& s, comm::Comm& c, const Tensor& buf) override {
    const int R = c.size();
    if (R == 1) return ok();
    DS4_CHECK(buf.contiguous() && buf.type == GgmlType::F32);
    const int64_t count = buf.ne0 * buf.ne1 * buf.ne2;
    CudaStream& cs_ = cst(s);
    DS4_TRY_VOID(nccl_of(c, "all_reduce_sum"));
    if (count == 0) return ok();
    auto* parts = reinterpret_cast<float*>(cs_.coll.get(static_cast<uint64_t>(R) * static_cast<uint64_t>(count) * 4, cs_.s_));
    DS4_TRY_VOID(nccl_all_gather(c, ptr(buf), parts, count, cs_.s_, "all_reduce_sum"));
    if (graphs_.open()) region_comm_ = &c;
    check_launch(launch_ordered_sum(cs_.s_, parts, R, count, fp(buf)), "all_reduce_sum ordered_sum");
    nan_check(s, "all_reduce_sum", buf);
    return ok();
  }

  uint64_t weight_bytes_read() const override { return weight_bytes_.load(std::memory_order_relaxed); }
  dev::WeightTierBytes weight_tier_bytes() const override {
    std::lock_guard<std::mutex> lock(bind_mu_);
    dev::WeightTierBytes b = tier_;
    b.device_resident = resident_read_.load(std::memory_order_relaxed);
    b.staged = staged_read_.load(std::memory_order_relaxed);
    return b;
  }
  /// The copy engines' timing: the engines replaced by ensure_stager plus the current one (polled:
  /// copies still in flight are counted by a later call).
  dev::LinkTiming link_timing() const override {
    std::lock_guard<std::mutex> lock(bind_mu_);
    dev::LinkTiming t = retired_link_;
    if (copier_) t += copier_->timing();
    return t;
  }

 private:
  static Tensor tensor_of(CudaBuffer* b, const dev::WeightMatrix& w) {
    Tensor t;
    t.buf = b;
    t.type = w.type;
    t.ne0 = w.in;
    t.ne1 = w.out;
    t.nb1 = w.row_bytes;
    t.nb2 = w.row_bytes * static_cast<uint64_t>(w.out);
    return t;
  }
  /// Checks that `c` can carry collective `op` on this device: an Error when `c` is not an
  /// endpoint of make_nccl_group, was made on another CUDA device, or the build has no NCCL (each
  /// naming what was expected and found). The communicator itself is looked up per enqueue
  /// (nccl_all_gather): an abort / rearm of the group replaces it.
  Result<void> nccl_of(const comm::Comm& c, const char* op) const {
#ifdef DS4_HAVE_NCCL
    const comm::NcclEndpoint e = comm::nccl_endpoint(c);
    if (!e.nccl)
      return Error{std::string("CUDA backend: ") + op + " over " + std::to_string(c.size()) +
                   " ranks: expected an NCCL rank endpoint (comm::make_nccl_group), found a '" + c.name() + "' one"};
    if (e.device != opts_.ordinal)
      return Error{std::string("CUDA backend: ") + op + ": the NCCL endpoint of rank " + std::to_string(c.rank()) +
                   " is on CUDA device " + std::to_string(e.device) + ", expected this device's " +
                   std::to_string(opts_.ordinal)};
    return ok();
#else
    return Error{std::string("CUDA backend: ") + op + " over " + std::to_string(c.size()) +
                 " ranks: expected a build with NCCL, found one without (tensor parallelism needs NCCL)"};
#endif
  }
  /// ncclAllGather of `count` floats per rank from `send` into `recv` on stream `st` through
  /// endpoint `c` (comm::nccl_all_gather). An aborted group's error is kAbortedMessage unchanged
  /// (the engine tells it from the failing rank's own error); others name `op`.
  static Result<void> nccl_all_gather(const comm::Comm& c, const void* send, void* recv, int64_t count,
                                      cudaStream_t st, const char* op) {
#ifdef DS4_HAVE_NCCL
    Result<void> r = comm::nccl_all_gather(c, send, recv, static_cast<size_t>(count), st);
    if (!r.ok() && r.error().message != comm::kAbortedMessage)
      return Error{std::string("CUDA backend: ") + op + ": " + r.error().message};
    return r;
#else
    (void)c, (void)send, (void)recv, (void)count, (void)st;
    return Error{std::string("CUDA backend: ") + op + ": built without NCCL"};
#endif
  }
  static Tensor raw_f32(const Scratch& sc, int64_t row_len, int64_t rows) {
    return Tensor{sc.b.get(), 0, GgmlType::F32, row_len, rows, 1, static_cast<uint64_t>(row_len) * 4,
                  static_cast<uint64_t>(row_len * rows) * 4};
  }

  /// BindMode::Staged: host bytes -> the next device slot of the ring through the copy engine
  /// (staging::CopyEngine, CUDA: cudaMemcpyAsync on its own non-blocking stream + one event per
  /// copy), queued now and waited for by the compute stream only before the slot's first reader
  /// (await_staged), so the copies of several binds run behind the compute work queued between
  /// the binds and their readers (issue 20 item 2):
  /// - the slot's previous readers are the compute-stream work queued since it was last filled
  ///   (the caller keeps at most reserve_staged_binds() binds awaiting readers, so every reader
  ///   of the old contents is queued before the ring wraps): consumer_done records that point,
  ///   the copy waits for it;
  /// - a pinned source is copied directly; the host waits for the copy only when the source may
  ///   be reused once bind returns (!w.source_persists: a cache slot, a bypass or NVMe buffer);
  ///   a pageable one is copied into the next pinned buffer of the bounce ring (acquire waits for
  ///   that buffer's previous copy) and not waited for.
  Tensor stage(const dev::WeightMatrix& w, uint64_t bytes) {
    ensure_stager(bytes);
    const int sl = next_slot_;
    const size_t si = static_cast<size_t>(sl);
    next_slot_ = (next_slot_ + 1) % static_cast<int>(slot_views_.size());
    if (slot_unread_[si]) {  // bound, never read: its reader (if any comes) would see the new bytes
      ++staged_stats_.overwritten_unread;
      slot_unread_[si] = false;
      --unread_slots_;
    }
    slot_ticket_[si] = {};
    if (slot_used_[si]) must(copier_->consumer_done(0, sl, stream_.s_), "staging: consumer_done");
    slot_used_[si] = true;
    if (bytes) {
      staging::CopyTicket t;
      if (is_pinned(w.data)) {
        t = must(copier_->submit(0, sl, w.data, bytes), "staging: copy from pinned host memory");
        if (!w.source_persists) {
          must(copier_->wait(t), "staging: wait for the copy");
          ++staged_stats_.direct_waits;
        }
      } else {
        const uint64_t blocked = bounce_.stats().blocked;
        const staging::BounceRing::Lease l = must(bounce_.acquire(), "staging: pinned bounce buffer");
        staged_stats_.bounce_waits += bounce_.stats().blocked - blocked;
        std::memcpy(l.data, w.data, bytes);
        const Result<staging::CopyTicket> r = copier_->submit(0, sl, l.data, bytes);
        bounce_.release(l, r.ok() ? *r : staging::CopyTicket{});
        t = must(r, "staging: copy from the bounce buffer");
        ++staged_stats_.bounced;
      }
      ++staged_stats_.copies;
      slot_ticket_[si] = t;
      slot_unread_[si] = true;
      ++unread_slots_;
    }
    tier_.h2d_staged += bytes;
    return tensor_of(slot_views_[si].get(), w);
  }

  /// Frees the rings a growth retired (ensure_stager), after waiting for the compute stream: the
  /// caller of reserve_staged_binds has queued every reader of their slots.
  void release_retired() {
    if (retired_.empty()) return;
    DS4_CUDA_CHECK(cudaStreamSynchronize(stream_.s_));
    retired_.clear();
  }

  /// The ring index of staging slot view `b`, or -1 (a view of a ring since remade).
  int slot_of(const CudaBuffer* b) const {
    for (size_t i = 0; i < slot_views_.size(); ++i)
      if (slot_views_[i].get() == b) return static_cast<int>(i);
    return -1;
  }

  /// Before an op on stream `st` reads weight `w`: when `w` is a staging slot whose copy the
  /// reader's stream has not waited for yet, `st` waits for that copy's event (no host wait);
  /// the slot counts as read.
  void await_staged(const Tensor& w, cudaStream_t st) {
    const CudaBuffer* b = cbuf(w);
    if (!b->staged()) return;
    std::lock_guard<std::mutex> lock(bind_mu_);
    const int sl = slot_of(b);
    if (sl < 0) return;
    const size_t si = static_cast<size_t>(sl);
    if (slot_ticket_[si].id != 0) {
      must(copier_->stream_wait(slot_ticket_[si], st), "staging: the reader's stream waits for the copy");
      slot_ticket_[si] = {};
    }
    if (slot_unread_[si]) {
      slot_unread_[si] = false;
      --unread_slots_;
    }
  }

  /// StagedBindStats::max_ahead at the launch of expert `e`: the staged slots bound and not yet
  /// read, other than e's own.
  void note_expert_launch(const ExpertTensors& e) {
    std::lock_guard<std::mutex> lock(bind_mu_);
    int own = 0;
    const Tensor* ts[3] = {&e.gate, &e.up, &e.down};
    for (int i = 0; i < 3; ++i) {
      const CudaBuffer* b = cbuf(*ts[i]);
      if (!b->staged()) continue;
      const int sl = slot_of(b);
      bool dup = false;
      for (int j = 0; j < i; ++j) dup = dup || ts[j]->buf == ts[i]->buf;
      if (sl >= 0 && !dup && slot_unread_[static_cast<size_t>(sl)]) ++own;
    }
    staged_stats_.max_ahead = std::max<uint64_t>(staged_stats_.max_ahead, static_cast<uint64_t>(unread_slots_ - own));
  }

  /// Makes the copy engine, its slots (opts_.staging_slots of at least `bytes`) and bounce ring
  /// (as many pinned buffers of the slot size) on first use; a larger matrix than the slots hold
  /// makes them anew, larger: after waiting for the compute stream when no staged tensor awaits a
  /// reader, else keeping the old ring (retired_) until the next reserve_staged_binds.
  void ensure_stager(uint64_t bytes) {
    if (copier_ && bytes <= slot_bytes_) return;
    constexpr uint64_t kAlign = 64 * 1024;
    const uint64_t want = (std::max<uint64_t>({bytes, slot_bytes_, 1}) + kAlign - 1) / kAlign * kAlign;
    if (copier_ && unread_slots_ > 0) {
      // Staged tensors of the old ring still await their readers: the compute stream waits for
      // their copies now, and the old ring lives on until those readers ran (release_retired).
      for (size_t i = 0; i < slot_ticket_.size(); ++i)
        if (slot_unread_[i] && slot_ticket_[i].id != 0)
          must(copier_->stream_wait(slot_ticket_[i], stream_.s_), "staging: compute waits for the old ring's copies");
      retired_link_ += copier_->timing();  // link_timing() keeps counting across the replacement
      retired_.push_back(Retired{std::move(copier_), std::move(slot_views_), std::move(bounce_)});
      slot_views_.clear();
      bounce_ = staging::BounceRing{};
    } else if (copier_) {
      DS4_CUDA_CHECK(cudaStreamSynchronize(stream_.s_));
      retired_link_ += copier_->timing();
      bounce_ = staging::BounceRing{};
      slot_views_.clear();
      copier_.reset();  // waits for its copies, frees its slots and pinned buffers
    }
    copier_ = must(staging::make_cuda_copy_engine(opts_.ordinal), "staging: CUDA copy engine");
    const int n = std::max(4, opts_.staging_slots);
    must(copier_->allocate_slots(1, n, want), "staging: device slots");
    // One bounce buffer per slot: a buffer is reused a whole ring later, when its previous copy
    // (whose slot's readers came a ring before that) is normally done, so the host rarely waits.
    bounce_ = must(staging::BounceRing::create(*copier_, n, want), "staging: pinned bounce buffers");
    for (int i = 0; i < n; ++i) slot_views_.push_back(std::make_unique<CudaBuffer>(copier_->slot(0, i), want, true));
    slot_used_.assign(static_cast<size_t>(n), false);
    slot_unread_.assign(static_cast<size_t>(n), false);
    slot_ticket_.assign(static_cast<size_t>(n), staging::CopyTicket{});
    unread_slots_ = 0;
    next_slot_ = 0;
    slot_bytes_ = want;
  }

  /// Before a launch on `st` reads weight `w`: await_staged, and w's bytes counted (its own
  /// bytes: a column view, wo_b's canonical shard, counts only its columns) by tier.
  void count_read(const Tensor& w, cudaStream_t st) {
    await_staged(w, st);
    const uint64_t b = static_cast<uint64_t>(w.ne1) * w.row_data_bytes();
    weight_bytes_.fetch_add(b, std::memory_order_relaxed);
    (cbuf(w)->staged() ? staged_read_ : resident_read_).fetch_add(b, std::memory_order_relaxed);
  }

  void run_matmuls(CudaStream& cs_, const Tensor* const* ws, const Tensor* const* ys, int nw, const Tensor& x,
                   ActFormat act) {
    cudaStream_t st = cs_.s_;
    const int64_t in = ws[0]->ne0, n = x.ne1;
    DS4_CHECK(x.ne0 == in && x.type == GgmlType::F32 && x.nb1 % 4 == 0);
    bool q8[2] = {false, false}, qdq[2] = {false, false};
    bool any_q8 = false, any_qdq = false;
    for (int k = 0; k < nw; ++k) {
      const Tensor& w = *ws[k];
      DS4_CHECK(w.ne0 == in && ys[k]->ne0 == w.ne1 && ys[k]->ne1 == n && ys[k]->type == GgmlType::F32);
      DS4_CHECK(dev::can_bind_type(w.type));
      count_read(w, st);
      q8[k] = act == ActFormat::Q8_1 && dev::uses_q8_1(w.type);
      any_q8 = any_q8 || q8[k];
      qdq[k] = act == ActFormat::FP8_QDQ && dev::is_fp8_fp4_weight(w.type);
      any_qdq = any_qdq || qdq[k];
    }
    if (n == 0) return;
    const float* X = fp(x);
    const uint64_t xpacked = static_cast<uint64_t>(in) * 4;
    uint8_t* act_q = nullptr;
    if (any_q8) {
      // quantize_q8_1 reads packed rows: strided activations are packed first (byte copy); a
      // single row (a decode step's token) is packed whatever its stride.
      const float* xs = X;
      if (n > 1 && x.nb1 != xpacked) {
        auto* xp = reinterpret_cast<float*>(cs_.xpack.get(xpacked * static_cast<uint64_t>(n), st));
        check_launch(launch_copy_rows_bytes(st, xp, xpacked, X, x.nb1, xpacked, n), "matmul pack x");
        xs = xp;
      }
      act_q = cs_.actq.get(static_cast<uint64_t>(n) * static_cast<uint64_t>(in / 32) * 36, st);
      check_launch(quantize_q8_1(xs, n, in, act_q, st), "matmul quantize_q8_1");
    }
    const float* Xq = nullptr;
    if (any_qdq) {
      auto* q = reinterpret_cast<float*>(cs_.xqdq.get(xpacked * static_cast<uint64_t>(n), st));
      check_launch(launch_qdq_fp8_rows(st, X, x.nb1, n, in, q), "matmul qdq_fp8");
      Xq = q;
    }
    for (int k = 0; k < nw; ++k) {
      const Tensor& w = *ws[k];
      const Tensor& y = *ys[k];
      float* Y = fp(y);
      if (!q8[k]) {
        const bool use_q = qdq[k];
        check_launch(launch_matmul_f32(st, w.type, ptr(w), w.ne1, in, w.nb1, use_q ? Xq : X, use_q ? xpacked : x.nb1, n,
                                       Y, y.nb1),
                     "matmul (F32 activations)");
        continue;
      }
      // Q8_1: the kernels read packed weight rows and write packed [n, rows] outputs.
      const uint64_t wrow = dev::row_bytes_of(w.type, in);
      const uint8_t* W = ptr(w);
      if (w.nb1 != wrow) {
        uint8_t* wp = cs_.wpack.get(wrow * static_cast<uint64_t>(w.ne1), st);
        check_launch(launch_copy_rows_bytes(st, wp, wrow, W, w.nb1, wrow, w.ne1), "matmul pack w");
        W = wp;
      }
      const uint64_t ypacked = static_cast<uint64_t>(w.ne1) * 4;
      float* Yp = Y;
      if (n > 1 && y.nb1 != ypacked) Yp = reinterpret_cast<float*>(cs_.ypack.get(ypacked * static_cast<uint64_t>(n), st));
      if (n <= 8)
        check_launch(mmvq(w.type, W, w.ne1, in, act_q, n, Yp, st), "matmul mmvq");
      else
        check_launch(mmq(w.type, W, w.ne1, in, act_q, n, Yp, MmqPath::Auto, st), "matmul mmq");
      if (Yp != Y) check_launch(launch_copy_rows_bytes(st, Y, y.nb1, Yp, ypacked, ypacked, n), "matmul unpack y");
    }
  }


  CudaDeviceOptions opts_;
  std::string name_;
  int sms_ = 0;
  CudaStream stream_;
  cudaStream_t alloc_stream_ = nullptr;  // alloc()'s zeroing (never captured)
  GraphRegions graphs_;
  const comm::Comm* region_comm_ = nullptr;  // the endpoint of a collective the open region captured
  mutable std::mutex bind_mu_;
  dev::BindMode mode_ = dev::BindMode::Persistent;
  std::map<std::tuple<const uint8_t*, int, int64_t, int64_t, uint64_t>, Tensor> bound_;
  std::vector<std::unique_ptr<CudaBuffer>> owned_;
  // BindMode::Staged: the copy engine (destroyed after the ring and the views, which use it),
  // its slots' views (tier accounting), which slots were filled, the pageable-source bounce ring.
  /// A ring made smaller than a later matrix, kept while staged tensors in it await readers.
  struct Retired {
    std::unique_ptr<staging::CopyEngine> copier;
    std::vector<std::unique_ptr<CudaBuffer>> views;
    staging::BounceRing bounce;
  };
  std::vector<Retired> retired_;
  std::unique_ptr<staging::CopyEngine> copier_;
  std::vector<std::unique_ptr<CudaBuffer>> slot_views_;
  std::vector<bool> slot_used_;
  std::vector<bool> slot_unread_;                   // filled, no reader queued yet
  std::vector<staging::CopyTicket> slot_ticket_;    // copy the readers' stream has not waited for yet
  int unread_slots_ = 0;
  dev::StagedBindStats staged_stats_;
  staging::BounceRing bounce_;
  int next_slot_ = 0;
  uint64_t slot_bytes_ = 0;
  dev::WeightTierBytes tier_;
  dev::LinkTiming retired_link_;  // timing of the copy engines ensure_stager replaced
  std::atomic<uint64_t> weight_bytes_{0}, resident_read_{0}, staged_read_{0};
  mutable std::mutex moe_mu_;
  std::vector<int32_t> host_ids_, host_pairs_;
  bool grouped_moe_ = true;  // opts_.grouped_moe, off under DS4_CUDA_GROUPED_MOE=0
  std::vector<detail::GroupedExpert> grouped_;
  std::vector<int32_t> grouped_local_;
  std::vector<int64_t> grouped_count_;
  GroupedMoeStats moe_stats_;  // under moe_mu_
};

}  // namespace

GroupedMoeStats grouped_moe_stats(const dev::Device& d) {
  const auto* c = dynamic_cast<const CudaDevice*>(&d);
  return c ? c->moe_path_stats() : GroupedMoeStats{};
}

Result<std::unique_ptr<dev::Device>> make_cuda_device(const CudaDeviceOptions& o) {
  const int n = cuda_device_count();
  if (o.ordinal < 0 || o.ordinal >= n)
    return Error{"CUDA device " + std::to_string(o.ordinal) + ": expected one of the " + std::to_string(n) +
                 " CUDA devices present, found " + (n == 0 ? std::string("none") : "no such ordinal")};
  return std::unique_ptr<dev::Device>(std::make_unique<CudaDevice>(o));
}

}  // namespace ds4::cuda
