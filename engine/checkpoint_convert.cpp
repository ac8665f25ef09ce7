// engine/checkpoint_convert.cpp — see checkpoint_convert.h.
#include "engine/checkpoint_convert.h"
#include "ds4/json_depth.h"
#include "ds4/format_number.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "ds4/file_io.h"
#include "engine/official_checkpoint.h"
#include "gguf/gguf_writer.h"
#include "gguf/safetensors.h"
#include "gguf/safetensors_writer.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/deepseek_formats.h"
#include "kernels/quant/scalar_formats.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;
using gguf::StDtype;
using gguf::StTensor;
using nlohmann::json;

bool ends_with(const std::string& s, std::string_view suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

/// `layers.L.ffn.experts.E.wP` of a routed-expert weight name (mtp.* excluded), else empty.
std::string expert_base(const std::string& n, char* proj) {
  if (n.rfind("layers.", 0) != 0 || !ends_with(n, ".weight")) return {};
  const size_t p = n.find(".ffn.experts.");
  if (p == std::string::npos) return {};
  const std::string base = n.substr(0, n.size() - 7);
  if (base.size() < 3 || base[base.size() - 3] != '.' || base[base.size() - 2] != 'w') return {};
  *proj = base.back();
  return (*proj == '1' || *proj == '2' || *proj == '3') ? base : std::string();
}

/// E4M3 byte of 2^k for k in [-9, 8] (normal exponents -6..8, subnormals 2^-7..2^-9).
uint8_t e4m3_pow2(int k) {
  if (k >= -6) return uint8_t((k + 7) << 3);
  return uint8_t(1 << (k + 9));  // man * 2^-9: k=-7 -> 4, -8 -> 2, -9 -> 1
}

std::string pair_of(const std::string& base) {
  // w1 and w3 share e_max; w2 alone.
  const char p = base.back();
  return p == '2' ? base : base.substr(0, base.size() - 1) + "1";
}

}  // namespace

