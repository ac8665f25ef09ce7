// engine/official_checkpoint.cpp — see official_checkpoint.h.
#include "engine/official_checkpoint.h"
#include "ds4/format_number.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "engine/load_progress.h"
#include "engine/official_config.h"
#include "gguf/safetensors.h"
#include "gguf/safetensors_shards.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/deepseek_formats.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;
using gguf::StDtype;
using gguf::StTensor;
using gguf::TensorInfo;

/// Runs fn(i) for i < n on all cores (the repacks are independent per item).
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  const int t = static_cast<int>(std::min<int64_t>(n, std::max(1u, std::thread::hardware_concurrency())));
  if (t <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::thread> th;
  for (int k = 0; k < t; ++k)
    th.emplace_back([&] {
      for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  for (auto& x : th) x.join();
}

/// First error of a parallel loop.
struct FirstError {
  std::mutex mu;
  std::optional<std::string> msg;
  void set(std::string m) {
    std::lock_guard<std::mutex> g(mu);
    if (!msg) msg = std::move(m);
  }
};

/// Uninitialised byte buffer shared with the view (keep-alive).
std::shared_ptr<uint8_t[]> alloc_bytes(uint64_t n) {
  return std::shared_ptr<uint8_t[]>(new uint8_t[std::max<uint64_t>(n, 1)]);
}

/// Drops the pages of [p, p + n) from this process's resident set (MADV_DONTNEED on the
/// read-only file mapping: a later read faults them in from the file again). Streaming fills call
/// it after reading a source tensor, so a conversion's RSS stays about one tensor.
void drop_pages(const uint8_t* p, uint64_t n) {
  if (n == 0) return;
  const uintptr_t pg = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = uintptr_t(p) / pg * pg, b = (uintptr_t(p) + n + pg - 1) / pg * pg;
  ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// llama.cpp leaf name of a per-layer official tensor (`rest` after `layers.L.` / `mtp.M.`), or
/// empty when there is none. `mtp` allows the draft block's own tensors.
std::string layer_leaf(const std::string& rest, bool mtp) {
  static const std::map<std::string, std::string> kLeaf = {
      {"hc_attn_fn", "hc_attn_fn.weight"},
      {"hc_attn_base", "hc_attn_base.weight"},
      {"hc_attn_scale", "hc_attn_scale.weight"},
      {"hc_ffn_fn", "hc_ffn_fn.weight"},
      {"hc_ffn_base", "hc_ffn_base.weight"},
      {"hc_ffn_scale", "hc_ffn_scale.weight"},
      {"attn_norm.weight", "attn_norm.weight"},
      {"ffn_norm.weight", "ffn_norm.weight"},
      {"attn.attn_sink", "attn_sinks.weight"},
      {"attn.wq_a.weight", "attn_q_a.weight"},
      {"attn.q_norm.weight", "attn_q_a_norm.weight"},
      {"attn.wq_b.weight", "attn_q_b.weight"},
      {"attn.wkv.weight", "attn_kv.weight"},
      {"attn.kv_norm.weight", "attn_kv_a_norm.weight"},
      {"attn.wo_a.weight", "attn_output_a.weight"},
      {"attn.wo_b.weight", "attn_output_b.weight"},
      {"attn.compressor.wkv.weight", "attn_compressor_kv.weight"},
      {"attn.compressor.wgate.weight", "attn_compressor_gate.weight"},
      {"attn.compressor.ape", "attn_compressor_ape.weight"},
      {"attn.compressor.norm.weight", "attn_compressor_norm.weight"},
      {"attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"},
      {"attn.indexer.weights_proj.weight", "indexer.proj.weight"},
      {"attn.indexer.compressor.wkv.weight", "indexer_compressor_kv.weight"},
      {"attn.indexer.compressor.wgate.weight", "indexer_compressor_gate.weight"},
      {"attn.indexer.compressor.ape", "indexer_compressor_ape.weight"},
      {"attn.indexer.compressor.norm.weight", "indexer_compressor_norm.weight"},
      {"ffn.gate.weight", "ffn_gate_inp.weight"},
      {"ffn.gate.bias", "exp_probs_b.bias"},
      {"ffn.gate.tid2eid", "ffn_gate_tid2eid.weight"},
      {"ffn.shared_experts.w1.weight", "ffn_gate_shexp.weight"},
      {"ffn.shared_experts.w3.weight", "ffn_up_shexp.weight"},
      {"ffn.shared_experts.w2.weight", "ffn_down_shexp.weight"},
  };
  // The draft (MTP) block's own tensors (REF MTPBlock); llama.cpp calls the final norm
  // `shared_head_norm`.
  static const std::map<std::string, std::string> kMtpLeaf = {
      {"e_proj.weight", "e_proj.weight"},       {"h_proj.weight", "h_proj.weight"},
      {"enorm.weight", "enorm.weight"},         {"hnorm.weight", "hnorm.weight"},
      {"norm.weight", "shared_head_norm.weight"}, {"hc_head_fn", "hc_head_fn.weight"},
      {"hc_head_base", "hc_head_base.weight"},  {"hc_head_scale", "hc_head_scale.weight"},
  };
  if (auto it = kLeaf.find(rest); it != kLeaf.end()) return it->second;
  if (mtp)
    if (auto it = kMtpLeaf.find(rest); it != kMtpLeaf.end()) return it->second;
  return {};
}

std::string global_name(const std::string& n) {
  static const std::map<std::string, std::string> kGlobal = {
      {"embed.weight", "token_embd.weight"},   {"head.weight", "output.weight"},
      {"norm.weight", "output_norm.weight"},   {"hc_head_fn", "output_hc_fn.weight"},
      {"hc_head_base", "output_hc_base.weight"}, {"hc_head_scale", "output_hc_scale.weight"},
  };
  auto it = kGlobal.find(n);
  return it == kGlobal.end() ? std::string() : it->second;
}

bool ends_with(const std::string& s, std::string_view suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

/// Companion tensors consumed with their `.weight`.
bool is_companion(const std::string& n) {
  return ends_with(n, ".scale") || ends_with(n, ".weight_scale") || ends_with(n, ".weight_scale_2") ||
         ends_with(n, ".input_scale");
}

/// The official name without the `model.` prefix some re-exports add (converters accept both;
/// quant-formats.md §3).
std::string official_name(const std::string& s) { return s.rfind("model.", 0) == 0 ? s.substr(6) : s; }

/// Splits `layers.L.rest` / `mtp.M.rest`; false for global names.
bool split_block(const std::string& n, bool* mtp, int* idx, std::string* rest) {
  for (const char* pre : {"layers.", "mtp."}) {
    const size_t pl = std::strlen(pre);
    if (n.compare(0, pl, pre) != 0) continue;
    size_t i = pl, j = pl;
    while (j < n.size() && std::isdigit(static_cast<unsigned char>(n[j]))) ++j;
    if (j == i || j >= n.size() || n[j] != '.' || j - i > 6) return false;
    *mtp = pre[0] == 'm';
    *idx = std::stoi(n.substr(i, j - i));
    *rest = n.substr(j + 1);
    return true;
  }
  return false;
}

class ViewBuilder {
 public:
  /// `fills` non-null: lazy mode (repacked tensors get data = nullptr and a fill, see
  /// open_official_checkpoint_lazy); else `repack` chooses eager repacks or shapes only.
  ViewBuilder(std::shared_ptr<const gguf::SafetensorsCheckpoint> ck, const OfficialConfig& cfg,
              OfficialCheckpointStats* st, bool repack, std::map<std::string, TensorFill>* fills = nullptr)
      : ck_(std::move(ck)), cfg_(cfg), st_(*st), repack_(repack && !fills), fills_(fills) {}

  Result<void> build() {
    // Expert tensors grouped by (llama prefix, projection): [expert] -> official base name.
    std::map<std::pair<std::string, int>, std::map<int64_t, std::string>> experts;
    uint64_t total = 0;
    for (const StTensor& t : ck_->tensors()) total += t.nbytes;  // companions included: a repack writes them too
    load_progress().start_phase(LoadPhase::Repack, repack_ ? total : 0);
    for (const StTensor& t : ck_->tensors()) {
      const std::string n = official_name(t.name);
      if (is_companion(n)) continue;  // consumed by its .weight (checked at the end)
      bool mtp = false;
      int idx = 0;
      std::string rest, llama;
      if (split_block(n, &mtp, &idx, &rest)) {
        if (mtp ? idx >= cfg_.n_mtp : idx >= cfg_.n_layer)
          return err(n, std::string("block index ") + std::to_string(idx) + " beyond config.json's " +
                            (mtp ? "draft blocks (" + std::to_string(cfg_.n_mtp) + ")"
                                 : "num_hidden_layers (" + std::to_string(cfg_.n_layer) + ")"));
        const std::string prefix =
            mtp ? "blk." + std::to_string(cfg_.n_layer + idx) + ".nextn." : "blk." + std::to_string(idx) + ".";
        // ffn.experts.E.w{1,2,3}.weight
        int64_t e = -1;
        char w = 0;
        if (rest.rfind("ffn.experts.", 0) == 0 && ends_with(rest, ".weight")) {
          const std::string mid = rest.substr(12, rest.size() - 12 - 7);  // "E.wP"
          const size_t dot = mid.find('.');
          if (dot != std::string::npos && mid.size() == dot + 3 && mid[dot + 1] == 'w' && dot > 0 && dot <= 6 &&
              std::all_of(mid.begin(), mid.begin() + long(dot), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
            e = std::stoll(mid.substr(0, dot));
            w = mid[dot + 2];
          }
        }
        if (e >= 0 && (w == '1' || w == '2' || w == '3')) {
          if (e >= cfg_.n_expert) return err(n, "expert index " + std::to_string(e) + " beyond n_routed_experts " + std::to_string(cfg_.n_expert));
          const int proj = w == '1' ? 0 : w == '3' ? 1 : 2;  // gate, up, down
          experts[{prefix, proj}][e] = t.name.substr(0, t.name.size() - 7);
          continue;
        }
        const std::string leaf = layer_leaf(rest, mtp);
        if (leaf.empty() && mtp) {
          // A draft-block tensor without a llama.cpp name (e.g. the 0731 release's DSpark heads):
          // kept as it is stored (the draft blocks are loaded, not run).
          add_raw(t, prefix + "raw." + rest);
          continue;
        }
        if (leaf.empty()) return err(n, "unexpected official tensor name (no llama.cpp deepseek4 counterpart)");
        llama = prefix + leaf;
      } else {
        llama = global_name(n);
        if (llama.empty()) return err(n, "unexpected official tensor name (no llama.cpp deepseek4 counterpart)");
      }
      DS4_TRY_VOID(add_dense(t, llama));
    }
    const char* kProj[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
    for (const auto& [key, list] : experts) DS4_TRY_VOID(add_experts(key.first + kProj[key.second], list));
    // Every companion must have been used (a stray `.scale` means a tensor we did not expect).
    for (const StTensor& t : ck_->tensors()) {
      if (!is_companion(t.name) || used_.count(t.name)) continue;
      if (official_name(t.name).rfind("mtp.", 0) == 0) {  // a draft block's scale of a raw-kept tensor
        bool m = false;
        int idx = 0;
        std::string rest;
        if (split_block(official_name(t.name), &m, &idx, &rest) && idx < cfg_.n_mtp) {
          add_raw(t, "blk." + std::to_string(cfg_.n_layer + idx) + ".nextn.raw." + rest);
          continue;
        }
      }
      return err(t.name, "unexpected (no weight tensor uses it)");
    }
    st_.tensors = static_cast<int>(ck_->tensors().size());
    return ok();
  }

  std::vector<TensorInfo> take_tensors() { return std::move(out_); }
  std::vector<std::shared_ptr<const void>> take_keep() { return std::move(keep_); }

 private:
  Error err(const std::string& tensor, const std::string& what) const {
    return Error{ck_->path() + ": tensor '" + tensor + "': " + what};
  }
  std::string where(const StTensor& t) const {
    return ck_->shards()[size_t(t.shard)].path + ": tensor '" + t.name + "'";
  }

  TensorInfo info(const std::string& llama, GgmlType type, const std::vector<int64_t>& torch_shape) {
    TensorInfo i;
    i.name = llama;
    i.type = static_cast<uint32_t>(type);
    i.n_dims = std::max<int>(1, static_cast<int>(torch_shape.size()));
    for (size_t k = 0; k < torch_shape.size() && k < 4; ++k) i.ne[k] = torch_shape[torch_shape.size() - 1 - k];
    const auto* g = ggml_type_geometry(i.type);
    i.nbytes = static_cast<uint64_t>(i.nelements() / g->block_elems) * static_cast<uint64_t>(g->block_bytes);
    i.shard = -1;
    return i;
  }

  /// A tensor kept byte for byte under `llama`: F32/F16/BF16 with their type, anything else as
  /// 1-D I8 bytes (in place in the mmap either way).
  void add_raw(const StTensor& t, const std::string& llama) {
    used_.insert(t.name);
    const bool flt = t.dtype == StDtype::F32 || t.dtype == StDtype::BF16 || t.dtype == StDtype::F16;
    const GgmlType ty = t.dtype == StDtype::F32 ? GgmlType::F32 : t.dtype == StDtype::BF16 ? GgmlType::BF16
                        : t.dtype == StDtype::F16 ? GgmlType::F16 : GgmlType::I8;
    const std::vector<int64_t> shape = flt && t.shape.size() <= 4 ? t.shape : std::vector<int64_t>{int64_t(t.nbytes)};
    add_in_place(t, info(llama, flt && t.shape.size() <= 4 ? ty : GgmlType::I8, shape));
  }

  /// Binds `i` to `buf`, bytes written at load (a repack), kept alive with the view.
  void add_repacked(TensorInfo i, const std::shared_ptr<uint8_t[]>& buf) {
    i.data = buf.get();
    st_.repacked_bytes += i.nbytes;
    load_progress().done += i.nbytes;
    keep_.push_back(std::shared_ptr<const void>(buf, buf.get()));
    out_.push_back(std::move(i));
  }

  /// Binds `i` to `t`'s bytes where they lie in the mmap (no copy): shard, offsets, data.
  void add_in_place(const StTensor& t, TensorInfo i) {
    i.shard = t.shard;
    i.file_offset = t.file_offset;
    i.offset = t.file_offset - 8 - ck_->shards()[size_t(t.shard)].header_size;
    i.data = t.data;
    st_.in_place_bytes += t.nbytes;
    if (repack_) load_progress().done += t.nbytes;
    out_.push_back(std::move(i));
  }

  Result<void> add_dense(const StTensor& t, const std::string& llama) {
    if (t.shape.size() > 4) return Error{where(t) + ": " + std::to_string(t.shape.size()) + " dimensions; expected at most 4"};
    used_.insert(t.name);
    const std::string base = ends_with(t.name, ".weight") ? t.name.substr(0, t.name.size() - 7) : t.name;
    switch (t.dtype) {
      case StDtype::F32: case StDtype::BF16: case StDtype::F16: {
        const GgmlType ty = t.dtype == StDtype::F32 ? GgmlType::F32 : t.dtype == StDtype::BF16 ? GgmlType::BF16 : GgmlType::F16;
        add_in_place(t, info(llama, ty, t.shape));
        return ok();
      }
      case StDtype::F8_E4M3: return add_fp8(t, base, llama);
      case StDtype::I64: case StDtype::I32: {
        if (!ends_with(t.name, "tid2eid"))
          return Error{where(t) + ": dtype " + std::string(gguf::st_dtype_name(t.dtype)) + " unexpected; only tid2eid is an integer tensor"};
        if (t.shape.size() != 2) return Error{where(t) + ": shape " + shape_str(t.shape) + "; expected [vocab, n_activated_experts]"};
        const int64_t n = t.nelements();
        auto buf = alloc_bytes(uint64_t(n) * 4);
        auto* dst = reinterpret_cast<int32_t*>(buf.get());
        for (int64_t k = 0; k < n; ++k) {
          int64_t v;
          if (t.dtype == StDtype::I64) std::memcpy(&v, t.data + 8 * k, 8);
          else {
            int32_t v32;
            std::memcpy(&v32, t.data + 4 * k, 4);
            v = v32;
          }
          if (v < 0 || v >= cfg_.n_expert)
            return Error{where(t) + ": entry " + std::to_string(k) + " (token " + std::to_string(k / t.shape[1]) +
                         "): expected an expert id 0.." + std::to_string(cfg_.n_expert - 1) + ", found " + std::to_string(v)};
          dst[k] = static_cast<int32_t>(v);
        }
        TensorInfo i = info(llama, GgmlType::I32, t.shape);
        add_repacked(std::move(i), buf);
        return ok();
      }
      default:
        return Error{where(t) + ": dtype " + std::string(gguf::st_dtype_name(t.dtype)) +
                     " unexpected; expected F8_E4M3 (+ .scale), BF16, F16 or F32"};
    }
  }

  /// DeepSeek FP8: weight [out, in] E4M3 + scale [ceil(out/128), ceil(in/128)] E8M0 ->
  /// F8_E4M3_R128 rows (in % 128 == 0).
  Result<void> add_fp8(const StTensor& t, const std::string& base, const std::string& llama) {
    const StTensor* s = ck_->find(base + ".scale");
    if (!s) return Error{where(t) + ": F8_E4M3 weight without '" + base + ".scale' (E8M0 per 128x128 block)"};
    used_.insert(s->name);
    if (t.shape.size() != 2) return Error{where(t) + ": shape " + shape_str(t.shape) + "; expected [out, in] for an FP8 matrix"};
    const int64_t out = t.shape[0], in = t.shape[1];
    if (in % 128 != 0) return Error{where(t) + ": in = " + std::to_string(in) + "; expected a multiple of 128 (FP8 128x128 blocks)"};
    const int64_t so = (out + 127) / 128, si = in / 128;
    if (s->dtype != StDtype::F8_E8M0 || s->shape != std::vector<int64_t>{so, si})
      return Error{where(*s) + ": " + std::string(gguf::st_dtype_name(s->dtype)) + " " + shape_str(s->shape) +
                   "; expected F8_E8M0 [" + std::to_string(so) + ", " + std::to_string(si) + "] for weight " + shape_str(t.shape)};
    TensorInfo i = info(llama, GgmlType::F8_E4M3_R128, t.shape);
    ++st_.fp8_tensors;
    const std::string s_where = where(*s);
    const bool lazy = fills_ != nullptr;
    TensorFill fill = [w = &t, s, out, in, si, s_where, lazy](uint8_t* dst) -> Result<void> {
      FirstError fe;
      parallel_for((out + 127) / 128, [&](int64_t rb) {
        for (int64_t r = rb * 128; r < std::min(out, rb * 128 + 128); ++r)
          for (int64_t b = 0; b < si; ++b) {
            const uint8_t e = s->data[rb * si + b];
            if (e == 0xFF) fe.set(s_where + ": block [" + std::to_string(rb) + ", " + std::to_string(b) + "] is 0xFF (E8M0 NaN)");
            uint8_t* d = dst + (r * si + b) * 129;
            d[0] = e;
            std::memcpy(d + 1, w->data + r * in + b * 128, 128);
          }
      });
      if (lazy) drop_pages(w->data, w->nbytes), drop_pages(s->data, s->nbytes);
      if (fe.msg) return Error{*fe.msg};
      return ok();
    };
    return bind_repack(std::move(i), std::move(fill));
  }

  /// A repacked tensor: eager (filled now into a kept buffer), shapes only, or lazy (its fill kept).
  Result<void> bind_repack(TensorInfo i, TensorFill fill) {
    if (fills_) {
      (*fills_)[i.name] = std::move(fill);
      out_.push_back(std::move(i));
      return ok();
    }
    if (!repack_) {
      out_.push_back(std::move(i));
      return ok();
    }
    auto buf = alloc_bytes(i.nbytes);
    DS4_TRY_VOID(fill(buf.get()));
    add_repacked(std::move(i), buf);
    return ok();
  }

  /// All experts of one projection -> a merged {in, out, n_expert} tensor, MXFP4 (DeepSeek FP4)
  /// or NVFP4_S2 (ModelOpt NVFP4), the format chosen from each expert's companion tensors.
  Result<void> add_experts(const std::string& llama, const std::map<int64_t, std::string>& list) {
    if (static_cast<int64_t>(list.size()) != cfg_.n_expert) {
      int64_t miss = 0;
      while (list.count(miss)) ++miss;
      return Error{ck_->path() + ": " + llama + ": expected " + std::to_string(cfg_.n_expert) + " routed experts, found " +
                   std::to_string(list.size()) + " (expert " + std::to_string(miss) + " missing)"};
    }
    struct Src {
      const StTensor *w, *s, *s2 = nullptr;
    };
    std::vector<Src> src;
    bool nv = false;
    int64_t out = 0, in = 0;
    for (const auto& [e, base] : list) {
      const StTensor* w = ck_->find(base + ".weight");
      used_.insert(w->name);
      const StTensor* nvs = ck_->find(base + ".weight_scale");
      const StTensor* mxs = ck_->find(base + ".scale");
      const bool this_nv = nvs != nullptr;
      if (!nvs && !mxs) return Error{where(*w) + ": expected '" + base + ".scale' (FP4, E8M0 per 32) or '" + base + ".weight_scale' (NVFP4), found neither"};
      if (e == 0) nv = this_nv;
      if (this_nv != nv)
        return Error{where(*w) + ": " + (this_nv ? "NVFP4" : "FP4/MXFP4") + " while expert 0 of " + llama + " is " +
                     (nv ? "NVFP4" : "FP4/MXFP4") + "; expected one format per projection"};
      if (w->shape.size() != 2) return Error{where(*w) + ": shape " + shape_str(w->shape) + "; expected [out, in/2]"};
      if (e == 0) {
        out = w->shape[0];
        in = w->shape[1] * 2;
      }
      if (w->shape != std::vector<int64_t>{out, in / 2})
        return Error{where(*w) + ": shape " + shape_str(w->shape) + "; expected expert 0's [" + std::to_string(out) + ", " + std::to_string(in / 2) + "]"};
      Src x{w, nv ? nvs : mxs};
      used_.insert(x.s->name);
      if (nv) {
        if (w->dtype != StDtype::U8 && w->dtype != StDtype::I8)
          return Error{where(*w) + ": dtype " + std::string(gguf::st_dtype_name(w->dtype)) + "; expected U8 (NVFP4 nibbles)"};
        if (in % 64 != 0) return Error{where(*w) + ": in = " + std::to_string(in) + "; expected a multiple of 64"};
        if (x.s->dtype != StDtype::F8_E4M3 || x.s->shape != std::vector<int64_t>{out, in / 16})
          return Error{where(*x.s) + ": " + std::string(gguf::st_dtype_name(x.s->dtype)) + " " + shape_str(x.s->shape) +
                       "; expected F8_E4M3 [" + std::to_string(out) + ", " + std::to_string(in / 16) + "]"};
        x.s2 = ck_->find(base + ".weight_scale_2");
        if (!x.s2 || x.s2->dtype != StDtype::F32 || x.s2->nelements() != 1)
          return Error{where(*w) + ": expected '" + base + ".weight_scale_2' F32 scalar, found " +
                       (x.s2 ? std::string(gguf::st_dtype_name(x.s2->dtype)) + " " + shape_str(x.s2->shape) : "none")};
        used_.insert(x.s2->name);
        float s2;
        std::memcpy(&s2, x.s2->data, 4);
        if (!std::isfinite(s2) || s2 <= 0)
          return Error{where(*x.s2) + ": " + format_number(s2) + "; expected a finite value > 0"};
        if (const StTensor* is = ck_->find(base + ".input_scale")) used_.insert(is->name);  // W4A4 only
      } else {
        if (w->dtype != StDtype::I8 && w->dtype != StDtype::U8)
          return Error{where(*w) + ": dtype " + std::string(gguf::st_dtype_name(w->dtype)) + "; expected I8 (packed FP4 E2M1)"};
        if (in % 32 != 0) return Error{where(*w) + ": in = " + std::to_string(in) + "; expected a multiple of 32"};
        if (x.s->dtype != StDtype::F8_E8M0 || x.s->shape != std::vector<int64_t>{out, in / 32})
          return Error{where(*x.s) + ": " + std::string(gguf::st_dtype_name(x.s->dtype)) + " " + shape_str(x.s->shape) +
                       "; expected F8_E8M0 [" + std::to_string(out) + ", " + std::to_string(in / 32) + "]"};
      }
      src.push_back(x);
    }
    const GgmlType ty = nv ? GgmlType::NVFP4_S2 : GgmlType::MXFP4;
    TensorInfo i = info(llama, ty, {cfg_.n_expert, out, in});
    const uint64_t row_bytes = i.nbytes / uint64_t(cfg_.n_expert * out);
    (nv ? st_.nvfp4_experts : st_.mxfp4_experts) += static_cast<int>(cfg_.n_expert);
    std::vector<std::string> s_where;
    for (const Src& x : src) s_where.push_back(where(*x.s));
    const bool lazy = fills_ != nullptr;
    TensorFill fill = [src, s_where, nv, out, in, row_bytes, lazy](uint8_t* buf) -> Result<void> {
      FirstError fe;
      parallel_for(int64_t(src.size()), [&](int64_t e) {
        const Src& x = src[size_t(e)];
        for (int64_t r = 0; r < out; ++r) {
          uint8_t* dst = buf + uint64_t(e * out + r) * row_bytes;
          const uint8_t* wr = x.w->data + r * (in / 2);
          if (!nv) {
            const uint8_t* sr = x.s->data + r * (in / 32);
            for (int64_t b = 0; b < in / 32; ++b)
              if (sr[b] == 0xFF) fe.set(s_where[size_t(e)] + ": row " + std::to_string(r) + " block " + std::to_string(b) + " is 0xFF (E8M0 NaN)");
            cpu::repack_ds_fp4_to_mxfp4(wr, sr, dst, in);
            continue;
          }
          // ModelOpt NVFP4 -> NVFP4_S2 (ggml NVFP4 nibble order, E4M3 bytes copied, tensor scale in front).
          const uint8_t* sr = x.s->data + r * (in / 16);
          float s2;
          std::memcpy(&s2, x.s2->data, 4);
          if (const int64_t bad = cpu::repack_modelopt_nvfp4_row(wr, sr, s2, dst, in); bad >= 0)
            fe.set(s_where[size_t(e)] + ": row " + std::to_string(r) + " block " + std::to_string(bad) + " scale 0x" +
                   fmt_hex(sr[bad]) + " (negative or NaN); expected a non-negative E4M3 scale");
        }
        if (lazy) drop_pages(x.w->data, x.w->nbytes), drop_pages(x.s->data, x.s->nbytes);
      });
      if (fe.msg) return Error{*fe.msg};
      return ok();
    };
    return bind_repack(std::move(i), std::move(fill));
  }

  static std::string fmt_hex(uint8_t v) {
    const char* h = "0123456789ABCDEF";
    return std::string{h[v >> 4], h[v & 15]};
  }

  std::shared_ptr<const gguf::SafetensorsCheckpoint> ck_;
  const OfficialConfig& cfg_;
  OfficialCheckpointStats& st_;
  bool repack_ = true;
  std::map<std::string, TensorFill>* fills_ = nullptr;
  std::set<std::string> used_;
  std::vector<TensorInfo> out_;
  std::vector<std::shared_ptr<const void>> keep_;
};

}  // namespace

namespace {

Result<gguf::GgufModel> open_view(const std::string& path, OfficialCheckpointStats* stats, bool repack,
                                  std::map<std::string, TensorFill>* fills) {
  OfficialCheckpointStats local;
  OfficialCheckpointStats& st = stats ? *stats : local;
  DS4_TRY_VOID(gguf::check_safetensors_shard_set(path));  // a lone shard or an incomplete set, before any mapping
  DS4_TRY(gguf::SafetensorsCheckpoint ck, gguf::SafetensorsCheckpoint::open(path));
  auto shared = std::make_shared<const gguf::SafetensorsCheckpoint>(std::move(ck));
  DS4_TRY(OfficialConfig cfg, read_official_config(shared->folder()));
  const auto t0 = std::chrono::steady_clock::now();
  ViewBuilder vb(shared, cfg, &st, repack, fills);
  DS4_TRY_VOID(vb.build());
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.quant = std::string(st.fp8_tensors ? "fp8" : "") + (st.mxfp4_experts ? "+fp4(mxfp4)" : "") +
             (st.nvfp4_experts ? "+nvfp4" : "");
  st.tokenizer_json = cfg.tokenizer_json;
  st.declared = cfg.declared();
  std::vector<gguf::Shard> shards;
  for (const auto& s : shared->shards()) {
    gguf::Shard g;
    g.path = s.path;
    g.file_size = s.file_size;
    g.data_offset = 8 + s.header_size;
    shards.push_back(std::move(g));
  }
  std::vector<TensorInfo> tensors = vb.take_tensors();
  std::vector<std::shared_ptr<const void>> keep = vb.take_keep();
  keep.push_back(shared);
  for (auto& s : shards) s.n_tensors = 0;
  for (const auto& t : tensors)
    if (t.shard >= 0) ++shards[size_t(t.shard)].n_tensors;
  return gguf::GgufModel::assemble(path, cfg.metadata, std::move(shards), std::move(tensors), std::move(keep));
}

}  // namespace

void drop_mapped_pages(const uint8_t* p, uint64_t n) { drop_pages(p, n); }

Result<gguf::GgufModel> open_official_checkpoint(const std::string& path, OfficialCheckpointStats* stats, bool repack) {
  return open_view(path, stats, repack, nullptr);
}

Result<gguf::GgufModel> open_official_checkpoint_lazy(const std::string& path, std::map<std::string, TensorFill>* fills,
                                                      OfficialCheckpointStats* stats) {
  DS4_CHECK(fills != nullptr);
  fills->clear();
  return open_view(path, stats, false, fills);
}

Result<gguf::GgufModel> open_model_file(const std::string& path, const gguf::OpenOptions& opts) {
  DS4_TRY_VOID(gguf::check_safetensors_shard_set(path));  // e.g. a folder of shards without its index
  if (gguf::is_safetensors_path(path)) return open_official_checkpoint(path, nullptr, opts.map_data);
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return Error{path + ": a folder without model.safetensors.index.json or model.safetensors; expected a GGUF file "
                        "or a safetensors checkpoint folder"};
  return gguf::GgufModel::open(path, opts);
}

Result<gguf::Metadata> read_model_metadata(const std::string& path) {
  DS4_TRY_VOID(gguf::check_safetensors_shard_set(path));
  std::error_code ec;
  if (gguf::is_safetensors_path(path)) {
    fs::path folder = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
    if (folder.empty()) folder = ".";
    DS4_TRY(OfficialConfig cfg, read_official_config(folder.string()));
    return std::move(cfg.metadata);
  }
  gguf::OpenOptions oo;
  oo.map_data = false;
  DS4_TRY(gguf::GgufModel g, open_model_file(path, oo));
  return g.metadata();
}

}  // namespace ds4
