// kernels/cpu/ops.h — the CPU reference of every op of kernels/device.h, one .cpp per op named
// after it (kernels/cpu/<op>.cpp), over host memory. These functions DEFINE the numerics
// (DESIGN.md "Numerics contract"): each reduction's order is written on the function, and each
// works on a range of rows [t0, t1) so that a parallel split over rows cannot change a result.
// The CPU device (kernels/device_cpu.cpp) calls them on its worker threads; the CUDA backend
// reproduces them (bit-exact or within the tolerance named in DESIGN.md / device_conformance_test).
// Transcendentals come from kernels/quant/math.h (one __host__ __device__ implementation).
// Sources of the math: REF = DeepSeek-V4 inference/model.py and kernel.py
// (../shared/reference/dsv4-architecture.md §2).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/mmq.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::cpu {

/// A host view of F32 rows: row t at p + t * ld.
struct F32Rows {
  float* p = nullptr;
  int64_t ld = 0;
  float* row(int64_t t) const { return p + t * ld; }
};
/// A host view of I32 rows.
struct I32Rows {
  int32_t* p = nullptr;
  int64_t ld = 0;
  int32_t* row(int64_t t) const { return p + t * ld; }
};
/// A host weight view: rows of `in` elements of `type`, `row_bytes` apart.
struct WRows {
  GgmlType type = GgmlType::F32;
  const uint8_t* p = nullptr;
  int64_t in = 0, out = 0;
  uint64_t row_bytes = 0;
  const uint8_t* row(int64_t r) const { return p + static_cast<uint64_t>(r) * row_bytes; }
};

// ---- dot_f32.cpp ---------------------------------------------------------------------------
/// Dot product of two FP32 vectors of length n (>= 0) in the contract's order
/// (kernels/quant/dot_f32.h): 32 lanes, lane l takes i % 32 == l ascending as acc_l = fma(a, b,
/// acc_l) from +0, then the butterfly off = 16, 8, 4, 2, 1; bit-identical to quant::dot_f32_ref
/// in every SIMD family (AVX-512F, AVX2+FMA, scalar).
float dot_f32(const float* a, const float* b, int64_t n);
/// Four dot products of `w` with x[0..3] (each bit-identical to dot_f32(w, x[k], n)).
void dot_f32_x4(const float* w, const float* const* x, int64_t n, float* out);
/// Four dot products of rows w[0..3] with `x` (each bit-identical to dot_f32(w[k], x, n)).
void dot_f32_rows4(const float* const* w, const float* x, int64_t n, float* out);

// ---- dot_f32_wide.cpp ----------------------------------------------------------------------
/// True when dot_row_f32 reads rows of `type` in place (no decoded row) on the selected kernel
/// family: F32, F16, BF16, Q8_0, MXFP4, NVFP4, NVFP4_S2, Q2_K, IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M with
/// AVX2+FMA+F16C or AVX-512; F8_E4M3_R128 with AVX-512 only.
bool has_fused_dot_f32(GgmlType type);
/// True for the types dot_row_f32 accepts (F32, F16, BF16, Q8_0, MXFP4, NVFP4, NVFP4_S2,
/// F8_E4M3_R128, Q2_K, IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M): where not fused on this CPU the row is
/// decoded (exactly) to a thread-local buffer first.
bool can_dot_row_f32(GgmlType type);
/// dot_f32(decode(w_row), x, n) bit for bit (n a multiple of the block length), without decoding
/// the row to a buffer where has_fused_dot_f32 (F16 by F16C / AVX-512 conversion, BF16 by shift,
/// block types by in-register decode); `type` must satisfy can_dot_row_f32 (checked).
float dot_row_f32(GgmlType type, const void* w_row, const float* x, int64_t n);
/// out[k] = dot_row_f32(type, w_row, x[k], n) for k < 4 (one weight read for four tokens).
void dot_row_f32_x4(GgmlType type, const void* w_row, const float* const* x, int64_t n, float* out);
/// True when dot_rows2_f32_x4 has its own kernel for `type` on this CPU (the AVX-512 family's
/// fused types); elsewhere it calls dot_row_f32_x4 twice (same results, no gain).
bool has_rows2_f32_x4(GgmlType type);
/// out[r * 4 + k] = dot_row_f32(type, w_rows[r], x[k], n) for r < 2, k < 4, bit for bit: two
/// weight rows against four tokens, each activation vector loaded once for both rows. `type`
/// must satisfy can_dot_row_f32 (checked by the fallback).
void dot_rows2_f32_x4(GgmlType type, const void* const* w_rows, const float* const* x, int64_t n, float* out);
/// out[k] = dot_row_f32(type, w_rows[k], x, n) for k < 4.
void dot_rows4_f32(GgmlType type, const void* const* w_rows, const float* x, int64_t n, float* out);

