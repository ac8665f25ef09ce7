// placement/model_shape.cpp — built-in DeepSeek-V4-Flash shape and the model config JSON loader.
#include <algorithm>
#include "placement/model_shape.h"

#include "ds4/file_io.h"
#include "placement/json_text.h"

#include <fstream>
#include <initializer_list>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ds4::placement {

ModelShape dsv4_flash_shape() {
  // Values: dsv4-architecture.md §1 (HF config.json of deepseek-ai/DeepSeek-V4-Flash).
  ModelShape s;
  s.name = "DeepSeek-V4-Flash";
  s.n_layers = 43;
  s.dim = 4096;
  s.vocab = 129280;
  s.max_ctx = 1048576;
  s.n_heads = 64;
  s.head_dim = 512;
  s.q_lora_rank = 1024;
  s.o_groups = 8;
  s.o_lora_rank = 1024;
  s.window = 128;
  s.compress_ratios.assign(43, 0);
  for (int l = 2; l < 43; ++l) s.compress_ratios[l] = (l % 2 == 0) ? 4 : 128;
  s.index_n_heads = 64;
  s.index_head_dim = 128;
  s.n_experts = 256;
  s.top_k = 6;
  s.n_shared_experts = 1;
  s.moe_inter = 2048;
  s.n_hash_layers = 3;
  s.hc_mult = 4;
  return s;
}

Result<void> validate_model_shape(const ModelShape& s, const std::string& source) {
  auto bad = [&](const std::string& what) { return Error{source + ": " + what}; };
  if (s.n_layers <= 0) return bad("n_layers: expected > 0, found " + std::to_string(s.n_layers));
  struct Pos { const char* name; int64_t v; };
  for (const Pos& p : {Pos{"dim", s.dim}, Pos{"vocab", s.vocab}, Pos{"n_heads", s.n_heads},
                       Pos{"head_dim", s.head_dim}, Pos{"q_lora_rank", s.q_lora_rank},
                       Pos{"o_groups", s.o_groups}, Pos{"o_lora_rank", s.o_lora_rank},
                       Pos{"window", s.window}, Pos{"n_experts", s.n_experts}, Pos{"top_k", s.top_k},
                       Pos{"moe_inter", s.moe_inter}, Pos{"hc_mult", s.hc_mult},
                       Pos{"index_n_heads", s.index_n_heads},
                       Pos{"index_head_dim", s.index_head_dim}})
    if (p.v <= 0) return bad(std::string(p.name) + ": expected > 0, found " + std::to_string(p.v));
  if (s.n_experts > 65535)
    return bad("n_experts: expected at most 65535, found " + std::to_string(s.n_experts));
  if (s.top_k > s.n_experts)
    return bad("top_k: expected <= n_experts (" + std::to_string(s.n_experts) + "), found " +
               std::to_string(s.top_k));
  if (s.n_hash_layers < 0 || s.n_hash_layers > s.n_layers)
    return bad("n_hash_layers: expected 0.." + std::to_string(s.n_layers) + ", found " +
               std::to_string(s.n_hash_layers));
  if (s.n_shared_experts < 0)
    return bad("n_shared_experts: expected >= 0, found " + std::to_string(s.n_shared_experts));
  if (int(s.compress_ratios.size()) != s.n_layers)
    return bad("compress_ratios: expected " + std::to_string(s.n_layers) + " entries, found " +
               std::to_string(s.compress_ratios.size()));
  for (size_t i = 0; i < s.compress_ratios.size(); ++i) {
    int r = s.compress_ratios[i];
    if (r != 0 && r != 4 && r != 128)
      return bad("compress_ratios[" + std::to_string(i) + "]: expected 0, 4 or 128, found " +
                 std::to_string(r));
  }
  if (int64_t(s.o_groups) * s.o_lora_rank <= 0 || (s.n_heads % s.o_groups) != 0)
    return bad("o_groups: expected a divisor of n_heads (" + std::to_string(s.n_heads) +
               "), found " + std::to_string(s.o_groups));
  return ok();
}

namespace {

using nlohmann::json;

// Finds the first of `names` in `j`; returns nullptr if none is present.
const json* find_key(const json& j, std::initializer_list<const char*> names, std::string* used) {
  for (const char* n : names)
    if (auto it = j.find(n); it != j.end()) {
      *used = n;
      return &*it;
    }
  return nullptr;
}

std::string names_of(std::initializer_list<const char*> names) {
  std::string out;
  for (const char* n : names) out += (out.empty() ? "'" : " or '") + std::string(n) + "'";
  return out;
}

Result<int64_t> get_int(const json& j, const std::string& path,
                        std::initializer_list<const char*> names, const int64_t* fallback) {
  std::string used;
  const json* v = find_key(j, names, &used);
  if (!v) {
    if (fallback) return *fallback;
    return Error{path + ": missing key " + names_of(names)};
  }
  if (!v->is_number_integer())
    return Error{path + ": key '" + used + "': expected an integer, found " + v->dump()};
  return v->get<int64_t>();
}

}  // namespace

