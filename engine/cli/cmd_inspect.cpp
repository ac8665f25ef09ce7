// engine/cli/cmd_inspect.cpp — `ds4-offload inspect MODEL [--json] [--validate] [--dump NAME --out FILE]`:
// summary of a GGUF model or split set (metadata with long arrays summarised, tensors grouped by
// ggml type, routed-expert bytes per layer), deep validation, and dumping one tensor dequantized
// to little-endian float32 in ggml row order (ne[0] contiguous, then ne[1], ne[2], ne[3]).
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <vector>

#include "engine/official_checkpoint.h"
#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/model_config.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_validate.h"
#include "gguf/safetensors.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::cli {
namespace {

using gguf::GgufModel;
using gguf::TensorInfo;
using gguf::Value;
using gguf::ValueType;
using nlohmann::json;

struct InspectArgs {
  std::string model;
  bool json = false;
  bool validate = false;
  std::string dump;
  std::string out;
};
InspectArgs args;

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("inspect", "Summarise, validate or dump tensors of a model (GGUF file or split set, or a safetensors checkpoint)");
  s->add_option("model,-m,--model", args.model,
                "GGUF file, any shard NAME-0000k-of-0000n.gguf of a split set, or a safetensors checkpoint "
                "(folder, index json, .safetensors); positional or -m")
      ->required();
  s->add_flag("--json", args.json, "Print the summary as JSON");
  s->add_flag("--validate", args.validate,
              "Every check `run` makes when loading (keys, tensor names/shapes/types, tid2eid, tokenizer), deep "
              "checks of every tensor's data (finite FP16 scales, MXFP4 E8M0 != 0xFF, finite floats) and a short "
              "forward pass with finite logits; 'validate: OK' means the file loads and runs; exit 1 otherwise");
  auto* d = s->add_option("--dump", args.dump, "Tensor name to write dequantized as float32");
  auto* o = s->add_option("--out", args.out, "Output file for --dump (little-endian float32, ggml row order)");
  d->needs(o);
  o->needs(d);
  return s;
}

std::string human_bytes(uint64_t b) {
  if (b >= (uint64_t(1) << 30)) return fmt::format("{:.2f} GiB", double(b) / double(uint64_t(1) << 30));
  if (b >= (uint64_t(1) << 20)) return fmt::format("{:.2f} MiB", double(b) / double(uint64_t(1) << 20));
  if (b >= 1024) return fmt::format("{:.2f} KiB", double(b) / 1024.0);
  return fmt::format("{} B", b);
}

std::string dims(const TensorInfo& t) {
  std::string r = "[";
  for (int k = 0; k < std::max(t.n_dims, 1); ++k) r += (k ? ", " : "") + std::to_string(t.ne[k]);
  return r + "]";
}

/// JSON of a value; arrays longer than 32 elements are summarised as {count, element_type, head}.
json value_json(const Value& v) {
  auto elem = [&](size_t k) -> json {
    const ValueType t = v.array_type;
    if (gguf::is_unsigned_type(t)) return v.arr_u[k];
    if (gguf::is_signed_type(t)) return v.arr_i[k];
    if (t == ValueType::BOOL) return v.arr_b[k] != 0;
    if (t == ValueType::STRING) return v.arr_s[k];
    return v.arr_f[k];
  };
  if (gguf::is_unsigned_type(v.type)) return v.u;
  if (gguf::is_signed_type(v.type)) return v.i;
  switch (v.type) {
    case ValueType::FLOAT32: case ValueType::FLOAT64: return v.f;
    case ValueType::BOOL: return v.b;
    case ValueType::STRING: return v.s;
    default: break;
  }
  const size_t n = v.array_size();
  json a = json::array();
  for (size_t k = 0; k < n && k < 32; ++k) a.push_back(elem(k));
  if (n <= 32) return a;
  return json{{"count", n}, {"element_type", gguf::value_type_name(v.array_type)}, {"head", a}};
}

struct ExpertLayer {
  std::map<std::string, const TensorInfo*> parts;  // gate / up / down
  uint64_t bytes = 0;
};

std::map<int, ExpertLayer> expert_layers(const GgufModel& m) {
  static const std::regex re(R"(^blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight$)");
  std::map<int, ExpertLayer> r;
  std::smatch mt;
  for (const auto& t : m.tensors())
    if (std::regex_match(t.name, mt, re)) {
      auto& l = r[std::stoi(mt[1].str())];
      l.parts[mt[2].str()] = &t;
      l.bytes += t.nbytes;
    }
  return r;
}