// ---- matmul.cpp ----------------------------------------------------------------------------
/// Reusable per-call scratch of a matmul (quantized activations); owned by the caller so that
/// steady-state calls allocate nothing.
struct MatmulScratch {
  std::vector<uint8_t> xq;
  std::vector<float> xqdq;  // FP8_QDQ: the QDQ'd activations [n, in]
  std::vector<float> da;    // multi-token kernels: per-token chunk scales (MmqTokens layout)
  std::vector<int16_t> hs;  // ... and half sums
  std::vector<uint8_t> qt;  // ... and transposed codes
  bool sums = false;        // da / hs filled by matmul_quantize_rows
};
/// Sizes s for n tokens of length in (in % 32 == 0): s.xq for the Q8_1 rows and, with `sums`
/// (the multi-token kernels will run), s.da / s.hs. Call before matmul_quantize_rows.
void matmul_quantize_prepare(int64_t n, int64_t in, bool sums, MatmulScratch& s);
/// Quantizes tokens [t0, t1) of x to Q8_1 into s.xq (in/32 * 36 bytes per token) and, when
/// prepared with sums, fills their da / hs rows. Disjoint ranges may run concurrently.
void matmul_quantize_rows(const F32Rows& x, int64_t in, MatmulScratch& s, int64_t t0, int64_t t1);
/// Quantizes the n rows of x (length in, in % 32 == 0) to Q8_1 into s.xq (n * in/32 * 36 bytes),
/// on the calling thread (prepare without sums + rows over [0, n)).
void matmul_quantize(const F32Rows& x, int64_t n, int64_t in, MatmulScratch& s);
/// The per-token view of s (prepared with sums, quantized) for the multi-token kernels.
MmqTokens matmul_tokens(const MatmulScratch& s, int64_t in);
/// True when matmul_rows takes the multi-token path for `type` with q8 activations and n tokens
/// (a SIMD kernel is selected and n >= mmq_min_tokens(type)).
bool matmul_uses_mmq(GgmlType type, int64_t n);
/// Copies the n rows of x (length in, in % 128 == 0) into s.xqdq (packed [n, in]) and FP8 E4M3
/// QDQs each row in 1x128 blocks (kernels/quant/act_qdq.h qdq_fp8_e4m3); returns the packed view.
F32Rows matmul_qdq_fp8(const F32Rows& x, int64_t n, int64_t in, MatmulScratch& s);
/// Rows [r0, r1) of y = W x for all n tokens: y.row(t)[r] = W[r] . x[t]. With `q8` the Q8_1 rows
/// of matmul_quantize (dot_q8_1.h order), else the exact decode + dot_f32. y[t][r] depends only on
/// W[r] and x[t]: with `tok` (matmul_tokens; q8 only) and matmul_uses_mmq(w.type, n) each weight
/// row is decoded once (kernels/cpu/mmq.h) and dotted with all n tokens, the same bits.
void matmul_rows(const WRows& w, const F32Rows& x, const uint8_t* xq, int64_t n, bool q8, const F32Rows& y,
                 int64_t r0, int64_t r1, const MmqTokens* tok = nullptr);