Result<Nvfp4CastReport> cast_checkpoint_to_nvfp4(const std::string& src, const std::string& out_dir,
                                                 const std::function<void(const std::string&)>& progress,
                                                 const std::map<std::string, float>& input_scale) {
  const auto t0 = std::chrono::steady_clock::now();
  Nvfp4CastReport rep;
  DS4_TRY(gguf::SafetensorsCheckpoint ck, gguf::SafetensorsCheckpoint::open(src));
  std::error_code ec;
  if (fs::exists(fs::path(out_dir) / "model.safetensors.index.json", ec) || fs::exists(fs::path(out_dir) / "config.json", ec))
    return Error{out_dir + ": already holds a checkpoint; expected a new or empty folder"};
  if (fs::equivalent(ck.folder(), out_dir, ec)) return Error{out_dir + ": is the source folder; expected another folder"};
  // Pass 1: the cast experts, their pair maxima, and every range check (nothing written yet).
  std::map<std::string, const StTensor*> weight, scale;  // base -> tensors
  for (const StTensor& t : ck.tensors()) {
    char proj = 0;
    const std::string base = expert_base(t.name, &proj);
    if (base.empty()) continue;
    const StTensor* s = ck.find(base + ".scale");
    if (!s) {
      if (ck.find(base + ".weight_scale")) return Error{ck.path() + ": tensor '" + t.name + "' is NVFP4 already; expected DeepSeek FP4 experts"};
      return Error{ck.path() + ": tensor '" + t.name + "': expected its E8M0 '" + base + ".scale'"};
    }
    if (t.dtype != StDtype::I8 || s->dtype != StDtype::F8_E8M0 || t.shape.size() != 2 ||
        s->shape != std::vector<int64_t>{t.shape[0], t.shape[1] * 2 / 32} || (t.shape[1] * 2) % 32 != 0)
      return Error{ck.path() + ": tensor '" + t.name + "': expected I8 [out, in/2] with F8_E8M0 [out, in/32] scales, found " +
                   std::string(gguf::st_dtype_name(t.dtype)) + " / " + std::string(gguf::st_dtype_name(s->dtype))};
    weight[base] = &t;
    scale[base] = s;
  }
  if (weight.empty()) return Error{ck.path() + ": no DeepSeek FP4 routed experts (layers.L.ffn.experts.E.wP.weight + .scale) to cast"};
  if (!input_scale.empty())
    for (const auto& [base, t] : weight)
      if (!input_scale.count(base)) return Error{"input_scale: no calibrated value for '" + base + "'; nothing written"};
  std::map<std::string, int> emax;  // pair base (w1 / w2) -> max E8M0 byte
  for (const auto& [base, s] : scale) {
    int& m = emax.try_emplace(pair_of(base), 0).first->second;
    for (uint64_t i = 0; i < s->nbytes; ++i) {
      if (s->data[i] == 0xFF)
        return Error{ck.path() + ": tensor '" + s->name + "': row " + std::to_string(i / uint64_t(s->shape[1])) + " block " +
                     std::to_string(i % uint64_t(s->shape[1])) + " is 0xFF (E8M0 NaN); cannot be cast"};
      m = std::max<int>(m, s->data[i]);
    }
  }
  for (const auto& [base, s] : scale) {
    const int m = emax.at(pair_of(base));
    for (uint64_t i = 0; i < s->nbytes; ++i) {
      const int oct = m - s->data[i];
      rep.max_octaves = std::max(rep.max_octaves, oct);
      if (oct > 17)
        return Error{ck.path() + ": tensor '" + s->name + "': row " + std::to_string(i / uint64_t(s->shape[1])) + " block " +
                     std::to_string(i % uint64_t(s->shape[1])) + ": scale 2^" + std::to_string(int(s->data[i]) - 127) + " is " +
                     std::to_string(oct) + " octaves below the " + (base.back() == '2' ? "tensor's" : "w1/w3 pair's") +
                     " largest 2^" + std::to_string(m - 127) +
                     "; an E4M3 per-16 scale holds at most 17 (2^-9 .. 2^8), so this block cannot be cast exactly; nothing written"};
    }
  }
  fs::create_directories(out_dir, ec);
  if (ec) return Error{out_dir + ": cannot create: " + ec.message()};
  // Pass 2: shard by shard (bounded memory: one shard's cast tensors at a time).
  json weight_map = json::object();
  uint64_t total = 0;
  for (size_t sh = 0; sh < ck.shards().size(); ++sh) {
    std::vector<gguf::StWriteTensor> out;
    std::vector<std::vector<uint8_t>> store;
    store.reserve(4 * ck.tensors().size());
    const std::string fname = fs::path(ck.shards()[sh].path).filename().string();
    std::vector<const StTensor*> order;  // the source's data order
    for (const StTensor& t : ck.tensors())
      if (t.shard == int(sh)) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const StTensor* a, const StTensor* b) { return a->file_offset < b->file_offset; });
    for (const StTensor* tp : order) {
      const StTensor& t = *tp;
      if (ends_with(t.name, ".scale") && weight.count(t.name.substr(0, t.name.size() - 6))) continue;  // replaced
      char proj = 0;
      const std::string base = expert_base(t.name, &proj);
      if (base.empty() || !weight.count(base)) {
        out.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
        ++rep.copied_tensors;
        continue;
      }
      const StTensor& s = *scale.at(base);
      const int m = emax.at(pair_of(base));
      const int64_t rows = t.shape[0], in = t.shape[1] * 2;
      store.emplace_back(t.data, t.data + t.nbytes);  // nibbles, -0 -> +0
      std::vector<uint8_t>& w = store.back();
      for (uint8_t& b : w) {
        if ((b & 0x0F) == 0x08) { b &= 0xF0; ++rep.neg_zero; }
        if ((b & 0xF0) == 0x80) { b &= 0x0F; ++rep.neg_zero; }
      }
      store.emplace_back(size_t(rows * in / 16));
      std::vector<uint8_t>& ws = store.back();
      for (int64_t i = 0; i < rows * in / 32; ++i) ws[2 * i] = ws[2 * i + 1] = e4m3_pow2(int(s.data[i]) - m + 8);
      const float s2 = std::ldexp(1.0f, m - 127 - 8);
      store.emplace_back(4);
      std::memcpy(store.back().data(), &s2, 4);
      const std::vector<uint8_t>& s2b = store.back();
      const auto cal = input_scale.find(base);
      const float in_scale = cal == input_scale.end() ? 1.0f : cal->second;
      rep.calibrated += cal != input_scale.end();
      store.emplace_back(4);
      std::memcpy(store.back().data(), &in_scale, 4);
      const std::vector<uint8_t>& isb = store.back();
      // Accounting: every per-32 block decodes to equal values (e2m1 * e4m3 * s2 vs e2m1 * 2^(e-127)).
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < in / 32; ++b) {
          bool same = true;
          for (int64_t k = 32 * b; k < 32 * b + 32; ++k) {
            const float a = quant::ds_fp4_value(quant::ds_fp4_code(t.data + r * (in / 2), k), s.data[r * (in / 32) + b]);
            const float c = quant::e2m1_to_f32(quant::ds_fp4_code(w.data() + r * (in / 2), k)) *
                            quant::e4m3_to_f32(ws[size_t(r * (in / 16) + k / 16)]) * s2;
            same = same && a == c;
          }
          ++rep.blocks;
          rep.blocks_exact += same;
        }
      out.push_back({t.name, StDtype::U8, t.shape, w.data(), w.size()});
      out.push_back({base + ".weight_scale", StDtype::F8_E4M3, {rows, in / 16}, ws.data(), ws.size()});
      out.push_back({base + ".weight_scale_2", StDtype::F32, {}, s2b.data(), 4});
      out.push_back({base + ".input_scale", StDtype::F32, {}, isb.data(), 4});
      ++rep.expert_tensors;
    }
    for (const auto& t : out) {
      weight_map[t.name] = fname;
      total += t.nbytes;
    }
    DS4_TRY_VOID(gguf::write_safetensors((fs::path(out_dir) / fname).string(), out, ck.shards()[sh].metadata));
    if (progress) progress("wrote " + fname + ": " + std::to_string(out.size()) + " tensors");
  }
  if (rep.blocks_exact != rep.blocks)
    return Error{out_dir + ": " + std::to_string(rep.blocks - rep.blocks_exact) + " of " + std::to_string(rep.blocks) +
                 " blocks decode differently after the cast (a bug: the range checks passed)"};
  // Every small file is written checked (a full disk is an error, not a truncated JSON file).
  auto write_small = [&](const std::string& name, const std::string& text) {
    return write_file_atomic((fs::path(out_dir) / name).string(), text, "convert output");
  };
  DS4_TRY_VOID(write_small("model.safetensors.index.json",
                           json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(1) + "\n"));
  // config.json: quantization_config -> ModelOpt NVFP4, the FP8 block config kept.
  DS4_TRY(const std::string cf, read_file_bounded((fs::path(ck.folder()) / "config.json").string(), kMaxJsonBytes, "config.json"));
  if (auto e = json_depth_error(cf, kMaxJsonFileDepth, ck.folder() + "/config.json"); !e.empty()) return Error{e};
  json cfg;
  try {
    cfg = json::parse(cf);
  } catch (const json::exception& e) {
    return Error{ck.folder() + "/config.json: JSON malformed: " + e.what()};
  }
  const json ignore = {"mtp.*", "*.attn.*", "*.shared_experts.*", "*.gate", "embed", "head"};
  json q = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}, {"ignore", ignore}};
  if (cfg.contains("quantization_config")) q["fp8_dense"] = cfg["quantization_config"];
  cfg["quantization_config"] = q;
  DS4_TRY_VOID(write_small("config.json", cfg.dump(2) + "\n"));
  DS4_TRY_VOID(write_small(
      "hf_quant_config.json",
      json{{"producer", {{"name", "ds4-offload convert"}, {"version", "0.1.0"}}},
           {"quantization", {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16}, {"exclude_modules", ignore}}}}
              .dump(2) +
          "\n"));
  for (const auto& e : fs::directory_iterator(ck.folder(), ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file() || ends_with(n, ".safetensors") || n == "model.safetensors.index.json" || n == "config.json" ||
        n == "hf_quant_config.json" || n == "README.md" || ends_with(n, ".gguf") || e.file_size() > (64u << 20))
      continue;
    fs::copy_file(e.path(), fs::path(out_dir) / n, fs::copy_options::overwrite_existing, ec);
    if (ec) return Error{out_dir + "/" + n + ": copying from the source folder failed: " + ec.message()};
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

Result<AuditReport> audit_checkpoints(const std::string& a, const std::string& b) {
  DS4_TRY(gguf::GgufModel A, open_model_file(a));
  DS4_TRY(gguf::GgufModel B, open_model_file(b));
  AuditReport r;
  std::vector<float> x, y;
  for (const auto& t : A.tensors()) {
    const gguf::TensorInfo* u = B.find(t.name);
    if (!u) {
      r.only_in_a.push_back(t.name);
      continue;
    }
    ++r.tensors;
    if (u->ne != t.ne) {
      r.differences.push_back(t.name + ": shapes differ");
      continue;
    }
    auto decode = [](const gguf::TensorInfo& v, std::vector<float>& out) {
      out.resize(size_t(v.nelements()));
      if (static_cast<GgmlType>(v.type) == GgmlType::I32) {
        for (int64_t i = 0; i < v.nelements(); ++i) {
          int32_t q;
          std::memcpy(&q, v.data + 4 * i, 4);
          out[size_t(i)] = float(q);
        }
        return;
      }
      for (int64_t row = 0; row < v.nrows(); ++row)
        cpu::dequantize_row(static_cast<GgmlType>(v.type), v.data + row * v.row_bytes(), out.data() + row * v.ne[0], v.ne[0]);
    };
    decode(t, x);
    decode(*u, y);
    uint64_t same = 0;
    int64_t first = -1;
    for (size_t i = 0; i < x.size(); ++i) {
      const bool eq = x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]));
      same += eq;
      if (!eq && first < 0) first = int64_t(i);
    }
    r.elements += x.size();
    r.elements_exact += same;
    if (first < 0) ++r.identical;
    else if (r.differences.size() < 20)
      r.differences.push_back(t.name + " (" + std::string(ggml_type_name(t.type)) + " vs " + std::string(ggml_type_name(u->type)) +
                              "): " + std::to_string(x.size() - same) + " of " + std::to_string(x.size()) +
                              " elements differ; first at row " + std::to_string(first / t.ne[0]) + " col " +
                              std::to_string(first % t.ne[0]) + ": " + format_number(x[size_t(first)]) + " vs " +
                              format_number(y[size_t(first)]));
  }
  for (const auto& u : B.tensors())
    if (!A.find(u.name)) r.only_in_b.push_back(u.name);
  // The views bind NVFP4 input_scale (activation calibration) but carry no tensor for it.
  for (const auto& [side, path] : {std::pair<const char*, const std::string*>{"A", &a}, {"B", &b}}) {
    if (!gguf::is_safetensors_path(*path)) continue;
    DS4_TRY(gguf::SafetensorsCheckpoint ck, gguf::SafetensorsCheckpoint::open(*path));
    int n = 0;
    for (const auto& t : ck.tensors()) {
      const std::string_view suf = ".input_scale";
      n += t.name.size() >= suf.size() && t.name.compare(t.name.size() - suf.size(), suf.size(), suf) == 0;
    }
    if (n)
      r.not_compared.push_back(std::string(side) + ": " + std::to_string(n) +
                               " input_scale tensors (activation scales; the decoded view carries no tensor for them)");
  }
  return r;
}

