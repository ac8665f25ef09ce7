// kernels/device.h — the backend-neutral, op-level device API the engine calls (DESIGN.md
// "Folders", "A decode step, as data flows"). In the spirit of ggml-backend: memory is device
// buffers, data is described by tensor views into them, and the forward pass is a sequence of
// named ops queued on a stream. No op returns a value to the host; `download` is the only way a
// result reaches host memory and the only point where the host waits for queued work.
//
// The CPU backend (make_cpu_device) runs each op immediately on its worker threads; a CUDA
// backend (later issue) queues the same ops on CUDA streams. Every op's CPU reference lives in
// kernels/cpu/<op>.cpp (declared in kernels/cpu/ops.h); the reduction order of each op is written
// on the op below and in DESIGN.md "Numerics contract", and does not depend on the thread count,
// the number of rows (tokens) of a launch, or which other sequences share a batch: every output
// element is produced by one worker from its own row's inputs.
//
// Shapes: a tensor is [ne1 rows, ne0 elements] (ggml order: ne[0] is the contiguous row length);
// rows are `nb1` bytes apart; an optional third dimension ne2 has planes `nb2` bytes apart. A
// weight matrix is a tensor of a ggml type with ne0 = in, ne1 = out (torch [out, in]).
// Activations are F32 tensors [n tokens, features]; ids and positions are I32 tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "ds4/result.h"
#include "kernels/link_timing.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::comm {
class Comm;
}

namespace ds4::dev {

/// How activations enter a matrix product.
/// F32: the weight row is decoded exactly to FP32 and dotted with FP32 activations (dot_f32 order).
/// Q8_1: activations are quantized to Q8_1 blocks (kernels/quant/quantize_q8.h) and dotted with the
/// weight's blocks in the kernels/quant/dot_q8_1.h order. Weight types without a Q8_1 dot (F32, F16,
/// BF16) take the F32 path; see `uses_q8_1`.
/// FP8_QDQ: DeepSeek's QAT simulation (`--activations fp8`): for weights stored as FP8/FP4 in the
/// official checkpoint (F8_E4M3_R128, MXFP4, NVFP4_S2; see `is_fp8_fp4_weight`) each activation row
/// is first FP8 E4M3 quantize-dequantized in 1x128 blocks (kernels/quant/act_qdq.h qdq_fp8_e4m3,
/// REF linear() -> act_quant), then the F32 path; other weights take the F32 path unchanged.
enum class ActFormat { F32, Q8_1, FP8_QDQ };

/// True for the weight types whose activations FP8_QDQ quantizes (FP8/FP4 checkpoint encodings).
bool is_fp8_fp4_weight(GgmlType type);

/// The in-place activation QDQ steps of REF's QAT path (Device::act_qdq; kernels/quant/act_qdq.h).
/// Fp8E4M3: FP8 E4M3 QDQ (ue8m0 scales) of the first `len` elements of each head, in blocks.
/// HadamardFp4: the normalized Walsh-Hadamard transform of each whole head (REF rotate_activation),
/// then FP4 E2M1 QDQ (ue8m0 scales) of the head in blocks.
enum class QdqMode { Fp8E4M3, HadamardFp4 };

/// A host-side description of a weight matrix in host memory (the GGUF mapping, an expert slab):
/// `out` rows of `in` elements of `type`, `row_bytes` apart. It is not a device object: ops never
/// take it; Device::bind makes a device tensor of it. `data` stays owned by the caller.
struct WeightMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t in = 0;           // ne[0]: elements per row
  int64_t out = 0;          // ne[1]: number of rows
  uint64_t row_bytes = 0;   // bytes of one row (in / block_elems * block_bytes)
  /// True when the bytes at `data` stay valid and unchanged for the life of whoever handed the
  /// matrix out (an expert store's host slab, the model mmap), false when the owner may reuse
  /// them once the call that returned the matrix is followed by another (a cache bypass buffer,
  /// an NVMe read buffer). A backend that copies a BindMode::Staged bind asynchronously then
  /// needs neither a host wait for the copy nor a bounce copy of a pinned source.
  bool source_persists = false;
  /// Row `r` of the matrix.
  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
};