/// matmul_rows with q8 activations and the path named, whatever n: `mmq` = the multi-token kernel
/// (needs `tok`; false when the type has none on this CPU, nothing written), else the per-token
/// kernels. Same bits either way. For the benchmark that measures mmq_min_tokens' crossovers.
bool matmul_rows_q8_path(const WRows& w, const uint8_t* xq, int64_t n, const F32Rows& y, int64_t r0, int64_t r1,
                         const MmqTokens* tok, bool mmq);

// ---- embed_rows.cpp ------------------------------------------------------------------------
/// out.row(t) = decoded row ids[t] of w if vocab0 <= ids[t] < vocab1, else +0, for t in [t0, t1).
void embed_rows(const WRows& w, const int32_t* ids, int64_t vocab0, int64_t vocab1, const F32Rows& out,
                int64_t t0, int64_t t1);
/// out.row(t) = all.row((ids[t] / rows_per_rank) * n + t) (dim elements), t in [t0, t1).
void owner_rows(const F32Rows& all, const int32_t* ids, int64_t rows_per_rank, int64_t n, int64_t dim,
                const F32Rows& out, int64_t t0, int64_t t1);

// ---- hc_expand.cpp -------------------------------------------------------------------------
/// x.row(t)[j*dim + d] = e.row(t)[d] for j < hc.
void hc_expand(const F32Rows& e, int64_t dim, int hc, const F32Rows& x, int64_t t0, int64_t t1);

// ---- rmsnorm.cpp ---------------------------------------------------------------------------
/// y = w * (x * r), r = 1 / sqrt(ss / dim + eps), ss = dot_f32(x, x, dim) (the 32-lane FMA order of
/// dot_f32, so a GPU warp computes the same bits; w null: no weight). y may alias x.
void rmsnorm_row(const float* x, const float* w, int64_t dim, float eps, float* y);

// ---- hc_pre.cpp (mHC: REF Block.hc_pre, kernel.py hc_split_sinkhorn) -----------------------
/// Per-token mixing coefficients: pre[hc], post[hc], comb[hc*hc] (comb[j*hc + k] = weight of
/// source copy j into destination copy k), stored contiguously as one mix row [(2+hc)*hc].
struct HcMix {
  std::vector<float> pre, post, comb;
};
/// pre[j] = sigmoid(m[j]*scale[0] + base[j]) + eps; post[j] = 2*sigmoid(m[hc+j]*scale[1] + base[hc+j]);
/// comb = row-softmax(m[2hc..]*scale[2] + base[2hc..]) + eps (max, then exp and sum ascending),
/// divided by (column sums + eps), then (iters-1) times by (row sums + eps), then (column sums + eps);
/// every sum ascending.
HcMix hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int hc, int iters, float eps);
/// hc_split_sinkhorn into a packed mix row [pre hc | post hc | comb hc*hc] (no allocation).
void hc_split_sinkhorn_row(const float* mixes, const float* scale, const float* base, int hc, int iters, float eps,
                           float* mix_row);
/// 1 / sqrt(ss / n + norm_eps), ss = dot_f32(xf, xf, n) (the RMS factor of hc_mixes).
float hc_norm_scale(const float* xf, int64_t n, float norm_eps);
/// mixes[r] = dot_f32(fn[r, :], xf) * (1 / sqrt(ss / n + norm_eps)), ss = dot_f32(xf, xf, n).
void hc_mixes(const float* fn, int n_rows, const float* xf, int64_t n, float norm_eps, float* mixes);
/// y[d] = sum_j pre[j] * X[j, d], j ascending from 0 (X: [hc, dim]).
void hc_weighted_sum(const float* X, const float* pre, int hc, int64_t dim, float* y);
/// One token of hc_pre: mix_row = [pre | post | comb] of hc_split_sinkhorn(hc_mixes(...)), y = hc_weighted_sum.
void hc_pre_row(const float* x, const float* fn, const float* scale, const float* base, int hc, int64_t dim,
                int iters, float hc_eps, float norm_eps, float* y, float* mix_row);