Result<uint64_t> convert_to_gguf(const std::string& src, const std::string& out, const GgufConvertOptions& o,
                                 const std::function<void(const std::string&)>& progress) {
  const bool lazy = gguf::is_safetensors_path(src);
  // Empty --experts: a safetensors (FP4) source becomes MXFP4 (lossless), a GGUF source keeps each
  // expert tensor's type (bytes copied), so no default silently re-quantizes an IQ2_XXS/Q2_K model.
  const std::string experts = !o.experts.empty() ? o.experts : lazy ? std::string("mxfp4") : std::string("keep");
  const bool keep = experts == "keep";
  const GgmlTypeGeometry* et = keep ? nullptr : ggml_type_by_name(experts);
  const std::set<std::string> expert_types = {"mxfp4", "q8_0", "q2_k", "iq2_xxs", "iq1_m"};
  if (!keep && (!et || !expert_types.count(experts)))
    return Error{"--experts '" + experts + "': expected one of keep, mxfp4, q8_0, q2_k, iq2_xxs, iq1_m"};
  if (o.dense != "f32" && o.dense != "bf16") return Error{"--dense '" + o.dense + "': expected f32 or bf16"};
  // Streaming: a safetensors folder is bound lazily (each repack runs when its tensor is written),
  // a GGUF is mapped; every output tensor is produced into the writer's one buffer while the file
  // is written, and the source pages it read are dropped after it (peak RSS ~ the largest tensor).
  std::map<std::string, TensorFill> fills;
  gguf::OpenOptions oo;
  DS4_TRY(gguf::GgufModel v, lazy ? open_official_checkpoint_lazy(src, &fills) : open_model_file(src, oo));
  DS4_TRY(int64_t n_layer, v.metadata().get_int("deepseek4.block_count"));
  // Every routed-expert row must be a whole number of the target type's blocks (Q2_K/IQ2_XXS/IQ1_M
  // take 256 elements per block): refused before any work, naming the tensor and both sizes.
  for (const auto& t : v.tensors())
    if (!keep && t.name.find("_exps.weight") != std::string::npos && t.ne[0] % int64_t(et->block_elems) != 0)
      return Error{src + ": tensor '" + t.name + "' rows have " + std::to_string(t.ne[0]) + " elements; --experts " +
                   experts + " needs a multiple of its block of " + std::to_string(et->block_elems) +
                   " (choose mxfp4 or q8_0, 32-element blocks)"};
  gguf::GgufWriter w;
  for (const auto& [k, val] : v.metadata().entries()) {
    if (k == "deepseek4.nextn_predict_layers") continue;  // the MTP block is not written
    w.metadata().set(k, val);
  }
  // Experts that change type (a GGUF source given --experts): said once, before any work; an MXFP4
  // target is also checked row by row below and its inexact rows reported.
  if (!keep && !lazy && progress) {
    std::map<std::string, int> changed;  // source type -> tensors
    for (const auto& t : v.tensors())
      if (t.name.find("_exps.weight") != std::string::npos && t.type != et->id) ++changed[std::string(ggml_type_name(t.type))];
    for (const auto& [ty, n] : changed)
      progress("note: --experts " + experts + " re-quantizes " + std::to_string(n) + " " + ty +
               " expert tensors: lossy unless every value is exact in " + experts +
               (experts == "mxfp4" ? " (checked below)" : "") + "; omit --experts to keep the source's types");
  }
  if (experts == "mxfp4") w.metadata().set("general.file_type", gguf::Value::make_u32(38));  // llama.cpp MOSTLY_MXFP4
  // The source bytes of view tensor `t`: in place (mmap) or produced by its lazy fill into `tmp`.
  auto source = [&fills](const gguf::TensorInfo& t, std::vector<uint8_t>& tmp) -> Result<const uint8_t*> {
    const auto f = fills.find(t.name);
    if (f == fills.end()) return t.data;
    tmp.resize(size_t(t.nbytes));
    DS4_TRY_VOID(f->second(tmp.data()));
    return static_cast<const uint8_t*>(tmp.data());
  };
  // Only bytes inside a file mapping (shard >= 0) are dropped: a tensor the view converted into
  // memory at open (tid2eid) lives on the heap, where MADV_DONTNEED would zero it.
  auto release = [](const gguf::TensorInfo& t) {
    if (t.shard >= 0 && t.data) drop_mapped_pages(t.data, t.nbytes);
  };
  std::vector<int> layer_of;  // per written tensor, for progress lines
  std::vector<uint8_t> tmp;    // one repacked source tensor at a time
  uint64_t bytes = 0;
  for (const gguf::TensorInfo& t : v.tensors()) {
    int layer = -1;
    if (t.name.rfind("blk.", 0) == 0) layer = std::atoi(t.name.c_str() + 4);
    if (layer >= n_layer) continue;  // MTP
    const GgmlType ty = static_cast<GgmlType>(t.type);
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    const bool expert = t.name.find("_exps.weight") != std::string::npos;
    GgmlType want = ty;
    if (expert) want = keep ? ty : static_cast<GgmlType>(et->id);
    else if (ty == GgmlType::F8_E4M3_R128 || ty == GgmlType::BF16 || ty == GgmlType::F16)
      want = o.dense == "bf16" ? GgmlType::BF16 : GgmlType::F32;
    const gguf::TensorInfo* tp = &t;
    gguf::GgufWriter::Fill fill;
    if (want == ty) {
      fill = [tp, &source, release, &tmp](uint8_t* dst) -> Result<void> {
        DS4_TRY(const uint8_t* p, source(*tp, tmp));
        std::memcpy(dst, p, tp->nbytes);
        release(*tp);
        return ok();
      };
    } else {
      // Decode each row to FP32 and encode as `want` (F32: lossless; BF16: checked lossless).
      fill = [tp, want, &source, release, &tmp, &progress, src](uint8_t* dst) -> Result<void> {
        const gguf::TensorInfo& t = *tp;
        const GgmlType ty = static_cast<GgmlType>(t.type);
        DS4_TRY(const uint8_t* p, source(t, tmp));
        const int64_t rb = cpu::row_bytes(want, t.ne[0]);
        std::vector<float> row(size_t(t.ne[0])), back(row.size());
        int64_t inexact_rows = 0;
        for (int64_t r = 0; r < t.nrows(); ++r) {
          cpu::dequantize_row(ty, p + r * t.row_bytes(), row.data(), t.ne[0]);
          cpu::quantize_row(want, row.data(), dst + r * rb, t.ne[0]);
          if (want != GgmlType::MXFP4 && want != GgmlType::BF16) continue;
          cpu::dequantize_row(want, dst + r * rb, back.data(), t.ne[0]);
          for (size_t k = 0; k < row.size(); ++k)
            if (back[k] != row[k]) {
              if (want == GgmlType::BF16)  // "checked lossless"
                return Error{src + ": row " + std::to_string(r) + " col " + std::to_string(k) + ": " +
                             format_number(row[k]) + " is not exact in BF16; use --dense f32"};
              ++inexact_rows;  // MXFP4, "lossless by default": say when it is not
              break;
            }
        }
        release(t);
        if (inexact_rows && progress)
          progress("tensor '" + t.name + "': " + std::to_string(inexact_rows) + " of " + std::to_string(t.nrows()) +
                   " rows are not exact in " + std::string(ggml_type_name(uint32_t(want))) + " (source " +
                   std::string(ggml_type_name(t.type)) + "): lossy");
        return ok();
      };
    }
    DS4_TRY_VOID(w.add_tensor_deferred(t.name, uint32_t(want), ne, std::move(fill)));
    layer_of.push_back(layer);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto tick = [&](size_t k, uint64_t done, uint64_t total) {
    bytes = done;
    const bool last = k + 1 == layer_of.size();
    if (!progress || (!last && layer_of[k + 1] == layer_of[k])) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: %.1f / %.1f MiB written (%.0f %%, %.1f MiB/s)",
                  layer_of[k] >= 0 ? ("layer " + std::to_string(layer_of[k]) + " / " + std::to_string(n_layer)).c_str()
                                   : "global tensors",
                  double(done) / 1048576.0, double(total) / 1048576.0, total ? 100.0 * double(done) / double(total) : 100.0,
                  s > 0 ? double(done) / 1048576.0 / s : 0.0);
    progress(buf);
  };
  DS4_TRY_VOID(w.write(out, tick));
  return bytes;
}

}  // namespace ds4
