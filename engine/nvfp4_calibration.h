// engine/nvfp4_calibration.h — calibrated `input_scale` of NVFP4 routed experts
// (`convert --to nvfp4 --prompts F`): per-expert maxima of the activations each routed-expert
// matrix reads, recorded over prompts through the engine's activation hook
// (ForwardTrace::moe_input), turned into ModelOpt's per-tensor activation scale.
//
// Convention (NVIDIA ModelOpt, the producer of the NVFP4 checkpoints this layout copies):
// input_scale = amax / (6 * 448) in FP32, 6 = the largest E2M1 magnitude (the input quantizer's
// maxbound) and 448 = the largest E4M3 one (NVFP4QTensor.get_activation_scaling_factor,
// modelopt/torch/quantization/qtensor/nvfp4_tensor.py: `amax.float() / (quantizer.maxbound * 448.0)`);
// amax = max |x| the quantizer saw during calibration. Experts no calibration token reached get the
// largest amax of the same projection's calibrated experts in their layer (ModelOpt
// modelopt/torch/export/layer_utils.py set_expert_quantizer_amax: "max from existing quantizers").
// Which activations: w1 and w3 read the MoE sublayer input x (the same rows, hence one amax for the
// pair, as ModelOpt's fused w1/w3 export requires); w2 reads h = silu(min(w1 x, L)) * clamp(w3 x,
// +-L) * route_weight (REF: the routing weight is applied before w2; L = swiglu_clamp_exp of the
// layer, no clamp when L <= 0; ../shared/reference/dsv4-architecture.md §2.5). x is the engine's
// FP32 activation (run with FP32 activations for calibration); w1 x and w3 x are recomputed on the
// host from the decoded FP4 weights with double accumulation, rounded to FP32, then the SwiGLU in FP32.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "engine/model_config.h"
#include "engine/prompt_runner.h"
#include "gguf/safetensors.h"

namespace ds4 {

/// ModelOpt's NVFP4 activation scale of a calibrated amax: amax / (6 * 448) in FP32.
inline float nvfp4_input_scale(float amax) { return amax / (6.0f * 448.0f); }

/// Per (layer, expert) activation maxima of the routed experts' inputs.
class ExpertInputMaxima {
 public:
  /// Maxima for the main layers of `c`, recomputing w2's input from the DeepSeek FP4 experts of
  /// `ck` (`layers.L.ffn.experts.E.w1|w3.weight` I8 [ff, dim/2] + `.scale` F8_E8M0 [ff, dim/32],
  /// the only source `convert --to nvfp4` casts; `ck` must outlive this object). `threads` 0 = all
  /// hardware threads. Errors: a missing expert tensor or one of another dtype or shape.
  static Result<ExpertInputMaxima> create(const ModelConfig& c, const gguf::SafetensorsCheckpoint& ck, int threads = 0);

  /// Folds one MoE call (ForwardTrace::moe_input's arguments: x [n, dim], ids and weights [n, K]):
  /// for every slot (t, k) routed to e = ids[t, k]: amax_in(l, e) = max(.., max_i |x[t, i]|) and
  /// amax_mid(l, e) = max(.., max_j |h_j|), h as in the file comment with route_weight =
  /// weights[t, k]. Thread-safe for calls of distinct layers only (the engine calls it in order).
  void add(int layer, int64_t n, std::span<const float> x, std::span<const int32_t> ids, std::span<const float> weights);

  /// max |x| over the tokens routed to expert e of layer l (the input of w1 and w3); -1 when none.
  float amax_in(int l, int e) const { return in_[size_t(l) * size_t(E_) + size_t(e)]; }
  /// max |h| over those tokens (the input of w2); -1 when none.
  float amax_mid(int l, int e) const { return mid_[size_t(l) * size_t(E_) + size_t(e)]; }
  /// Slots routed to expert e of layer l so far.
  int64_t routed(int l, int e) const { return count_[size_t(l) * size_t(E_) + size_t(e)]; }

  /// input_scale per official expert-matrix name (`layers.L.ffn.experts.E.w1` / `.w2` / `.w3`, no
  /// suffix), with the fallback for unreached experts; `filled` = matrices that took the fallback.
  /// Errors: a layer no token reached, or an amax of 0 (ModelOpt requires a positive scale).
  Result<std::map<std::string, float>> input_scales(int* filled = nullptr) const;

 private:
  ExpertInputMaxima() = default;
  int L_ = 0, E_ = 0, K_ = 0, threads_ = 1;
  int64_t dim_ = 0, ff_ = 0;
  std::vector<float> limit_;
  // Per layer x expert: w1 / w3 nibbles and E8M0 scales.
  std::vector<const gguf::StTensor*> w1_, w1s_, w3_, w3s_;
  std::vector<float> in_, mid_;                     // [L * E], -1 = none yet
  std::vector<int64_t> count_;
};

/// Runs `prompts` through `session` (run_prompts with `o`; the session's model is the one `maxima`
/// describes) with the activation hook folding every MoE call into `maxima`. `stats` (optional)
/// gets the run's figures. Errors: run_prompts'.
Result<void> calibrate_expert_inputs(Session& session, std::span<const std::vector<int32_t>> prompts,
                                     const PromptRunOptions& o, ExpertInputMaxima& maxima, PromptRunStats* stats = nullptr);

}  // namespace ds4