/// Device memory, owned by whoever holds the unique_ptr. Only the backend that made a buffer
/// reads its contents (ops check `backend()`).
class Buffer {
 public:
  virtual ~Buffer() = default;
  /// Size in bytes.
  virtual uint64_t bytes() const = 0;
  /// The backend that owns this buffer (a tag compared by the ops).
  virtual const void* backend() const = 0;
};

/// A view of device memory: `ne1` rows (and `ne2` planes) of `ne0` elements of `type`, starting
/// `offset` bytes into `buf`. Strided views (column slices of weights, a group's columns of an
/// activation) keep the parent's row stride `nb1`. Copyable, non-owning.
struct Tensor {
  Buffer* buf = nullptr;
  uint64_t offset = 0;
  GgmlType type = GgmlType::F32;
  int64_t ne0 = 0, ne1 = 0, ne2 = 1;
  uint64_t nb1 = 0, nb2 = 0;  // row and plane strides (bytes)

  bool empty() const { return buf == nullptr; }
  int64_t rows() const { return ne1; }
  /// Bytes of one row's data (ne0 elements of `type`).
  uint64_t row_data_bytes() const;
  /// True when rows (and planes) are packed: nb1 == row_data_bytes(), nb2 == ne1 * nb1.
  bool contiguous() const;
  /// Rows [r0, r1) (a view).
  Tensor rows_view(int64_t r0, int64_t r1) const;
  /// Elements [c0, c1) of every row (a strided view; for block types c0, c1 must be multiples of
  /// the block length, checked).
  Tensor cols_view(int64_t c0, int64_t c1) const;
  /// The same contiguous memory as [rows, row_len] (rows * row_len == ne0 * ne1 * ne2; checked).
  Tensor reshaped(int64_t row_len, int64_t rows) const;
  /// Plane `p` of a 3-D tensor (a 2-D view).
  Tensor plane(int64_t p) const;
};

/// A device tensor together with the buffer that owns its memory.
struct OwnedTensor {
  std::unique_ptr<Buffer> buffer;
  Tensor t;
};

/// An ordered queue of ops and copies (a CUDA stream; on the CPU backend, work runs at enqueue).
class Stream {
 public:
  virtual ~Stream() = default;
};

/// A point in a stream's work that other streams can wait for.
class Event {
 public:
  virtual ~Event() = default;
};

/// One of the routed experts a grouped MoE launch computes: its id and its three matrices
/// (gate, up: [dim -> ff], down: [ff -> dim]).
struct ExpertTensors {
  int32_t id = 0;
  Tensor gate, up, down;
};

/// How Device::bind treats host matrices on a backend with its own memory (CPU: both alias host
/// memory). Persistent: the first bind of a host matrix copies it, later binds of the same matrix
/// (data, type, shape) return the same device tensor (load-time weights, VRAM-resident experts).
/// Staged: every bind copies the host bytes into a ring of device slots (experts staged from host
/// memory each step); the tensor is valid for the ops enqueued before the ring wraps.
enum class BindMode { Persistent, Staged };

/// Counters of the BindMode::Staged binds of a backend that copies them (CPU: all zero). "Ahead":
/// at each expert launch of moe_experts, the staged copies already submitted for later launches
/// (slots bound and not yet read, other than the launch's own): the copies queued behind compute.
struct StagedBindStats {
  uint64_t copies = 0;         ///< staged binds that queued a copy (bytes > 0)
  uint64_t direct_waits = 0;   ///< copies from pinned memory the host waited for (source may be reused)
  uint64_t bounced = 0;        ///< copies from pageable memory through a pinned bounce buffer
  uint64_t bounce_waits = 0;   ///< bounce buffers the host waited for (their previous copy in flight)
  uint64_t max_ahead = 0;      ///< the most copies "ahead" of one expert launch (see above)
  uint64_t overwritten_unread = 0;  ///< slots refilled before anything read them (a caller bug)
};

/// Weight bytes read by matmul/matmul2/moe_experts (as weight_bytes_read) split by where the
/// matrix lived at the launch, plus the bytes bind() copied from host to device memory.
struct WeightTierBytes {
  uint64_t device_resident = 0;  ///< matrices bound Persistent into device memory
  uint64_t staged = 0;           ///< matrices bound Staged (copied this step into a device slot)
  uint64_t host = 0;             ///< matrices read in host memory (the CPU backend)
  uint64_t h2d_persistent = 0;   ///< bytes copied host -> device by Persistent binds (load)
  uint64_t h2d_staged = 0;       ///< bytes copied host -> device by Staged binds
};

