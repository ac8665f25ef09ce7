// engine/model_weights.cpp — binding GGUF tensors to ModelWeights.
#include "engine/model_weights.h"

#include <string>
#include <unordered_set>

#include "engine/load_progress.h"
#include "kernels/quant/type_traits.h"

namespace ds4 {
namespace {

class Binder {
 public:
  Binder(const gguf::GgufModel& f, uint64_t* bytes, std::vector<std::vector<float>>* owned)
      : f_(f), bytes_(bytes), owned_(owned) {}
  const gguf::TensorInfo* get(const std::string& name) {
    const gguf::TensorInfo* t = f_.find(name);
    if (!t || !t->data) {
      if (err_.empty()) err_ = f_.path() + ": tensor '" + name + "': expected present with data, found " + (t ? "no data mapped" : "missing");
      return nullptr;
    }
    *bytes_ += t->nbytes;
    if (bound_.insert(t->name).second) load_progress().done += t->nbytes;
    return t;
  }
  dev::WeightMatrix mat(const std::string& name) {
    dev::WeightMatrix w;
    const gguf::TensorInfo* t = get(name);
    if (!t) return w;
    w.type = static_cast<GgmlType>(t->type);
    w.data = t->data;
    w.in = t->ne[0];
    w.out = t->ne[1];
    w.row_bytes = t->row_bytes();
    return w;
  }
  /// A float vector/matrix as FP32: the mapped bytes when stored as F32, else decoded once into
  /// a buffer owned by the weights (e.g. F16 HC tensors in public GGUFs).
  const float* f32(const std::string& name) {
    const gguf::TensorInfo* t = get(name);
    if (!t) return nullptr;
    if (static_cast<GgmlType>(t->type) == GgmlType::F32) return reinterpret_cast<const float*>(t->data);
    std::vector<float> v(static_cast<size_t>(t->nelements()));
    const quant::QuantTypeTraits* tr = quant::quant_type_traits(static_cast<GgmlType>(t->type));
    DS4_CHECK(tr != nullptr && tr->decode != nullptr);  // model_config_from_gguf checked the type
    for (int64_t r = 0; r < t->nrows(); ++r)
      for (int64_t b = 0; b < t->ne[0] / tr->block_elems; ++b)
        tr->decode(t->data + r * t->row_bytes() + b * tr->block_bytes, v.data() + r * t->ne[0] + b * tr->block_elems);
    owned_->push_back(std::move(v));
    return owned_->back().data();
  }
  const int32_t* i32(const std::string& name) {
    const gguf::TensorInfo* t = get(name);
    return t ? reinterpret_cast<const int32_t*>(t->data) : nullptr;
  }
  staging::MergedExpertTensor merged(const std::string& name) {
    staging::MergedExpertTensor m;
    const gguf::TensorInfo* t = get(name);
    if (!t) return m;
    m.type = static_cast<GgmlType>(t->type);
    m.data = t->data;
    m.in = t->ne[0];
    m.out = t->ne[1];
    m.n_expert = t->ne[2];
    m.row_bytes = t->row_bytes();
    return m;
  }
  const std::string& error() const { return err_; }
  /// Whether `name` was bound (get() found it).
  bool bound(const std::string& name) const { return bound_.count(name) != 0; }