/// The loader's checks (Model::load: config keys, tensor names/shapes/types, tid2eid range,
/// tokenizer) plus a short forward pass whose logits must be finite. Appends problems; fills
/// `report`. Prints progress when `print`.
void validate_loads(const std::string& path, std::vector<std::string>& problems, json& report, bool print) {
  ModelOptions mo;
  mo.threads = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto loaded = Model::load(path, mo);
  if (!loaded) {
    problems.push_back("the loader refuses it (run, score, perplexity, bench fail the same way): " +
                       loaded.error().message);
    report["loads"] = false;
    return;
  }
  report["loads"] = true;
  std::shared_ptr<Model> m = loaded.value();
  const ModelConfig& c = m->config();
  if (print)
    fmt::print("validate: loads as deepseek4: {} layers, dim {}, vocab {}, {} routed experts per layer (top-{}), "
               "context {} ({:.2f} s)\n", c.n_layer, c.dim, c.vocab, c.n_expert, c.n_expert_used, c.n_ctx,
               seconds_since(t0));
  auto tok = text_tokenizer(*m, path);
  // A checkpoint folder without tokenizer.json loads and serves token ids (`score --token-ids`):
  // a note, not a problem. A GGUF's tokenizer.ggml.* metadata is part of the file, so a missing or
  // broken one is a problem (text commands refuse it).
  const bool folder_without_tokenizer = !m->tokenizer() && std::filesystem::is_directory(path);
  if (!tok && folder_without_tokenizer) {
    if (print) fmt::print("validate: note: no tokenizer.json in the folder: text commands refuse it, token-id commands work\n");
  } else if (!tok) {
    problems.push_back("tokenizer: " + tok.error().message);
  }
  // Forward check: enough tokens to fill a ratio-128 compressor block and every vocabulary entry
  // of a small model (the embedding rows), a few tokens of a large one.
  const bool small = m->weight_bytes() < (uint64_t{4} << 30);
  const int64_t want = small ? std::max<int64_t>(136, std::min<int64_t>(c.vocab, 1024)) : 8;
  const int64_t n = std::min<int64_t>(want, c.n_ctx);
  std::vector<int32_t> ids;
  const int32_t bos = tok ? tok.value()->bos_id() : -1;
  for (int64_t i = 0; i < n; ++i) ids.push_back(i == 0 && bos >= 0 ? bos : int32_t(i % c.vocab));
  auto session = Session::create(m);
  if (!session) {
    problems.push_back(session.error().message);
    return;
  }
  std::vector<float> logits;
  t0 = std::chrono::steady_clock::now();
  auto r = [&] {
    Progress p("validate", [n] { return "forward pass of " + std::to_string(n) + " tokens"; });
    return session.value()->eval(ids, &logits, nullptr);
  }();
  if (!r) {
    problems.push_back("forward pass of " + std::to_string(n) + " tokens failed: " + r.error().message);
    return;
  }
  report["forward_tokens"] = n;
  if (auto f = check_finite_logits(logits, c.vocab, 0, path); !f) {
    problems.push_back("forward pass of " + std::to_string(n) + " tokens: " + f.error().message.substr(0, f.error().message.find(": its weights")));
    report["forward_finite"] = false;
    return;
  }
  report["forward_finite"] = true;
  if (print) fmt::print("validate: forward pass of {} tokens: finite logits ({:.2f} s)\n", n, seconds_since(t0));
}