/// Counters of a backend's graph regions (Device::begin_graph; CUDA graphs; CPU: all zero).
struct GraphStats {
  uint64_t launches = 0;         ///< regions ended: captured, then launched as one graph
  uint64_t instantiations = 0;   ///< executable graphs made: a key's first region, or after a refused update
  uint64_t updates = 0;          ///< executable graphs updated in place from the new capture
  uint64_t update_failures = 0;  ///< updates refused (the region's topology changed): re-instantiated
  uint64_t discarded = 0;        ///< regions dropped at their end, not launched: they held a collective of a rank group aborted meanwhile (Comm::abort)
};

/// A compute device. Ops are enqueued on `s` (the default stream when the engine has one stream);
/// inputs must stay valid until the op has run (CPU: until the call returns). Outputs may not
/// alias inputs unless the op says so. Shapes are checked (programmer errors abort).
class Device {
 public:
  virtual ~Device() = default;
  /// Human-readable name ("cpu (4 threads)").
  virtual const char* name() const = 0;
  /// Number of worker threads (CPU) or SMs.
  virtual int threads() const = 0;

  // ---- memory ------------------------------------------------------------------------------
  /// A zeroed device buffer of `bytes`.
  virtual std::unique_ptr<Buffer> alloc(uint64_t bytes) = 0;
  /// A packed tensor [rows, row_len] of `type` in a new zeroed buffer.
  OwnedTensor alloc_tensor(GgmlType type, int64_t row_len, int64_t rows, int64_t planes = 1);
  /// A device tensor of the host weight `w`: on the CPU backend a view of the host memory itself
  /// (no copy; the memory must outlive every use); a backend that cannot read host memory copies
  /// it into memory it owns until the device is destroyed.
  virtual Tensor bind(const WeightMatrix& w) = 0;
  /// bind() of a host float array [n] (norm weights, biases, mHC parameters).
  Tensor bind_f32(const float* p, int64_t n);
  /// bind() of a host int32 table [rows, row_len] (the hash-routing table tid2eid).
  Tensor bind_i32(const int32_t* p, int64_t row_len, int64_t rows);
  /// Copies `bytes` of host memory into `dst` (packed rows from its start) on stream `s`. `src`
  /// must stay valid until `s` is synchronized (CPU: copied before returning).
  virtual void upload(Stream& s, const Tensor& dst, const void* src, uint64_t bytes) = 0;
  /// Waits for the work queued on `s`, then copies `bytes` of `src` (packed rows) to host `dst`.
  virtual void download(Stream& s, const Tensor& src, void* dst, uint64_t bytes) = 0;

  // ---- streams and events ------------------------------------------------------------------
  /// The device's default stream.
  virtual Stream& stream() = 0;
  /// A new stream (the CPU backend's streams all run work at enqueue).
  virtual std::unique_ptr<Stream> create_stream() = 0;
  /// Records an event after the work queued so far on `s`.
  virtual std::unique_ptr<Event> record(Stream& s) = 0;
  /// Work queued on `s` after this call waits for `e`.
  virtual void wait(Stream& s, const Event& e) = 0;
  /// Blocks until the work queued on `s` is done.
  virtual void synchronize(Stream& s) = 0;
  /// A timing point after the work queued so far on `s`: an event whose completion time the
  /// device reads back (elapsed_s). Null where the backend does not time its streams (CPU: ops
  /// run at enqueue). Default: null.
  virtual std::unique_ptr<Event> record_timed(Stream& s) { return nullptr; }
  /// Seconds from timing point `a` to `b` (both record_timed of this device, b recorded after a
  /// on the same stream), waiting for b to complete; -1 where the backend does not time.
  virtual double elapsed_s(const Event& a, const Event& b) { return -1; }