/// hc_pre_row from dots[r] = dot_f32(fn[r, :], x) computed beforehand (r < (2 + hc) * hc; e.g.
/// split over threads): the same bits as hc_pre_row.
void hc_pre_finish_row(const float* x, const float* dots, const float* scale, const float* base, int hc, int64_t dim,
                       int iters, float hc_eps, float norm_eps, float* y, float* mix_row);
/// hc_pre_finish_row with rs = hc_norm_scale(x, hc*dim, norm_eps) given (the same bits).
void hc_pre_finish_row_scaled(const float* x, const float* dots, float rs, const float* scale, const float* base,
                              int hc, int64_t dim, int iters, float hc_eps, float* y, float* mix_row);

// ---- hc_post.cpp ---------------------------------------------------------------------------
/// X'[k, d] = post[k]*f[d] + (sum_j comb[j*hc+k] * X[j, d], j ascending from 0); X [hc, dim] in place.
void hc_post(const float* f, const HcMix& mix, int hc, int64_t dim, float* X);
/// hc_post with a packed mix row [pre | post | comb]; `tmp` holds hc*dim floats.
void hc_post_row(const float* f, const float* mix_row, int hc, int64_t dim, float* X, float* tmp);
/// hc_post_row on the columns d in [d0, d1) of every copy only (each column's outputs read only
/// that column of X, so any split of [0, dim) gives hc_post_row's bits); tmp holds hc*(d1-d0).
void hc_post_cols(const float* f, const float* mix_row, int hc, int64_t dim, float* X, float* tmp, int64_t d0,
                  int64_t d1);

// ---- hc_head.cpp (REF ParallelHead.hc_head) ------------------------------------------------
/// w[j] = sigmoid(mixes[j]*scale[0] + base[j]) + eps.
void hc_head_weights(const float* mixes, const float* scale, const float* base, int hc, float eps, float* w);
/// h = sum_j w_j X_j of one token (mixes from hc_mixes over fn [hc, hc*dim]).
void hc_head_row(const float* x, const float* fn, const float* scale, const float* base, int hc, int64_t dim,
                 float hc_eps, float norm_eps, float* h);
/// hc_head_row from dots[j] = dot_f32(fn[j, :], x) (j < hc) and rs = hc_norm_scale(x, hc*dim,
/// norm_eps) computed beforehand (e.g. split over threads): the same bits as hc_head_row.
void hc_head_finish_row(const float* x, const float* dots, float rs, const float* scale, const float* base, int hc,
                        int64_t dim, float hc_eps, float* h);

// ---- rope.cpp (REF apply_rotary_emb) -------------------------------------------------------
/// Rotates the last 2*half entries of x[dim] to position pos: pair i (interleaved 2i, 2i+1) by the
/// angle float(pos) * freqs[i] (one FP32 product), cos/sin from kernels/quant/math.h; `inverse`
/// applies the conjugate.
void rope_apply(float* x, int64_t dim, const float* freqs, int half, int64_t pos, bool inverse);
/// The rotation of position pos: cs[2i] = cos, cs[2i+1] = sin of float(pos) * freqs[i] (i < half).
void rope_angles(const float* freqs, int half, int64_t pos, float* cs);
/// rope_apply with the rotation precomputed by rope_angles (bit-identical; shared by all heads).
void rope_apply_cs(float* x, int64_t dim, const float* cs, int half, bool inverse);