/// Deep checks (every tensor's data) and the loader's checks; returns the problems found (empty
/// = OK: the file loads and runs) and fills `report`.
std::vector<std::string> validate(const GgufModel& m, json& report, bool print) {
  std::vector<std::string> problems;
  uint64_t checked = 0, unchecked = 0, bad_tensors = 0;
  constexpr size_t kShown = 20;  // tensors named; the rest counted
  uint64_t total_bytes = 0;
  for (const auto& t : m.tensors()) total_bytes += t.nbytes;
  std::atomic<uint64_t> done_bytes{0};
  std::optional<Progress> progress;
  if (print)
    progress.emplace("validate", [&] {
      return "checked " + std::to_string(done_bytes.load() >> 20) + " of " + std::to_string(total_bytes >> 20) +
             " MiB of tensor data";
    });
  for (const auto& t : m.tensors()) {
    done_bytes += t.nbytes;
    auto c = gguf::check_tensor_data(t);
    if (!c.checked) {
      ++unchecked;
      continue;
    }
    ++checked;
    if (c.bad && bad_tensors++ < kShown)
      problems.push_back(fmt::format("tensor '{}' ({}): {} bad of {} (first at block/element {}): {}", t.name,
                                     ggml_type_name(t.type), c.bad, c.blocks_checked, c.first_bad, c.problem));
  }
  progress.reset();
  if (bad_tensors > kShown)
    problems.push_back(fmt::format("... and {} more tensors with non-finite data", bad_tensors - kShown));
  // ggml's offset rule (offsets equal the running padded sum) is informational: we accept any
  // aligned, non-overlapping layout, ggml does not.
  bool ggml_layout = true;
  for (size_t s = 0; s < m.shards().size(); ++s) {
    uint64_t off = 0;
    const uint64_t a = m.shards()[s].alignment;
    for (const auto& t : m.tensors())
      if (t.shard == int(s)) {
        if (t.offset != off) ggml_layout = false;
        off += (t.nbytes + a - 1) / a * a;
      }
  }
  report["tensors_checked"] = checked;
  report["tensors_without_deep_check"] = unchecked;
  report["ggml_offset_layout"] = ggml_layout;
  if (print)
    fmt::print("validate: {} tensors deep-checked, {} without a deep check (integer types), "
               "offsets {} ggml's running padded sum\n", checked, unchecked, ggml_layout ? "follow" : "do NOT follow");

  // DeepSeek-V4 routed-expert layout (summary line), from the file's own keys.
  auto arch = m.metadata().get_string("general.architecture");
  if (arch && *arch == "deepseek4") {
    auto blocks = m.metadata().get_int("deepseek4.block_count");
    auto n_exp = m.metadata().get_int("deepseek4.expert_count");
    if (blocks && n_exp) {
      const auto layers = expert_layers(m);
      uint64_t n_tensors = 0, bytes = 0;
      for (const auto& [l, e] : layers) {
        n_tensors += e.parts.size();
        bytes += e.bytes;
      }
      report["deepseek4"] = {{"layers", *blocks}, {"experts", *n_exp}, {"expert_tensors", n_tensors}, {"expert_bytes", bytes}};
      if (print)
        fmt::print("validate: deepseek4 layout: {} layers, {} routed experts per layer, {} expert tensors, {} ({} bytes)\n",
                   *blocks, *n_exp, n_tensors, human_bytes(bytes), bytes);
    }
  }
  validate_loads(m.path(), problems, report, print);
  return problems;
}

int dump_tensor(const GgufModel& m) {
  const TensorInfo* t = m.find(args.dump);
  if (!t) {
    fmt::print(stderr, "ds4-offload inspect: error: {}: no tensor named '{}'\n", m.path(), args.dump);
    return 1;
  }
  const auto type = static_cast<GgmlType>(t->type);
  if (!cpu::can_dequantize(type)) {
    fmt::print(stderr, "ds4-offload inspect: error: tensor '{}': cannot dequantize type {}\n", t->name, ggml_type_name(t->type));
    return 1;
  }
  if (auto c = cli::check_output_not_input(args.out, "--out", {args.model}); !c) {
    fmt::print(stderr, "ds4-offload inspect: error: {}\n", c.error().message);
    return 1;
  }
  AtomicOutputFile f(args.out, "--out");
  if (auto o = f.open(); !o) return fail("inspect", o.error().message);
  std::vector<float> row(size_t(t->ne[0]));
  const uint64_t rb = t->row_bytes();
  for (int64_t r = 0; r < t->nrows(); ++r) {
    cpu::dequantize_row(type, t->data + uint64_t(r) * rb, row.data(), t->ne[0]);
    if (auto w = f.write(row.data(), row.size() * sizeof(float)); !w) return fail("inspect", w.error().message);
  }
  if (auto c = f.commit(); !c) return fail("inspect", c.error().message);
  fmt::print(stderr, "inspect: wrote '{}' ({} {}, {} rows x {} floats) to {}\n", t->name, ggml_type_name(t->type),
             dims(*t), t->nrows(), t->ne[0], args.out);
  return 0;
}