  // ---- graph regions (CUDA graphs; issue 20 item 3) ----------------------------------------
  /// Opens a graph region on `s`: until end_graph(s) the ops enqueued on `s` are recorded instead
  /// of run (CUDA: stream capture), and end_graph queues them all at once (one graph launch), in
  /// order, each with the arguments it had when it was enqueued: the results are those of the
  /// same ops without a region. `key` names the region across steps: the backend keeps one
  /// executable graph per key and updates it from each new capture. Inside a region: ops on `s`
  /// only (alloc is allowed), no upload, download, synchronize, record, wait, bind or moe_experts
  /// (each a host-side step or a dependency across the region; the backend aborts naming the
  /// call). One region per device at a time. Returns false and opens nothing when the backend has
  /// no graphs (default; the CPU backend, whose ops run at enqueue) or may not capture now
  /// (CUDA with DS4_CUDA_CHECK_NAN=1); then end_graph must not be called.
  virtual bool begin_graph(Stream& s, uint64_t key) { return false; }
  /// Closes the region begin_graph opened on `s` and queues its work (see begin_graph).
  virtual void end_graph(Stream& s) {}
  /// Counters of the graph regions so far (default: zeros).
  virtual GraphStats graph_stats() const { return {}; }

  // ---- ops (CPU reference: kernels/cpu/<name>.cpp) ----------------------------------------
  /// y[t, r] = W[r, :] . x[t, :] for t < x.ne1, r < W.ne1 (kernels/cpu/matmul.cpp). W any bound
  /// type (strided views allowed), x [n, W.ne0] F32, y [n, W.ne1] F32 (strided rows allowed).
  /// Order: dot_f32's (F32) or dot_q8_1.h's (Q8_1); y[t, r] does not depend on n.
  virtual void matmul(Stream& s, const Tensor& w, const Tensor& x, const Tensor& y, ActFormat act) = 0;
  /// matmul for two weights sharing x (gate and up), one launch; x quantized once.
  virtual void matmul2(Stream& s, const Tensor& w0, const Tensor& y0, const Tensor& w1, const Tensor& y1,
                       const Tensor& x, ActFormat act) = 0;
  /// out[t, :] = decoded row ids[t] of `w` when vocab0 <= ids[t] < vocab1, else +0
  /// (kernels/cpu/embed_rows.cpp; exact). ids I32 [n]; out F32 [n, w.ne0].
  virtual void embed_rows(Stream& s, const Tensor& w, const Tensor& ids, int64_t vocab0, int64_t vocab1,
                          const Tensor& out) = 0;
  /// out[t, :] = all[(ids[t] / rows_per_rank) * n + t, :]: each token's row from the rank that owns
  /// its id (vocabulary-parallel embedding; exact). all F32 [R*n, dim], ids I32 [n].
  virtual void owner_rows(Stream& s, const Tensor& all, const Tensor& ids, int64_t rows_per_rank,
                          const Tensor& out) = 0;
  /// X[t, j*dim + d] = e[t, d] for j < hc (kernels/cpu/hc_expand.cpp). e [n, dim], X [n, hc*dim].
  virtual void hc_expand(Stream& s, const Tensor& e, int hc, const Tensor& x) = 0;
  /// y[t, :] = weight * x[t, :] * (1 / sqrt(mean(x[t, :]^2) + eps)) (kernels/cpu/rmsnorm.cpp);
  /// `weight` [dim] may be empty; y may alias x. Sum of squares ascending, from 0.
  virtual void rmsnorm(Stream& s, const Tensor& x, const Tensor& weight, float eps, const Tensor& y) = 0;
  /// mHC before a sublayer (kernels/cpu/hc_pre.cpp): mixes = fn . flat(X[t]) * rsqrt(mean sq), the
  /// Sinkhorn split into mix[t] = [pre hc | post hc | comb hc*hc], y[t] = sum_j pre[j] X[t, j].
  /// X [n, hc*dim], fn [(2+hc)*hc, hc*dim], scale [3], base [(2+hc)*hc]; y [n, dim], mix [n, (2+hc)*hc].
  virtual void hc_pre(Stream& s, const Tensor& x, const Tensor& fn, const Tensor& scale, const Tensor& base,
                      int hc, int iters, float hc_eps, float norm_eps, const Tensor& y, const Tensor& mix) = 0;
  /// mHC after a sublayer, in place (kernels/cpu/hc_post.cpp): X'[k] = post[k] f + sum_j comb[j,k] X[j].
  virtual void hc_post(Stream& s, const Tensor& f, const Tensor& mix, int hc, const Tensor& x) = 0;
  /// The head's mHC reduction (kernels/cpu/hc_head.cpp): h[t] = sum_j w_j X[t, j] with
  /// w = sigmoid(mixes * scale + base) + eps. X [n, hc*dim], fn [hc, hc*dim]; h [n, dim].
  virtual void hc_head(Stream& s, const Tensor& x, const Tensor& fn, const Tensor& scale, const Tensor& base,
                       int hc, float hc_eps, float norm_eps, const Tensor& h) = 0;
  /// Interleaved RoPE on the last 2*freqs.ne0 dims of each of the `heads` D-element heads of every
  /// row (kernels/cpu/rope.cpp); row t rotated to position pos[t]; `inverse` = the conjugate.
  /// x F32 [n, heads*D] in place; freqs F32 [rope_dim/2]; pos I32 [n].
  virtual void rope(Stream& s, const Tensor& x, int64_t heads, const Tensor& freqs, const Tensor& pos,
                    bool inverse) = 0;
  /// The compressor over one sequence's chunk at positions pos0.. (kernels/cpu/compressor.cpp):
  /// per token, (a, g + ape[pos % ratio]) enters the state; a completed block b is pooled
  /// (per-channel softmax over the candidate tokens, ascending), RMS-normed with `norm`, rotated
  /// to position b*ratio and stored as cache row b. a, g F32 [n, c*d]; ape [ratio, c*d]; state:
  /// cur [2, ratio*c*d] (a, g), prev [2, ratio*d] (overlap only, else empty); cache [cap, d].
  virtual void compressor(Stream& s, const Tensor& a, const Tensor& g, const Tensor& ape, const Tensor& norm,
                          float eps, const Tensor& freqs, int ratio, int64_t pos0, const Tensor& cur,
                          const Tensor& prev, const Tensor& cache) = 0;
  /// Lightning-indexer shard scores of one sequence's chunk (kernels/cpu/indexer_scores.cpp):
  /// out[k, t, j] = sum over heads h of shard k (ascending, from 0) of w[t, h] * relu(q[t, h] . keys[j])
  /// for j < (pos0 + t + 1) / 4, shards of `hs` heads, k < out.ne2; other entries untouched.
  /// q [n, H*D], w [n, H], keys [cap, D], out [shards, n, ld].
  virtual void indexer_scores(Stream& s, const Tensor& q, const Tensor& w, const Tensor& keys, int64_t hs,
                              int64_t pos0, const Tensor& out) = 0;
  /// dst[i] = ((src[0, i] + src[1, i]) + ...) + src[P-1, i] (kernels/cpu/ordered_sum.cpp): the
  /// canonical shard sum and the TP rank order. src F32 [P, m] (plane p = src.plane(p) or rows),
  /// dst F32 [m]; both packed, viewed flat.
  virtual void ordered_sum(Stream& s, const Tensor& src, int64_t parts, const Tensor& dst) = 0;
  /// Per row t, the indices of the k largest of the first (pos0 + t + 1) / ratio scores, descending,
  /// ties to the lower index, NaN last, -1 padded (kernels/cpu/topk.cpp). scores [n, ld], out I32 [n, k].
  virtual void topk(Stream& s, const Tensor& scores, int64_t pos0, int ratio, const Tensor& out) = 0;
  /// Sparse attention with sink over one sequence's chunk (kernels/cpu/sparse_attention.cpp): query
  /// t (position pos0+t) attends to the raw KV of positions max(0, pos-win+1)..pos (this chunk's kv
  /// rows, else the window ring row p % win), then ratio 4: the compressed rows sel[t] (>= 0), ratio
  /// > 0 otherwise: compressed rows 0..(pos+1)/ratio-1; softmax with the head's sink logit;
  /// out = sum_i p_i v_i (ascending i). q [n, H*D], kv [n, D], ring [win, D], ckv [cap, D],
  /// sel I32 [n, k] or empty, sinks [H]; out [n, H*D].
  virtual void sparse_attention(Stream& s, const Tensor& q, const Tensor& kv, const Tensor& ring,
                                const Tensor& ckv, const Tensor& sel, const Tensor& sinks, int ratio,
                                int64_t pos0, float scale, const Tensor& out) = 0;
  /// Ring update (kernels/cpu/window_store.cpp): ring[p % win] = kv[p - pos0] for the last
  /// min(n, win) positions p of the chunk. kv [n, D], ring [win, D].
  virtual void window_store(Stream& s, const Tensor& kv, int64_t pos0, const Tensor& ring) = 0;
  /// In-place activation QDQ (kernels/cpu/act_qdq.cpp; REF kernel.py act_quant / fp4_act_quant,
  /// model.py rotate_activation): every row of x [n, heads*D] is split into `heads` heads of D;
  /// Fp8E4M3 QDQs elements [0, len) of each head in blocks of `block` (len % block == 0, len <= D);
  /// HadamardFp4 rotates the whole head (D a power of two; `len` must equal D) then QDQs it to FP4
  /// in blocks of `block`. Exact per element except amax / 448 (or / 6) and the Hadamard butterflies
  /// (fixed order, kernels/quant/act_qdq.h). Strided rows allowed.
  virtual void act_qdq(Stream& s, const Tensor& x, int64_t heads, QdqMode mode, int64_t len, int64_t block) = 0;
  /// dst = src element-wise (kernels/cpu/copy.cpp); same shape, strided rows allowed, F32 or I32.
  virtual void copy(Stream& s, const Tensor& src, const Tensor& dst) = 0;
  /// dst += src element-wise (kernels/cpu/add.cpp); F32, same shape.
  virtual void add(Stream& s, const Tensor& dst, const Tensor& src) = 0;
  /// x *= factor element-wise (kernels/cpu/scale.cpp).
  virtual void scale(Stream& s, const Tensor& x, float factor) = 0;
  /// Every element of x (F32) = value (kernels/cpu/fill.cpp).
  virtual void fill(Stream& s, const Tensor& x, float value) = 0;
  /// MoE routing (kernels/cpu/router.cpp): s = sqrt(softplus(logits)); hash layers (`tid2eid`
  /// [vocab, K] non-empty) take tid2eid[tokens[t]], others the top-K of s + bias (ties: lower id);
  /// weights from the un-biased s: s[e] / sum(selected s, in slot order) (when `normalize`) times
  /// route_scale. logits [n, E], bias [E] or empty, tokens I32 [n]; ids I32 [n, K], weights F32 [n, K].
  virtual void router(Stream& s, const Tensor& logits, const Tensor& bias, const Tensor& tid2eid,
                      const Tensor& tokens, bool normalize, float route_scale, const Tensor& ids,
                      const Tensor& weights) = 0;
  /// Clamped SwiGLU in place (kernels/cpu/swiglu.cpp): g = silu(min(g, limit)) * clamp(u, +-limit)
  /// (limit <= 0: no clamp), times row_weight[t] when non-empty. g, u [n, ff]; row_weight [n].
  virtual void swiglu(Stream& s, const Tensor& g, const Tensor& u, float limit, const Tensor& row_weight) = 0;
  /// Grouped routed experts (kernels/cpu/moe_experts.cpp): for each expert of `experts` (ascending
  /// id), the slots (t, k) with ids[t, k] == id, in ascending (t, k) order, are gathered, and
  /// slots[t*K + k] = down(swiglu(gate x_t, up x_t, limit) * weights[t, k]). Other slots are left
  /// as they are. x [n, dim], ids I32 [n, K], weights [n, K], slots [n*K, dim]. `ids_host`, when
  /// not empty, is the caller's host copy of ids ([n*K], the same values): a device that builds its
  /// slot lists on the host then reads it instead of downloading ids (a wait for the stream).
  virtual void moe_experts(Stream& s, const Tensor& x, const Tensor& ids, const Tensor& weights,
                           std::span<const ExpertTensors> experts, float limit, ActFormat act,
                           const Tensor& slots, std::span<const int32_t> ids_host = {}) = 0;
  /// out[t] = ((0 + slots[t, k1]) + slots[t, k2]) + ... over t's K slots in ascending expert id
  /// (stable: equal ids in slot order) (kernels/cpu/moe_combine.cpp). out [n, dim].
  virtual void moe_combine(Stream& s, const Tensor& slots, const Tensor& ids, const Tensor& out) = 0;
  /// recv[r * m + i] = rank r's src[i] (the rank group's all-gather; src, recv packed F32).
  virtual Result<void> all_gather(Stream& s, comm::Comm& c, const Tensor& src, const Tensor& recv) = 0;
  /// buf = the rank-order sum of every rank's buf (comm::Comm::all_reduce_sum_f32).
  virtual Result<void> all_reduce_sum(Stream& s, comm::Comm& c, const Tensor& buf) = 0;

