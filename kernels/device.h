// kernels/device.h — the backend-neutral device API the engine calls (DESIGN.md "Folders").
//
// A Device owns its worker threads (CPU) or streams (CUDA, later) and launches ops over buffers
// it allocated. On the CPU backend a buffer is host memory, so engine code may also pass plain
// host pointers; the CUDA backend (later issue) will implement the same launches on device
// buffers. Every op has a fixed reduction order that does not depend on the thread count
// (DESIGN.md "Numerics contract"): each output element is produced by exactly one worker.
//
// Shapes: a weight matrix is a ggml tensor [in, out] (ne[0] = in = the contiguous row length,
// ne[1] = out rows), i.e. torch [out, in]. Activations are token-major float arrays [n, in].
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/quant/ggml_type.h"

namespace ds4::dev {

/// A weight matrix stored in a ggml type: `out` rows of `in` elements, `row_bytes` apart.
/// `data` stays owned by the caller (mmap, expert store, ...).
struct WeightMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t in = 0;           // ne[0]: elements per row
  int64_t out = 0;          // ne[1]: number of rows
  uint64_t row_bytes = 0;   // bytes of one row (in / block_elems * block_bytes)
  /// Row `r` of the matrix.
  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
};

/// How activations enter a matrix product.
/// F32: the weight row is decoded exactly to FP32 and dotted with FP32 activations.
/// Q8_1: activations are quantized to Q8_1 blocks (kernels/cpu/quant_ref.h quantize_row_q8_1) and
/// dotted with the weight's blocks by vec_dot_q8_1 (integer sub-block sums). Weight types without
/// a Q8_1 dot (F32, F16, BF16) fall back to the F32 path; see `uses_q8_1`.
/// FP8_QDQ: DeepSeek's QAT simulation (`--activations fp8`): for weights stored as FP8/FP4 in the
/// official checkpoint (F8_E4M3_R128, MXFP4, NVFP4_S2) the activations are first FP8 E4M3
/// quantize-dequantized in 1x128 blocks (kernels/quant/act_qdq.h qdq_fp8_e4m3, REF linear() ->
/// act_quant), then the F32 path; other weights take the F32 path unchanged.
enum class ActFormat { F32, Q8_1, FP8_QDQ };

/// True for the weight types whose activations FP8_QDQ quantizes (FP8/FP4 checkpoint encodings).
bool is_fp8_fp4_weight(GgmlType type);

/// Device memory. On the CPU backend `data()` is a host pointer.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual uint64_t bytes() const = 0;
};

/// The op launches. All float math is FP32; reductions are sequential per output element in the
/// order stated on each op (8 interleaved partial sums for dot products, combined pairwise).
/// Launches from several threads are serialized (each one uses all workers); an op must not be
/// launched from inside a parallel_for body.
class Device {
 public:
  virtual ~Device() = default;
  /// Human-readable name ("cpu (4 threads)").
  virtual const char* name() const = 0;
  /// Number of worker threads.
  virtual int threads() const = 0;
  /// Allocates `bytes` of device memory (zeroed).
  virtual std::unique_ptr<Buffer> alloc(uint64_t bytes) = 0;

  /// y[t, r] = sum_i W[r, i] * x[t, i] for t < n, r < w.out. x: [n, w.in], y: [n, w.out].
  /// Parallel over rows r; the value of each y[t, r] does not depend on n or the thread count.
  virtual void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y,
                      ActFormat act) = 0;
  /// Like matmul, for several matrices sharing the same input (e.g. gate and up), one launch.
  virtual void matmul2(const WeightMatrix& w0, float* y0, const WeightMatrix& w1, float* y1,
                       const float* x, int64_t n, ActFormat act) = 0;
  /// y[t, :] = weight * x[t, :] * rsqrt(mean(x[t,:]^2) + eps) for t < n rows of `dim`;
  /// `weight` may be null (no weight). y may alias x.
  virtual void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                       float* y) = 0;
  /// Runs fn(i) for i in [0, n) on the workers (any order; fn must write disjoint outputs).
  virtual void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) = 0;
  /// Weight bytes read by matmul/matmul2 since the device was made: each launch counts every
  /// matrix once (out * row_bytes), whatever the token count n (a row is read once from memory
  /// and reused from cache for all n tokens). The engine's roofline counter (`bench`).
  virtual uint64_t weight_bytes_read() const = 0;
};

/// True when matmul with `act` = Q8_1 really quantizes activations for weight type `type`.
bool uses_q8_1(GgmlType type);

/// Dot product of two FP32 vectors of length n in the fixed order: 8 interleaved partial sums
/// (lane k takes elements i with i % 8 == k, ascending), then ((s0+s4)+(s1+s5))+((s2+s6)+(s3+s7)),
/// then the tail elements ascending.
float dot_f32(const float* a, const float* b, int64_t n);

/// CPU backend with `threads` workers (0 = hardware concurrency).
std::unique_ptr<Device> make_cpu_device(int threads);

}  // namespace ds4::dev