int run() {
  // A safetensors checkpoint is listed as the deepseek4 view it binds to (llama.cpp names).
  OfficialCheckpointStats st;
  const bool official = gguf::is_safetensors_path(args.model);
  auto opened = official ? open_official_checkpoint(args.model, &st) : GgufModel::open(args.model);
  if (!opened) {
    fmt::print(stderr, "ds4-offload inspect: error: {}\n", opened.error().message);
    return 1;
  }
  const GgufModel& m = *opened;
  if (!args.dump.empty()) return dump_tensor(m);

  struct Group { uint64_t count = 0, bytes = 0; };
  std::map<std::string, Group> groups;
  uint64_t total = 0;
  for (const auto& t : m.tensors()) {
    auto& g = groups[std::string(ggml_type_name(t.type))];
    ++g.count;
    g.bytes += t.nbytes;
    total += t.nbytes;
  }
  const auto layers = expert_layers(m);

  json j;
  if (args.json) {
    j["path"] = m.path();
    for (const auto& s : m.shards())
      j["shards"].push_back({{"path", s.path}, {"version", s.version}, {"alignment", s.alignment},
                             {"file_size", s.file_size}, {"data_offset", s.data_offset}, {"n_tensors", s.n_tensors}});
    for (const auto& [k, v] : m.metadata().entries())
      j["metadata"][k] = {{"type", v.type == ValueType::ARRAY ? "ARRAY of " + gguf::value_type_name(v.array_type)
                                                              : gguf::value_type_name(v.type)},
                          {"value", value_json(v)}};
    for (const auto& [name, g] : groups) j["types"][name] = {{"tensors", g.count}, {"bytes", g.bytes}};
    j["tensor_bytes"] = total;
    for (const auto& [l, e] : layers) {
      json parts;
      for (const auto& [p, t] : e.parts) parts[p] = {{"type", ggml_type_name(t->type)}, {"bytes", t->nbytes}};
      j["expert_bytes_per_layer"][std::to_string(l)] = {{"bytes", e.bytes}, {"parts", parts}};
    }
    for (const auto& t : m.tensors())
      j["tensors"].push_back({{"name", t.name}, {"type", ggml_type_name(t.type)}, {"ne", std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                              {"shard", t.shard}, {"offset", t.offset}, {"nbytes", t.nbytes}});
  } else {
    if (official)
      fmt::print("{}: safetensors checkpoint, {} shard(s), {} tensors read ({}; declared: {}), bound as {} deepseek4 tensors, {} of tensor data\n"
                 "  repacked once at load: {} FP8 tensors -> F8_E4M3_R128, {} FP4 expert matrices -> MXFP4, {} NVFP4 expert "
                 "matrices -> NVFP4_S2 ({} written in {:.2f} s); {} used in place; tokenizer.json: {}\n",
                 m.path(), m.shards().size(), st.tensors, st.quant, st.declared, m.tensors().size(), human_bytes(total), st.fp8_tensors,
                 st.mxfp4_experts, st.nvfp4_experts, human_bytes(st.repacked_bytes), st.seconds, human_bytes(st.in_place_bytes),
                 st.tokenizer_json ? "converted" : "absent");
    else
      fmt::print("{}: {} shard(s), GGUF v{}, {} tensors, {} of tensor data\n", m.path(), m.shards().size(),
                 m.shards()[0].version, m.tensors().size(), human_bytes(total));
    for (const auto& s : m.shards())
      fmt::print("  shard {}: {} tensors, alignment {}, data at {}, {} bytes\n", s.path, s.n_tensors, s.alignment,
                 s.data_offset, s.file_size);
    fmt::print("metadata ({} keys):\n", m.metadata().entries().size());
    for (const auto& [k, v] : m.metadata().entries()) fmt::print("  {:<48} {}\n", k, gguf::value_to_string(v));
    fmt::print("tensors by type:\n");
    for (const auto& [name, g] : groups)
      fmt::print("  {:<8} {:>6} tensors {:>14} bytes ({})\n", name, g.count, g.bytes, human_bytes(g.bytes));
    if (!layers.empty()) {
      fmt::print("routed experts per layer (ffn_gate/up/down_exps):\n");
      for (const auto& [l, e] : layers) {
        std::string types;
        for (const char* p : {"gate", "up", "down"})
          types += fmt::format(" {}={}", p, e.parts.count(p) ? ggml_type_name(e.parts.at(p)->type) : "-");
        fmt::print("  blk.{:<3} {:>14} bytes ({}){}\n", l, e.bytes, human_bytes(e.bytes), types);
      }
    }
  }

  int rc = 0;
  size_t report_problems = 0;
  std::string first_problem;
  if (args.validate) {
    json report;
    auto problems = validate(m, report, !args.json);
    report["problems"] = problems;
    report_problems = problems.size();
    if (!problems.empty()) first_problem = problems[0];
    for (const auto& p : problems) fmt::print(stderr, "validate: FAILED: {}\n", p);
    if (problems.empty()) {
      if (!args.json) fmt::print("validate: OK\n");
    } else {
      rc = 2;  // reported after the JSON (below)
    }
    if (args.json) j["validate"] = report;
  }
  if (args.json) fmt::print("{}\n", j.dump(2));
  if (auto w = check_stdout("the inspect output"); !w) return fail("inspect", w.error().message);
  if (rc == 2) {
    // One line naming the first problem (its first two lines joined); the rest are listed above.
    std::string first = first_problem;
    if (size_t nl = first.find("\n  "); nl != std::string::npos) first.replace(nl, 3, " ");
    first = first.substr(0, first.find('\n'));
    return fail("inspect", fmt::format("validate: {}{}", first,
                                       report_problems > 1 ? fmt::format(" (and {} more problem{}, listed above)",
                                                                         report_problems - 1, report_problems > 2 ? "s" : "")
                                                           : std::string()));
  }
  return rc;
}

const CommandRegistrar reg{{"inspect", setup, run}};

}  // namespace
}  // namespace ds4::cli