  /// Weight bytes read by matmul/matmul2/moe_experts since the device was made: each launch counts
  /// every matrix once (ne1 * row_data_bytes(): a column view counts only its own columns, not the
  /// parent's row stride), whatever the token count (the engine's roofline counter).
  virtual uint64_t weight_bytes_read() const = 0;
  /// weight_bytes_read split by tier (default: everything read in host memory).
  virtual WeightTierBytes weight_tier_bytes() const {
    WeightTierBytes b;
    b.host = weight_bytes_read();
    return b;
  }
  /// Timing of this device's host -> device staging link (kernels/link_timing.h), monotone:
  /// copy time, compute-stream stall and host waits of the copies completed so far. Default
  /// (the CPU backend, which copies nothing): not measured.
  virtual LinkTiming link_timing() const { return {}; }
  /// Selects how later bind() calls copy host matrices (see BindMode; default: ignored).
  virtual void set_bind_mode(BindMode) {}
  /// Prepares BindMode::Staged binds of matrices of at most `matrix_bytes` and returns how many
  /// staged binds may be outstanding at once: bound, with no op reading them enqueued yet (the
  /// staging ring's slots; a later bind reuses the oldest slot). 0: no limit (default, and the CPU,
  /// whose bind aliases host memory). Call it when no staged tensor awaits its first reader: it
  /// may wait for the device and remake the ring, larger.
  virtual int reserve_staged_binds(uint64_t matrix_bytes) { return 0; }
  /// Counters of the staged binds so far (see StagedBindStats; default: zeros).
  virtual StagedBindStats staged_bind_stats() const { return {}; }
  /// True when ops read device memory the host cannot dereference (bind copies).
  virtual bool owns_memory() const { return false; }
  /// Free and total bytes of the device's own memory (0, 0 when it has none: the CPU).
  struct MemoryInfo {
    uint64_t free = 0, total = 0;
  };
  virtual MemoryInfo memory_info() const { return {}; }
};