// ---- compressor.cpp (REF Compressor.forward) -----------------------------------------------
/// Number of compressed blocks visible to a query at position `pos` (0-based): complete ones.
inline int64_t compressed_visible(int64_t pos, int ratio) { return (pos + 1) / ratio; }
/// The compressor state of one sequence as flat arrays: cur_a, cur_g [ratio, w] (the block in
/// progress), prev_a, prev_g [ratio, d] (channels [0, d) of the previous block; overlap only).
struct CompressorView {
  int ratio = 0;
  int64_t d = 0;
  float* cur_a = nullptr;
  float* cur_g = nullptr;
  float* prev_a = nullptr;  // null unless overlap (ratio 4)
  float* prev_g = nullptr;
  bool overlap() const { return prev_a != nullptr; }
  int64_t width() const { return overlap() ? 2 * d : d; }
};
/// Feeds token `pos` (the tokens before it were fed) with projections a[w] and raw gate g[w];
/// ape [ratio, w] (may be unaligned: read by memcpy) is added to g by pos % ratio. When pos completes block b = pos / ratio, writes
/// the pooled block into out[d] and returns true: per channel, the candidates (overlap: previous
/// block's channel ch (score -inf when b == 0), then the current block's channel d+ch; else the
/// block's channel ch), softmax (max, exp, sum ascending), out = sum a_i * (e_i / den) ascending.
bool compressor_push(const CompressorView& s, int64_t pos, const float* a, const float* g, const float* ape,
                     float* out);
/// compressor_push in three steps, for a split over channels (the same bits):
/// compressor_store feeds token pos into the block in progress and returns whether it completes
/// its block; compressor_pool then writes the pooled channels [ch0, ch1) of out[d] (each channel
/// independent of the others, so any split of [0, d) gives compressor_push's values);
/// compressor_shift, after every channel is pooled, keeps the block for the next one (overlap).
bool compressor_store(const CompressorView& s, int64_t pos, const float* a, const float* g, const float* ape);
void compressor_pool(const CompressorView& s, int64_t pos, float* out, int64_t ch0, int64_t ch1);
void compressor_shift(const CompressorView& s);

// ---- indexer_scores.cpp (REF Indexer.forward) ----------------------------------------------
/// score[j] = sum_h (h ascending, from 0) relu(dot_f32(q_h, keys_j)) * w[h] for j < nvis.
void indexer_scores(const float* q, const float* w, int64_t H, int64_t D, const float* keys, int64_t nvis,
                    float* score);

// ---- ordered_sum.cpp -----------------------------------------------------------------------
/// dst[i] = ((src[0*m + i] + src[1*m + i]) + ...) + src[(P-1)*m + i] for i in [i0, i1).
void ordered_sum(const float* src, int64_t parts, int64_t m, float* dst, int64_t i0, int64_t i1);

// ---- topk.cpp ------------------------------------------------------------------------------
/// Indices of the k largest scores[0..n), descending; ties to the lower index; NaN after every
/// number. Returns min(k, n) indices.
std::vector<int32_t> topk_desc(const float* scores, int64_t n, int64_t k);
/// topk_desc into out[min(k, n)] with scratch idx[n] (no allocation); returns min(k, n).
int64_t topk_desc_into(const float* scores, int64_t n, int64_t k, int32_t* out, int32_t* idx);

// ---- sparse_attention.cpp ------------------------------------------------------------------
/// o = sum_i p_i kv[i] with p = softmax over {sink, s_i = dot_f32(q, kv_i) * scale}: max over
/// sink and s (ascending), e_i = exp(s_i - max), den = exp(sink - max) + sum e_i (ascending),
/// o[d] = sum_i (e_i / den) * kv_i[d] (ascending i, from 0). `s` is scratch [n].
void attend_with_sink(const float* q, const float* const* kv, int64_t n, int64_t dim, float scale, float sink,
                      float* o, float* s);

// ---- router.cpp (REF Gate.forward) ---------------------------------------------------------
/// sqrt(softplus(x)), softplus(x) = log1p(exp(x)) (x for x > 20, as torch's threshold).
float sqrt_softplus(float x);
/// One token's routing: experts in selection order and their combine weights.
struct Routing {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};
/// Routes one token (see Device::router): hash ids when `hash_ids` non-null, else the top-k of
/// s + bias; w = s[e] / (sum of selected s in slot order) * route_scale when `normalize`.
Routing route_token(const float* logits, int n_expert, int k, const float* bias, const int32_t* hash_ids,
                    bool normalize, float route_scale);