Result<ModelShape> load_model_shape(const std::string& path) {
  DS4_TRY(const std::string text, read_file_bounded(path, kMaxJsonBytes, "model config"));
  DS4_TRY(json root, parse_json_text(text, path));
  if (!root.is_object()) return Error{path + ": expected a JSON object at the top level"};
  const json* j = &root;
  for (const char* nest : {"model", "config"})
    if (auto it = root.find(nest); it != root.end() && it->is_object()) j = &*it;

  ModelShape s;
  // "name" is optional; another JSON type is an error (json::value() would throw).
  s.name = "model from " + path;
  for (const json* o : {static_cast<const json*>(&root), j}) {
    if (auto it = o->find("name"); it != o->end()) {
      if (!it->is_string()) return Error{path + ": name: expected a string, found " + it->dump().substr(0, 60)};
      s.name = it->get<std::string>();
    }
  }
  const int64_t one = 1, four = 4, zero = 0;
  DS4_TRY(int64_t n_layers, get_int(*j, path, {"num_hidden_layers", "n_layers", "block_count"}, nullptr));
  s.n_layers = int(n_layers);
  DS4_TRY(s.dim, get_int(*j, path, {"hidden_size", "dim", "embedding_length"}, nullptr));
  DS4_TRY(s.vocab, get_int(*j, path, {"vocab_size", "vocab"}, nullptr));
  DS4_TRY(s.max_ctx, get_int(*j, path, {"max_position_embeddings", "max_seq_len", "context_length"}, &zero));
  DS4_TRY(int64_t nh, get_int(*j, path, {"num_attention_heads", "n_heads", "head_count"}, nullptr));
  s.n_heads = int(nh);
  DS4_TRY(s.head_dim, get_int(*j, path, {"head_dim", "key_length"}, nullptr));
  DS4_TRY(s.q_lora_rank, get_int(*j, path, {"q_lora_rank"}, nullptr));
  DS4_TRY(int64_t og, get_int(*j, path, {"o_groups", "output_group_count"}, nullptr));
  s.o_groups = int(og);
  DS4_TRY(s.o_lora_rank, get_int(*j, path, {"o_lora_rank", "output_lora_rank"}, nullptr));
  DS4_TRY(int64_t win, get_int(*j, path, {"sliding_window", "window_size"}, nullptr));
  s.window = int(win);
  DS4_TRY(int64_t ih, get_int(*j, path, {"index_n_heads"}, nullptr));
  s.index_n_heads = int(ih);
  DS4_TRY(s.index_head_dim, get_int(*j, path, {"index_head_dim"}, nullptr));
  const int64_t topk512 = 512;
  DS4_TRY(int64_t itk, get_int(*j, path, {"index_topk"}, &topk512));
  s.index_topk = int(std::clamp<int64_t>(itk, 1, int64_t(1) << 30));
  DS4_TRY(int64_t ne, get_int(*j, path, {"n_routed_experts", "expert_count"}, nullptr));
  s.n_experts = int(ne);
  DS4_TRY(int64_t tk, get_int(*j, path, {"num_experts_per_tok", "n_activated_experts", "expert_used_count"}, nullptr));
  s.top_k = int(tk);
  DS4_TRY(int64_t ns, get_int(*j, path, {"n_shared_experts", "expert_shared_count"}, &one));
  s.n_shared_experts = int(ns);
  DS4_TRY(s.moe_inter, get_int(*j, path, {"moe_intermediate_size", "moe_inter_dim", "expert_feed_forward_length"}, nullptr));
  DS4_TRY(int64_t nhl, get_int(*j, path, {"num_hash_layers", "n_hash_layers", "hash_layer_count"}, &zero));
  s.n_hash_layers = int(nhl);
  DS4_TRY(int64_t hc, get_int(*j, path, {"hc_mult"}, &four));
  s.hc_mult = int(hc);

  std::string used;
  const json* cr = find_key(*j, {"compress_ratios"}, &used);
  if (!cr) return Error{path + ": missing key 'compress_ratios'"};
  if (!cr->is_array()) return Error{path + ": key 'compress_ratios': expected an array, found " + cr->dump()};
  for (const auto& v : *cr) {
    if (!v.is_number_integer())
      return Error{path + ": key 'compress_ratios': expected integers, found " + v.dump()};
    s.compress_ratios.push_back(v.get<int>());
  }
  // HF/reference configs list one extra entry per MTP/draft layer after the main layers.
  // (Only for a valid layer count: validate_model_shape names a negative one; resizing to it threw.)
  if (s.n_layers > 0 && int(s.compress_ratios.size()) > s.n_layers) s.compress_ratios.resize(size_t(s.n_layers));
  DS4_TRY_VOID(validate_model_shape(s, path));
  return s;
}

}  // namespace ds4::placement
