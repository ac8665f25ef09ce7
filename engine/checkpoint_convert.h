// engine/checkpoint_convert.h — checkpoint conversions behind `ds4-offload convert`:
// - the lossless cast of DeepSeek's FP4 (MXFP4-like: E2M1 + E8M0 per 32) routed experts into
//   NVIDIA's ModelOpt NVFP4 layout (E2M1 + E4M3 per 16 + an FP32 per-tensor scale), the layout of
//   ../shared/fixtures/dsv4-tiny-nvfp4 (README: how the cast works);
// - an audit that compares two checkpoints tensor by tensor after decoding;
// - a llama.cpp `deepseek4` GGUF from any checkpoint the engine reads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ds4/result.h"

namespace ds4 {

/// What the NVFP4 cast did.
struct Nvfp4CastReport {
  int expert_tensors = 0;        // expert matrices cast (layers.*; mtp.* stay MXFP4)
  int copied_tensors = 0;        // tensors copied byte for byte
  uint64_t blocks = 0;           // per-32 source blocks cast
  uint64_t blocks_exact = 0;     // of those, blocks whose 32 values decode equal after the cast
  uint64_t neg_zero = 0;         // E2M1 -0 nibbles written as +0
  int max_octaves = 0;           // largest e_max - e_j met (17 is the limit)
  int calibrated = 0;            // input_scale tensors taken from the calibration map
  double seconds = 0;
};

/// Casts the DeepSeek safetensors checkpoint `src` (folder) into `out_dir` (created; must not
/// hold a checkpoint already). Per expert E of layer L: e_max = the largest E8M0 exponent over
/// w1 and w3 together (w2 on its own); weight_scale_2 = 2^(e_max - 127 - 8) (F32 scalar); each
/// per-32 scale e_j becomes two per-16 E4M3 scales 2^(e_j - e_max + 8); nibbles unchanged except
/// E2M1 -0 -> +0; input_scale (F32 scalar) = `input_scale[base]` when that map is given (keys
/// `layers.L.ffn.experts.E.wP`, every cast matrix present: engine/nvfp4_calibration.h), else 1.0
/// (a W4A16/W4A8 path ignores it); the `.scale` tensors of
/// cast experts are dropped. Every other tensor (FP8 + scales, BF16, F32, tid2eid, the whole
/// mtp.* block) is copied byte-identically, shards keep their names and tensor order, the index,
/// config.json (quantization_config: modelopt NVFP4, the FP8 block config kept under fp8_dense)
/// and hf_quant_config.json are written, other small files (tokenizer.json, ...) copied.
/// Refuses before writing anything, naming the tensor, row and block, when a block cannot be cast
/// exactly (e_max - e_j > 17, or an E8M0 0xFF scale), or when `input_scale` is given and lacks a
/// cast matrix. `progress` gets one line per shard.
Result<Nvfp4CastReport> cast_checkpoint_to_nvfp4(const std::string& src, const std::string& out_dir,
                                                 const std::function<void(const std::string&)>& progress = {},
                                                 const std::map<std::string, float>& input_scale = {});

/// Result of comparing two checkpoints.
struct AuditReport {
  int tensors = 0;            // compared (present in both)
  int identical = 0;          // every element bit-identical after decoding (-0 == +0 counted equal)
  uint64_t elements = 0, elements_exact = 0;
  std::vector<std::string> only_in_a, only_in_b;
  std::vector<std::string> differences;  // first differing element per differing tensor (up to 20)
  /// Source tensors not compared, one line per side and kind ("A: 288 input_scale tensors ..."):
  /// a safetensors folder's `.input_scale` scalars, which the bound view does not carry.
  std::vector<std::string> not_compared;
};

/// Opens `a` and `b` (GGUF files or safetensors folders, as the engine binds them: llama.cpp
/// names) and compares every tensor decoded to FP32. Errors: either cannot be opened.
Result<AuditReport> audit_checkpoints(const std::string& a, const std::string& b);

/// Options of `convert --to gguf`.
struct GgufConvertOptions {
  /// keep (copy each expert tensor's type), mxfp4 (lossless from FP4), q8_0, q2_k, iq2_xxs, iq1_m;
  /// empty = mxfp4 for a safetensors source, keep for a GGUF source.
  std::string experts;
  std::string dense = "f32";      // FP8 / BF16 dense tensors: f32 (lossless) or bf16 (checked lossless)
  int threads = 0;
};

/// Writes `src` (a safetensors folder or GGUF) as a llama.cpp `deepseek4` GGUF at `out`: the
/// metadata keys and tensor names of the bound view; main layers only (no MTP, as upstream's
/// converter variant that skips mtp.*); FP8 dense -> `dense`; experts as `experts` (see its
/// default; `progress` gets a "note: ... lossy" line per source type a GGUF source changes; MXFP4 bytes
/// copied when the source is FP4; otherwise decoded and quantized with kernels/cpu quantize_row,
/// and for an MXFP4 target every row decoded back: rows that differ are reported through
/// `progress` as lossy). Streaming: a folder is bound lazily (open_official_checkpoint_lazy), a
/// GGUF mapped, each output tensor produced into the writer's one buffer while the file is written
/// and the source pages it read dropped after it, so peak RSS is about the largest tensor (with
/// its source), not the model. `progress` gets a line per layer with the bytes written so far
/// ("layer L / N: done / total MiB written (P %, R MiB/s)"). All or nothing: a failure leaves no file.
Result<uint64_t> convert_to_gguf(const std::string& src, const std::string& out, const GgufConvertOptions& o,
                                 const std::function<void(const std::string&)>& progress = {});

}  // namespace ds4
