// placement/gguf_sizes.cpp — shape and sizes from GGUF metadata and tensor infos.
#include "placement/gguf_sizes.h"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string_view>

#include "kernels/quant/ggml_type.h"

namespace ds4::placement {

namespace {

/// The first of `keys` present, range-checked to 1..max (default INT32_MAX: the shape fields are
/// int, so values are refused rather than narrowed).
Result<int64_t> int_key(const gguf::Metadata& md, const std::string& file, std::initializer_list<const char*> keys,
                        int64_t max = INT32_MAX, const std::string& why = "") {
  for (const char* k : keys)
    if (md.has(k)) {
      DS4_TRY(int64_t v, md.get_int(k));
      if (v < 1 || v > max)
        return Error{file + ": key '" + k + "': expected 1.." + std::to_string(max) + why + ", found " + std::to_string(v)};
      return v;
    }
  std::string names;
  for (const char* k : keys) names += (names.empty() ? "'" : " or '") + std::string(k) + "'";
  return Error{file + ": missing metadata key " + names};
}

// Class and TP split of a per-layer tensor from its name after "blk.N.".
void classify_layer_tensor(std::string_view n, TensorClass* cls, bool* split) {
  *split = false;
  auto has = [&](std::string_view x) { return n.find(x) != std::string_view::npos; };
  if (has("_exps")) { *cls = has("down") ? TensorClass::ExpertDown : TensorClass::ExpertGateUp; return; }
  if (has("_shexp")) { *cls = TensorClass::SharedExpert; *split = true; return; }
  if (has("tid2eid")) { *cls = TensorClass::Tid2Eid; return; }
  if (has("ffn_gate_inp")) { *cls = TensorClass::Router; return; }
  if (has("compress")) { *cls = has("norm") ? TensorClass::SmallF32 : TensorClass::Compressor; return; }
  if (has("indexer")) { *cls = TensorClass::Indexer; *split = true; return; }
  if (has("hc_") && has("_fn")) { *cls = TensorClass::HyperConn; return; }
  if (has("attn_q_b") || has("attn_output_a") || has("attn_output_b")) {
    *cls = TensorClass::AttnProj; *split = true; return;
  }
  if ((has("attn_q_a") || has("attn_kv")) && !has("norm")) { *cls = TensorClass::AttnProj; return; }
  *cls = TensorClass::SmallF32;  // norms, sinks, bias, hc base/scale, anything else small
}

}  // namespace

Result<GgufPlanModel> plan_model_from_gguf(const gguf::GgufModel& m) {
  const auto& md = m.metadata();
  const std::string& file = m.path();
  DS4_TRY(std::string arch, md.get_string("general.architecture"));
  if (arch != "deepseek4")
    return Error{file + ": general.architecture: expected 'deepseek4', found '" + arch + "'"};
  GgufPlanModel out;
  ModelShape& s = out.shape;
  s.name = file;
  if (md.has("general.name")) {
    DS4_TRY(s.name, md.get_string("general.name"));  // another value type is an error, not an abort
  }
  // A layer needs at least 20 tensors: block_count is bounded by what the file holds.
  const int64_t max_layers = std::max<int64_t>(1, int64_t(m.tensors().size()) / 20);
  DS4_TRY(int64_t layers, int_key(md, file, {"deepseek4.block_count"}, max_layers,
                                  " (the file has " + std::to_string(m.tensors().size()) + " tensors, 20+ per layer)"));
  s.n_layers = int(layers);
  DS4_TRY(s.dim, int_key(md, file, {"deepseek4.embedding_length"}));
  if (md.has("deepseek4.context_length")) {
    DS4_TRY(s.max_ctx, int_key(md, file, {"deepseek4.context_length"}));
  }
  const gguf::TensorInfo* embd = m.find("token_embd.weight");
  if (md.has("deepseek4.vocab_size")) {
    DS4_TRY(s.vocab, md.get_int("deepseek4.vocab_size"));
  } else if (embd) {
    s.vocab = embd->ne[1];
  } else {
    return Error{file + ": missing 'deepseek4.vocab_size' and tensor 'token_embd.weight'"};
  }
  DS4_TRY(int64_t heads, int_key(md, file, {"deepseek4.attention.head_count"}));
  s.n_heads = int(heads);
  DS4_TRY(s.head_dim, int_key(md, file, {"deepseek4.attention.key_length"}));
  DS4_TRY(s.q_lora_rank, int_key(md, file, {"deepseek4.attention.q_lora_rank"}));
  DS4_TRY(int64_t og, int_key(md, file, {"deepseek4.attention.output_group_count"}));
  s.o_groups = int(og);
  DS4_TRY(s.o_lora_rank, int_key(md, file, {"deepseek4.attention.output_lora_rank"}));
  DS4_TRY(int64_t win, int_key(md, file, {"deepseek4.attention.sliding_window"}));
  s.window = int(win);
  DS4_TRY(int64_t ih, int_key(md, file, {"deepseek4.attention.indexer.head_count", "deepseek4.indexer.head_count"}));
  s.index_n_heads = int(ih);
  DS4_TRY(s.index_head_dim, int_key(md, file, {"deepseek4.attention.indexer.key_length", "deepseek4.indexer.key_length"}));
  for (const char* k : {"deepseek4.attention.indexer.top_k", "deepseek4.indexer.top_k"})
    if (md.has(k)) {
      DS4_TRY(int64_t v, int_key(md, file, {k}));
      if (v > 0 && v <= (int64_t(1) << 30)) s.index_topk = int(v);
      break;
    }
  DS4_TRY(int64_t ne, int_key(md, file, {"deepseek4.expert_count"}));
  s.n_experts = int(ne);
  DS4_TRY(int64_t tk, int_key(md, file, {"deepseek4.expert_used_count"}));
  s.top_k = int(tk);
  s.n_shared_experts = 1;
  if (md.has("deepseek4.expert_shared_count")) {
    DS4_TRY(int64_t v, int_key(md, file, {"deepseek4.expert_shared_count"}));
    s.n_shared_experts = int(v);
  }
  DS4_TRY(s.moe_inter, int_key(md, file, {"deepseek4.expert_feed_forward_length"}));
  s.n_hash_layers = 0;
  if (md.has("deepseek4.hash_layer_count")) {
    DS4_TRY(int64_t v, md.get_int("deepseek4.hash_layer_count"));
    if (v < 0 || v > layers)
      return Error{file + ": key 'deepseek4.hash_layer_count': expected 0.." + std::to_string(layers) + ", found " +
                   std::to_string(v)};
    s.n_hash_layers = int(v);
  }
  s.hc_mult = 4;
  if (md.has("deepseek4.hyper_connection.count")) {
    DS4_TRY(int64_t v, int_key(md, file, {"deepseek4.hyper_connection.count"}, 64));
    s.hc_mult = int(v);
  }
  DS4_TRY(auto ratios, md.get_int_array("deepseek4.attention.compress_ratios"));
  for (int64_t r : ratios) {
    if (r < 0 || r > INT32_MAX)
      return Error{file + ": key 'deepseek4.attention.compress_ratios': expected entries 0, 4 or 128, found " +
                   std::to_string(r)};
    s.compress_ratios.push_back(int(r));
  }
  if (int(s.compress_ratios.size()) > s.n_layers) s.compress_ratios.resize(size_t(s.n_layers));
  DS4_TRY_VOID(validate_model_shape(s, file));

  out.mix.name = "file";
  out.mix.description = "types as stored in " + file;
  ModelSizes& z = out.sizes;
  z.expert_bytes.assign(size_t(s.n_layers), 0);
  z.layer_dense_split.assign(size_t(s.n_layers), 0);
  z.layer_dense_repl.assign(size_t(s.n_layers), 0);
  z.layer_dense_params.assign(size_t(s.n_layers), 0);
  out.mix.gate_up_by_layer.assign(size_t(s.n_layers), 0);
  out.mix.down_by_layer.assign(size_t(s.n_layers), 0);
  for (const gguf::TensorInfo& t : m.tensors()) {
    std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + std::max(1, t.n_dims));
    TensorClass cls = TensorClass::SmallF32;
    bool split = false;
    int layer = -1;
    std::string_view name = t.name;
    if (name.rfind("blk.", 0) == 0) {
      const size_t dot = name.find('.', 4);
      const std::string num(name.substr(4, dot == std::string_view::npos ? std::string_view::npos : dot - 4));
      layer = !num.empty() && num.size() <= 9 && num.find_first_not_of("0123456789") == std::string::npos
                  ? std::atoi(num.c_str())
                  : -1;
      if (layer < 0 || dot == std::string_view::npos)
        return Error{file + ": tensor '" + t.name + "': expected blk.N.NAME with a layer number N"};
      if (layer >= s.n_layers) {  // MTP / draft blocks
        out.skipped_bytes += int64_t(t.nbytes);
        continue;
      }
      classify_layer_tensor(name.substr(dot + 1), &cls, &split);
    } else if (name.rfind("mtp.", 0) == 0) {
      out.skipped_bytes += int64_t(t.nbytes);
      continue;
    } else if (name == "token_embd.weight") {
      cls = TensorClass::Embedding; split = true;
    } else if (name == "output.weight") {
      cls = TensorClass::Output; split = true;
    } else if (name.find("_fn") != std::string_view::npos) {
      cls = TensorClass::HyperConn;
    }
    const bool routed = cls == TensorClass::ExpertGateUp || cls == TensorClass::ExpertDown;
    if (routed) {
      if (t.n_dims != 3 || t.ne[2] != s.n_experts)
        return Error{file + ": tensor '" + t.name + "': expected " + std::to_string(s.n_experts) +
                     " experts along ne[2], found shape with n_dims " + std::to_string(t.n_dims) + " and ne[2] " +
                     std::to_string(t.ne[2])};
      (cls == TensorClass::ExpertDown ? out.mix.down_by_layer : out.mix.gate_up_by_layer)[size_t(layer)] = t.type;
    } else if (!out.mix.type.count(cls)) {
      out.mix.type[cls] = t.type;
    }
    const bool per_token = !(cls == TensorClass::Embedding || cls == TensorClass::Tid2Eid);
    account_tensor(z, {t.name, cls, layer, dims, t.type, int64_t(t.nbytes), split, per_token}, s.n_experts);
  }
  for (int l = 0; l < s.n_layers; ++l)
    if (z.expert_bytes[size_t(l)] == 0 || out.mix.gate_up_by_layer[size_t(l)] == 0 || out.mix.down_by_layer[size_t(l)] == 0)
      return Error{file + ": layer " + std::to_string(l) + ": no routed expert tensors (ffn_*_exps) found"};
  // Classes absent from the file get the expert gate/up type so type_for() never fails.
  for (TensorClass c : {TensorClass::ExpertGateUp, TensorClass::ExpertDown, TensorClass::AttnProj,
                        TensorClass::SharedExpert, TensorClass::Output, TensorClass::Embedding, TensorClass::Router,
                        TensorClass::Indexer, TensorClass::Compressor, TensorClass::HyperConn, TensorClass::SmallF32,
                        TensorClass::Tid2Eid})
    if (!out.mix.type.count(c)) out.mix.type[c] = out.mix.gate_up_by_layer[0];
  return out;
}

}  // namespace ds4::placement
