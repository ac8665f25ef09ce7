// placement/quant_mix.cpp — built-in quant mixes and the tensor list with byte sizes.
#include "placement/quant_mix.h"

#include "kernels/quant/ggml_type.h"

namespace ds4::placement {

namespace {

constexpr uint32_t id(GgmlType t) { return static_cast<uint32_t>(t); }

// Non-routed tensors as in antirez's ds4-q2 file (dsv4-architecture.md §6).
std::map<TensorClass, uint32_t> ds4_dense_types() {
  return {
      {TensorClass::AttnProj, id(GgmlType::Q8_0)},    {TensorClass::SharedExpert, id(GgmlType::Q8_0)},
      {TensorClass::Output, id(GgmlType::Q8_0)},      {TensorClass::Embedding, id(GgmlType::F16)},
      {TensorClass::Router, id(GgmlType::F16)},       {TensorClass::Indexer, id(GgmlType::F16)},
      {TensorClass::Compressor, id(GgmlType::F16)},   {TensorClass::HyperConn, id(GgmlType::F16)},
      {TensorClass::SmallF32, id(GgmlType::F32)},     {TensorClass::Tid2Eid, id(GgmlType::I32)},
  };
}

QuantMix make_mix(std::string name, std::string desc, GgmlType gate_up, GgmlType down) {
  QuantMix m;
  m.name = std::move(name);
  m.description = std::move(desc);
  m.type = ds4_dense_types();
  m.type[TensorClass::ExpertGateUp] = id(gate_up);
  m.type[TensorClass::ExpertDown] = id(down);
  return m;
}

}  // namespace

uint32_t QuantMix::type_for(TensorClass cls, int layer) const {
  if (cls == TensorClass::ExpertGateUp && layer >= 0 && size_t(layer) < gate_up_by_layer.size())
    return gate_up_by_layer[size_t(layer)];
  if (cls == TensorClass::ExpertDown && layer >= 0 && size_t(layer) < down_by_layer.size())
    return down_by_layer[size_t(layer)];
  if (cls == TensorClass::ExpertDown && layer >= 0 && layer < down_override_layers)
    return down_override_type;
  auto it = type.find(cls);
  DS4_CHECK(it != type.end());
  return it->second;
}

std::vector<std::string> quant_mix_names() { return {"ds4-q2", "iq1_m", "mxfp4", "q4_k"}; }

Result<QuantMix> quant_mix_by_name(const std::string& name) {
  if (name == "ds4-q2")
    return make_mix(name, "IQ2_XXS gate/up, Q2_K down, Q8_0 attention/shared/output, F16 embed/router/indexer/compressor/HC",
                    GgmlType::IQ2_XXS, GgmlType::Q2_K);
  if (name == "iq1_m") {
    QuantMix m = make_mix(name, "IQ1_M gate/up, down Q2_K on layers 0-5 and IQ1_M after, rest as ds4-q2",
                          GgmlType::IQ1_M, GgmlType::IQ1_M);
    m.down_override_layers = 6;
    m.down_override_type = id(GgmlType::Q2_K);
    return m;
  }
  if (name == "mxfp4")
    return make_mix(name, "MXFP4 routed experts (official FP4 repacked), rest as ds4-q2", GgmlType::MXFP4,
                    GgmlType::MXFP4);
  if (name == "q4_k")
    return make_mix(name, "Q4_K routed experts, rest as ds4-q2", GgmlType::Q4_K, GgmlType::Q4_K);
  std::string known;
  for (const auto& n : quant_mix_names()) known += (known.empty() ? "" : ", ") + n;
  return Error{"unknown quant mix '" + name + "' (known: " + known + ")"};
}

int64_t ModelSizes::dense_bytes_per_rank(int ranks) const {
  DS4_CHECK(ranks >= 1);
  int64_t b = global_repl + (global_split + ranks - 1) / ranks;
  for (size_t l = 0; l < layer_dense_split.size(); ++l)
    b += layer_dense_repl[l] + (layer_dense_split[l] + ranks - 1) / ranks;
  return b;
}

int64_t ModelSizes::layer_read_bytes_per_rank(int l, int ranks) const {
  DS4_CHECK(ranks >= 1 && l >= 0 && size_t(l) < layer_dense_split.size());
  return layer_dense_repl[size_t(l)] + (layer_dense_split[size_t(l)] + ranks - 1) / ranks;
}

void account_tensor(ModelSizes& out, TensorSpec t, int n_experts) {
  int64_t elems = 1;
  for (int64_t v : t.ne) elems *= v;
  const bool routed = (t.cls == TensorClass::ExpertGateUp || t.cls == TensorClass::ExpertDown);
  out.total_bytes += t.bytes;
  out.tensor_count_by_type[t.type] += 1;
  out.bytes_by_type[t.type] += t.bytes;
  if (routed) {
    DS4_CHECK(t.layer >= 0 && size_t(t.layer) < out.expert_bytes.size() && n_experts > 0);
    out.routed_bytes += t.bytes;
    out.expert_bytes[size_t(t.layer)] += t.bytes / n_experts;
  } else if (t.layer >= 0) {
    DS4_CHECK(size_t(t.layer) < out.layer_dense_split.size());
    (t.tp_split ? out.layer_dense_split : out.layer_dense_repl)[size_t(t.layer)] += t.bytes;
    if (t.ne.size() >= 2 && t.cls != TensorClass::Tid2Eid) out.layer_dense_params[size_t(t.layer)] += elems;
  } else {
    (t.tp_split ? out.global_split : out.global_repl) += t.bytes;
    if (t.cls == TensorClass::Output) {
      out.head_read_bytes += t.bytes;
      out.head_params += elems;
    }
  }
  out.tensors.push_back(std::move(t));
}

Result<ModelSizes> compute_model_sizes(const ModelShape& s, const QuantMix& mix) {
  ModelSizes out;
  const int L = s.n_layers;
  out.expert_bytes.assign(size_t(L), 0);
  out.layer_dense_split.assign(size_t(L), 0);
  out.layer_dense_repl.assign(size_t(L), 0);
  out.layer_dense_params.assign(size_t(L), 0);

  // add(name, class, layer, ggml ne, tp_split): ne[0] is the input (innermost) dimension.
  auto add = [&](const std::string& name, TensorClass cls, int layer, std::vector<int64_t> ne,
                 bool tp_split) -> Result<void> {
    uint32_t t = (cls == TensorClass::SmallF32) ? id(GgmlType::F32) : mix.type_for(cls, layer);
    const GgmlTypeGeometry* g = ggml_type_geometry(t);
    DS4_CHECK(g != nullptr);
    if (ne[0] % g->block_elems != 0)
      return Error{"quant mix '" + mix.name + "': tensor '" + name + "': row length " +
                   std::to_string(ne[0]) + " is not a multiple of the " + std::string(g->name) +
                   " block (" + std::to_string(g->block_elems) + ")"};
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    const int64_t bytes = rows * (ne[0] / g->block_elems) * g->block_bytes;
    const bool per_token = !(cls == TensorClass::Embedding || cls == TensorClass::Tid2Eid);
    account_tensor(out, {name, cls, layer, ne, t, bytes, tp_split, per_token}, s.n_experts);
    return ok();
  };

  const int64_t D = s.dim, F = s.moe_inter, E = s.n_experts, H = s.n_heads;
  const int64_t hc_in = int64_t(s.hc_mult) * D;  // flattened mHC state: 4 x 4096
  const int64_t hc_out = int64_t(s.hc_mult) * (2 + s.hc_mult);  // 24 mixing values
  DS4_TRY_VOID(add("token_embd.weight", TensorClass::Embedding, -1, {D, s.vocab}, true));
  for (int l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const int r = s.compress_ratios[size_t(l)];
    using C = TensorClass;
    DS4_TRY_VOID(add(p + "attn_norm.weight", C::SmallF32, l, {D}, false));
    DS4_TRY_VOID(add(p + "ffn_norm.weight", C::SmallF32, l, {D}, false));
    for (const char* sub : {"attn", "ffn"}) {
      DS4_TRY_VOID(add(p + "hc_" + sub + "_fn.weight", C::HyperConn, l, {hc_in, hc_out}, false));
      DS4_TRY_VOID(add(p + "hc_" + sub + "_base.weight", C::SmallF32, l, {hc_out}, false));
      DS4_TRY_VOID(add(p + "hc_" + sub + "_scale.weight", C::SmallF32, l, {3}, false));
    }
    DS4_TRY_VOID(add(p + "attn_sinks.weight", C::SmallF32, l, {H}, false));
    DS4_TRY_VOID(add(p + "attn_q_a.weight", C::AttnProj, l, {D, s.q_lora_rank}, false));
    DS4_TRY_VOID(add(p + "attn_q_a_norm.weight", C::SmallF32, l, {s.q_lora_rank}, false));
    DS4_TRY_VOID(add(p + "attn_q_b.weight", C::AttnProj, l, {s.q_lora_rank, H * s.head_dim}, true));
    DS4_TRY_VOID(add(p + "attn_kv.weight", C::AttnProj, l, {D, s.head_dim}, false));
    DS4_TRY_VOID(add(p + "attn_kv_a_norm.weight", C::SmallF32, l, {s.head_dim}, false));
    DS4_TRY_VOID(add(p + "attn_output_a.weight", C::AttnProj, l,
                     {H / s.o_groups * s.head_dim, s.o_groups * s.o_lora_rank}, true));
    DS4_TRY_VOID(add(p + "attn_output_b.weight", C::AttnProj, l, {s.o_groups * s.o_lora_rank, D}, true));
    if (r > 0) {
      const int64_t c = (r == 4) ? 2 : 1;  // overlapping compressor on ratio-4 layers
      DS4_TRY_VOID(add(p + "attn_compressor_kv.weight", C::Compressor, l, {D, c * s.head_dim}, false));
      DS4_TRY_VOID(add(p + "attn_compressor_gate.weight", C::Compressor, l, {D, c * s.head_dim}, false));
      DS4_TRY_VOID(add(p + "attn_compressor_ape.weight", C::Compressor, l, {c * s.head_dim, r}, false));
      DS4_TRY_VOID(add(p + "attn_compressor_norm.weight", C::SmallF32, l, {s.head_dim}, false));
    }
    if (r == 4) {
      const int64_t ih = s.index_n_heads, id_ = s.index_head_dim;
      DS4_TRY_VOID(add(p + "indexer.attn_q_b.weight", C::Indexer, l, {s.q_lora_rank, ih * id_}, true));
      DS4_TRY_VOID(add(p + "indexer.proj.weight", C::Indexer, l, {D, ih}, true));
      DS4_TRY_VOID(add(p + "indexer_compressor_kv.weight", C::Compressor, l, {D, 2 * id_}, false));
      DS4_TRY_VOID(add(p + "indexer_compressor_gate.weight", C::Compressor, l, {D, 2 * id_}, false));
      DS4_TRY_VOID(add(p + "indexer_compressor_ape.weight", C::Compressor, l, {2 * id_, 4}, false));
      DS4_TRY_VOID(add(p + "indexer_compressor_norm.weight", C::SmallF32, l, {id_}, false));
    }
    DS4_TRY_VOID(add(p + "ffn_gate_inp.weight", C::Router, l, {D, E}, false));
    if (l < s.n_hash_layers)
      DS4_TRY_VOID(add(p + "ffn_gate_tid2eid.weight", C::Tid2Eid, l, {s.top_k, s.vocab}, false));
    else
      DS4_TRY_VOID(add(p + "exp_probs_b.bias", C::SmallF32, l, {E}, false));
    DS4_TRY_VOID(add(p + "ffn_gate_exps.weight", C::ExpertGateUp, l, {D, F, E}, false));
    DS4_TRY_VOID(add(p + "ffn_up_exps.weight", C::ExpertGateUp, l, {D, F, E}, false));
    DS4_TRY_VOID(add(p + "ffn_down_exps.weight", C::ExpertDown, l, {F, D, E}, false));
    const int64_t sf = F * s.n_shared_experts;
    if (sf > 0) {
      DS4_TRY_VOID(add(p + "ffn_gate_shexp.weight", C::SharedExpert, l, {D, sf}, true));
      DS4_TRY_VOID(add(p + "ffn_up_shexp.weight", C::SharedExpert, l, {D, sf}, true));
      DS4_TRY_VOID(add(p + "ffn_down_shexp.weight", C::SharedExpert, l, {sf, D}, true));
    }
  }
  DS4_TRY_VOID(add("output_norm.weight", TensorClass::SmallF32, -1, {D}, false));
  DS4_TRY_VOID(add("output_hc_fn.weight", TensorClass::HyperConn, -1, {hc_in, s.hc_mult}, false));
  DS4_TRY_VOID(add("output_hc_base.weight", TensorClass::SmallF32, -1, {s.hc_mult}, false));
  DS4_TRY_VOID(add("output_hc_scale.weight", TensorClass::SmallF32, -1, {1}, false));
  DS4_TRY_VOID(add("output.weight", TensorClass::Output, -1, {D, s.vocab}, true));
  return out;
}

int64_t sequence_state_bytes(const ModelShape& s, int64_t ctx, int kv_elem_bytes) {
  DS4_CHECK(ctx >= 0 && kv_elem_bytes > 0);
  int64_t b = 0;
  for (int r : s.compress_ratios) {
    b += int64_t(s.window) * s.head_dim * kv_elem_bytes;  // raw window ring
    if (r == 4) {
      const int64_t n = (ctx + 3) / 4;
      b += n * s.head_dim * kv_elem_bytes + n * s.index_head_dim * kv_elem_bytes;
      // running compressor a and g buffers, FP32: main [2r, 2d], indexer [2r, 2*index_head_dim]
      b += 2 * (int64_t(2 * r) * (2 * s.head_dim) * 4 + int64_t(2 * r) * (2 * s.index_head_dim) * 4);
    } else if (r == 128) {
      b += (ctx + 127) / 128 * s.head_dim * kv_elem_bytes;
      b += int64_t(r) * s.head_dim * 4 * 2;  // running a/g buffers [r, d] x 2, FP32
    }
  }
  return b;
}

}  // namespace ds4::placement