/// True when matmul with `act` = Q8_1 really quantizes activations for weight type `type`.
bool uses_q8_1(GgmlType type);

/// True when weights of `type` can be bound and multiplied (F32 or a type with an exact decoder).
bool can_bind_type(GgmlType type);

/// Bytes of one row of `n` elements of `type` (n a multiple of the block length; checked).
uint64_t row_bytes_of(GgmlType type, int64_t n);

/// CPU backend with `threads` workers (0 = hardware concurrency).
std::unique_ptr<Device> make_cpu_device(int threads);

/// The device kinds ModelOptions::backend names.
enum class BackendKind { Cpu, Cuda };
/// Parses "cpu", "cuda" or "auto" (auto = CUDA when a CUDA device is present, else the CPU, with
/// one line on stderr saying so). "cuda" without a CUDA device (or in a build without CUDA) is an
/// Error naming what was found. Anything else, the empty string included, is an Error naming the
/// value and the accepted ones.
Result<BackendKind> parse_backend(const std::string& name);
/// A device of kind `k`: the CPU with `threads` workers, or CUDA device `ordinal` (aborts when it
/// cannot be made: parse_backend checked that it exists).
std::unique_ptr<Device> make_device(BackendKind k, int threads, int ordinal = 0);
/// CUDA devices make_device(Cuda, ., ordinal) can make (ordinals 0..n-1): the runtime's count (0 in
/// a build without CUDA), or the test factory's count.
int cuda_device_count();
/// Test hook: makes BackendKind::Cuda devices with `f` (the emulated CUDA device of
/// tests/cuda_emu) instead of the real runtime; an empty function restores the default. `count`
/// reports how many devices `f` can make (empty: one).
void set_cuda_device_factory(std::function<std::unique_ptr<Device>(int ordinal)> f,
                             std::function<int()> count = {});

}  // namespace ds4::dev
