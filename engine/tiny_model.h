// engine/tiny_model.h — `ds4-offload make-tiny`: a small random-weight model of the real
// DeepSeek-V4 architecture, written as a llama.cpp-layout GGUF (`deepseek4`).
//
// Every architecture feature is active: mHC (4 streams, Sinkhorn), sliding window, CSA (ratio 4,
// overlapping compressor + lightning indexer), HCA (ratio 128), attention sink, grouped low-rank
// output, hash routing (tid2eid) on the first n_hash_layers layers, sqrtsoftplus routing with bias
// elsewhere, clamped SwiGLU, one shared expert. Tensor names, shapes, metadata keys and key types
// follow the fixture ../shared/fixtures/dsv4-tiny/dsv4-tiny-mxfp4.gguf (README "GGUF inventory").
//
// Quant mix (public-style, as antirez/deepseek-v4-gguf's IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8 file,
// reference/dsv4-architecture.md §6): routed experts gate/up IQ2_XXS and down Q2_K (or all three
// of the --experts type); attention projections (q_a, q_b, kv, output_a, output_b), shared experts
// and `output` Q8_0; embedding, router, indexer, compressor (kv, gate, ape) and HC mixing matrices
// F16; norms, sinks, HC base/scale and the routing bias F32; tid2eid I32.
//
// Weight scales (as the fixture README and its measured statistics): dense weights N(0, 1/fan_in),
// expert and shared-expert gate/up N(0, 0.25^2) so the SwiGLU clamp (10) is reached, down
// projections N(0, (0.25/sqrt(moe_inter_dim))^2), norms 1 + N(0, 0.1^2), embedding N(0, 1),
// output N(0, (3.2/sqrt(dim))^2), HC base N(0, 0.5^2), HC scale U(0.5, 1.4), sinks N(0, 1),
// compressor APE N(0, 0.5^2), router N(0, 0.1^2), routing bias N(0, 0.07^2). Random numbers:
// std::mt19937_64 seeded per tensor with FNV-1a64(name) ^ seed, Box-Muller with the 53-bit
// uniform of sampler.h (no implementation-defined std distributions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "kernels/quant/ggml_type.h"

namespace ds4 {

/// Model hyper-parameters, with the key names of DeepSeek's reference `inference/config.json`
/// (ModelArgs) plus `context_length` and `swiglu_limit_shared`. JSON: configs/models/*.json.
struct TinyModelConfig {
  std::string name = "dsv4-tiny";
  int64_t vocab_size = 512;
  int64_t dim = 256;
  int64_t moe_inter_dim = 256;   // the fixture uses 128; 256 lets Q2_K/IQ encode ffn_down_exps rows
  int n_layers = 6;
  int n_hash_layers = 3;
  int n_heads = 8;
  int64_t head_dim = 256;
  int64_t rope_head_dim = 64;
  int64_t q_lora_rank = 128;
  int o_groups = 4;
  int64_t o_lora_rank = 128;
  int64_t window_size = 32;
  std::vector<int> compress_ratios = {0, 0, 4, 128, 4, 128, 0};  // n_layers (+ 1 MTP entry)
  int n_routed_experts = 16;
  int n_shared_experts = 1;
  int n_activated_experts = 4;
  double route_scale = 1.5;
  double swiglu_limit = 10.0;
  double swiglu_limit_shared = 0.0;  // 0 = shared expert not clamped (DeepSeek's reference)
  int index_n_heads = 16;
  int64_t index_head_dim = 128;
  int index_topk = 8;
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double compress_rope_theta = 160000.0;
  double rope_factor = 16.0;
  int64_t original_seq_len = 65536;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t context_length = 1024;

  bool operator==(const TinyModelConfig&) const = default;
};

/// Parses a config JSON (every key required, no unknown keys; types and ranges checked:
/// compress_ratios entries in {0, 4, 128} with n_layers or n_layers + 1 entries, n_hash_layers <=
/// n_layers, n_activated_experts <= n_routed_experts, n_heads * head_dim divisible by o_groups).
/// Errors name `source`, the key, the expectation and the value found.
Result<TinyModelConfig> parse_tiny_config(const std::string& json_text, const std::string& source);
/// Reads and parses a config file.
Result<TinyModelConfig> load_tiny_config(const std::string& path);

/// make-tiny options. `gate_up_type`/`down_type`: routed-expert types (IQ2_XXS / Q2_K by default).
struct TinyModelOptions {
  TinyModelConfig config;
  GgmlType gate_up_type = GgmlType::IQ2_XXS;
  GgmlType down_type = GgmlType::Q2_K;
  uint64_t seed = 1;
  int threads = 0;  // quantization threads (0 = all hardware threads); the output does not depend on it
  /// --random-blocks: every block-quantized tensor (experts, attention, shared experts, output) is
  /// written as valid random blocks of RMS 1/sqrt(ne0) (engine/random_blocks.h) instead of
  /// quantizing the random values above; F32/F16/I32 tensors keep their values. Seconds instead of
  /// hours for DeepSeek-V4-Flash's shapes; `general.description` says the file is for benchmarks.
  bool random_blocks = false;
};

/// Parses an --experts value: q8_0, q2_k, iq2_xxs, iq2_xs, iq1_s, iq1_m or mxfp4 (any case).
Result<GgmlType> parse_expert_type(const std::string& s);

/// What was written.
struct TinyModelSummary {
  int64_t n_tensors = 0;
  uint64_t file_bytes = 0;
  uint64_t n_params = 0;
};

/// Generates the model and writes it to `path`, each tensor produced while the file is written
/// (one tensor's bytes in memory at a time, plus its F32 values when quantizing). Errors: a config the quant types cannot encode
/// (e.g. ffn_down_exps ne0 = moe_inter_dim not a multiple of the Q2_K block of 256), a vocabulary
/// that cannot be built, or a write failure.
Result<TinyModelSummary> write_tiny_model(const std::string& path, const TinyModelOptions& opts);

}  // namespace ds4