/// route_token into ids[k], weights[k] with scratch [2 * n_expert] floats and iscratch
/// [n_expert] (no allocation).
void route_token_into(const float* logits, int n_expert, int k, const float* bias, const int32_t* hash_ids,
                      bool normalize, float route_scale, int32_t* ids, float* weights, float* scratch,
                      int32_t* iscratch);
/// route_token_into in two steps, for a split over experts (the same bits): route_scores writes
/// s[e] = sqrt_softplus(logits[e]) into scratch[e] and s[e] + bias[e] (or s[e]) into
/// scratch[n_expert + e] for e in [e0, e1); route_select, once all n_expert are written, picks and
/// weighs the k experts as route_token_into.
void route_scores(const float* logits, int n_expert, const float* bias, float* scratch, int64_t e0, int64_t e1);
void route_select(const float* scratch, int n_expert, int k, const int32_t* hash_ids, bool normalize,
                  float route_scale, int32_t* ids, float* weights, int32_t* idx);

// ---- swiglu.cpp ----------------------------------------------------------------------------
/// Clamped SwiGLU in place: g = min(g, limit); u = clamp(u, -limit, limit); g = silu(g) * u
/// (silu(x) = x / (1 + exp(-x))); limit <= 0 disables both clamps.
void swiglu_clamped(float* g, const float* u, int64_t n, float limit);

}  // namespace ds4::cpu

namespace ds4::cpu {

// ---- window_store.cpp ----------------------------------------------------------------------
/// ring.row(p % win) = kv.row(p - pos0) (D floats) for p in [max(pos0, pos0 + n - win), pos0 + n).
void window_store(const F32Rows& kv, int64_t n, int64_t D, int64_t pos0, const F32Rows& ring, int64_t win);

// ---- act_qdq.cpp (REF kernel.py act_quant / fp4_act_quant, model.py rotate_activation) ---------
/// Rows [t0, t1) of x, each `heads` heads of D elements, in place: Fp8 (hadamard_fp4 false): FP8
/// E4M3 QDQ of elements [0, len) of each head in blocks of `block`; hadamard_fp4: the normalized
/// Hadamard transform of the head (len == D, a power of two), then FP4 E2M1 QDQ in blocks of `block`.
void act_qdq_rows(const F32Rows& x, int64_t heads, int64_t D, bool hadamard_fp4, int64_t len, int64_t block,
                  int64_t t0, int64_t t1);

// ---- copy.cpp / add.cpp / scale.cpp / fill.cpp (element-wise; rows [t0, t1) of `cols`) -------
/// dst.row(t)[i] = src.row(t)[i] as raw 4-byte elements (F32 or I32).
void copy_rows(const F32Rows& src, const F32Rows& dst, int64_t cols, int64_t t0, int64_t t1);
/// dst.row(t)[i] = dst.row(t)[i] + src.row(t)[i].
void add_rows(const F32Rows& dst, const F32Rows& src, int64_t cols, int64_t t0, int64_t t1);
/// x.row(t)[i] = x.row(t)[i] * factor.
void scale_rows(const F32Rows& x, float factor, int64_t cols, int64_t t0, int64_t t1);
/// x.row(t)[i] = value.
void fill_rows(const F32Rows& x, float value, int64_t cols, int64_t t0, int64_t t1);

// ---- moe_experts.cpp / moe_combine.cpp -----------------------------------------------------
/// The slots t*K + k with ids.row(t)[k] == expert, ascending (the stable sort of tokens by expert).
void moe_slots_of(const I32Rows& ids, int64_t n, int64_t K, int32_t expert, std::vector<int64_t>* slots);
/// out[d] = ((0 + slot_{k1}[d]) + slot_{k2}[d]) + ... over the K slots of one token in ascending
/// expert id (equal ids in slot order); slots.row(k) is slot k of the token.
void moe_combine_row(const F32Rows& slots, const int32_t* ids, int64_t K, int64_t dim, float* out);

}  // namespace ds4::cpu