 private:
  const gguf::GgufModel& f_;
  uint64_t* bytes_;
  std::vector<std::vector<float>>* owned_;
  std::string err_;
  std::unordered_set<std::string> bound_;
};

}  // namespace

Result<ModelWeights> bind_weights(const gguf::GgufModel& file, const ModelConfig& c) {
  ModelWeights w;
  // Progress: every tensor of the directory is to be bound (a loadable file has no others).
  uint64_t total = 0;
  for (const gguf::TensorInfo& t : file.tensors()) total += t.nbytes;
  load_progress().start_phase(LoadPhase::Bind, total);
  Binder b(file, &w.bytes, &w.owned);
  w.token_embd = b.mat("token_embd.weight");
  w.output = b.mat("output.weight");
  w.output_norm = b.f32("output_norm.weight");
  w.hc_head_fn = b.f32("output_hc_fn.weight");
  w.hc_head_base = b.f32("output_hc_base.weight");
  w.hc_head_scale = b.f32("output_hc_scale.weight");
  std::vector<std::array<staging::MergedExpertTensor, 3>> experts;
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights L;
    L.hc_attn_fn = b.f32(p + "hc_attn_fn.weight");
    L.hc_attn_base = b.f32(p + "hc_attn_base.weight");
    L.hc_attn_scale = b.f32(p + "hc_attn_scale.weight");
    L.hc_ffn_fn = b.f32(p + "hc_ffn_fn.weight");
    L.hc_ffn_base = b.f32(p + "hc_ffn_base.weight");
    L.hc_ffn_scale = b.f32(p + "hc_ffn_scale.weight");
    L.attn_norm = b.f32(p + "attn_norm.weight");
    L.ffn_norm = b.f32(p + "ffn_norm.weight");
    L.attn_sinks = b.f32(p + "attn_sinks.weight");
    L.q_a = b.mat(p + "attn_q_a.weight");
    L.q_a_norm = b.f32(p + "attn_q_a_norm.weight");
    L.q_b = b.mat(p + "attn_q_b.weight");
    L.kv = b.mat(p + "attn_kv.weight");
    L.kv_norm = b.f32(p + "attn_kv_a_norm.weight");
    L.out_a = b.mat(p + "attn_output_a.weight");
    L.out_b = b.mat(p + "attn_output_b.weight");
    if (c.ratio(l) > 0) {
      L.cmp_kv = b.mat(p + "attn_compressor_kv.weight");
      L.cmp_gate = b.mat(p + "attn_compressor_gate.weight");
      L.cmp_ape = b.f32(p + "attn_compressor_ape.weight");
      L.cmp_norm = b.f32(p + "attn_compressor_norm.weight");
    }
    if (c.ratio(l) == 4) {
      L.idx_q_b = b.mat(p + "indexer.attn_q_b.weight");
      L.idx_proj = b.mat(p + "indexer.proj.weight");
      L.idx_cmp_kv = b.mat(p + "indexer_compressor_kv.weight");
      L.idx_cmp_gate = b.mat(p + "indexer_compressor_gate.weight");
      L.idx_cmp_ape = b.f32(p + "indexer_compressor_ape.weight");
      L.idx_cmp_norm = b.f32(p + "indexer_compressor_norm.weight");
    }
    L.gate_inp = b.mat(p + "ffn_gate_inp.weight");
    if (l < c.n_hash_layers) {
      L.tid2eid = b.i32(p + "ffn_gate_tid2eid.weight");
      for (int64_t i = 0; L.tid2eid && i < c.vocab * c.n_expert_used; ++i)
        if (L.tid2eid[i] < 0 || L.tid2eid[i] >= c.n_expert)
          return Error{file.path() + ": tensor '" + p + "ffn_gate_tid2eid.weight': entry " + std::to_string(i) +
                       " (token " + std::to_string(i / c.n_expert_used) + "): expected an expert id 0.." +
                       std::to_string(c.n_expert - 1) + ", found " + std::to_string(L.tid2eid[i])};
    }
    else
      L.probs_bias = b.f32(p + "exp_probs_b.bias");
    L.sh_gate = b.mat(p + "ffn_gate_shexp.weight");
    L.sh_up = b.mat(p + "ffn_up_shexp.weight");
    L.sh_down = b.mat(p + "ffn_down_shexp.weight");
    L.rope = c.rope_table(l);
    experts.push_back({b.merged(p + "ffn_gate_exps.weight"), b.merged(p + "ffn_up_exps.weight"),
                       b.merged(p + "ffn_down_exps.weight")});
    w.layers.push_back(std::move(L));
  }
  if (!b.error().empty()) return Error{b.error()};
  // The tensors the model does not use (MTP blocks, model_config_from_gguf) were checked, not bound.
  for (const gguf::TensorInfo& t : file.tensors())
    if (!b.bound(t.name)) load_progress().done += t.nbytes;
  DS4_TRY(w.experts, staging::make_memory_expert_store(std::move(experts)));
  return w;
}

}  // namespace ds4
