// Official safetensors checkpoints (label golden): ../shared/fixtures/dsv4-tiny (DeepSeek FP8 +
// FP4 experts) and ../shared/fixtures/dsv4-tiny-nvfp4 (NVIDIA ModelOpt NVFP4 experts, MXFP4 mtp.*).
// - the folder's Checkpoint view decodes to the fixture GGUF's FP32 values tensor for tensor, bit
//   for bit (the GGUF holds the same weights dequantized exactly, experts as MXFP4), and its
//   MXFP4 expert bytes are the GGUF's;
// - logits from the folder are bit-identical to the GGUF's (f32 and q8 activations), and the
//   NVFP4 folder's to the MXFP4 folder's (f32);
// - the folder meets the `exact` golden gate (mean <= 1e-4, top-1 100 %, same greedy tokens);
// - doctored checkpoints are refused with a message naming the tensor (and block).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/dsv4_model.h"
#include "engine/load_progress.h"
#include "engine/official_checkpoint.h"
#include "gguf/safetensors.h"
#include "gguf/safetensors_writer.h"
#include "checkpoint_doctor.h"
#include "golden_data.h"
#include "kernels/cpu/quant_ref.h"
#include "support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kVocab = 512;

fs::path folder() { return test::tiny_dir(); }
fs::path nvfp4_folder() { return test::fixtures_dir() / "dsv4-tiny-nvfp4"; }

/// Every row of `t` decoded to FP32.
std::vector<float> decode_all(const gguf::TensorInfo& t) {
  std::vector<float> v(size_t(t.nelements()));
  if (static_cast<GgmlType>(t.type) == GgmlType::I32) {
    for (int64_t i = 0; i < t.nelements(); ++i) {
      int32_t x;
      std::memcpy(&x, t.data + 4 * i, 4);
      v[size_t(i)] = float(x);
    }
    return v;
  }
  for (int64_t r = 0; r < t.nrows(); ++r)
    cpu::dequantize_row(static_cast<GgmlType>(t.type), t.data + r * t.row_bytes(), v.data() + r * t.ne[0], t.ne[0]);
  return v;
}

TEST(OfficialCheckpoint, ViewDecodesToTheGgufTensorForTensor) {
  auto g = gguf::GgufModel::open(test::tiny_gguf().string());
  ASSERT_TRUE(g.ok()) << g.error().message;
  OfficialCheckpointStats st;
  auto v = open_official_checkpoint(folder().string(), &st);
  ASSERT_TRUE(v.ok()) << v.error().message;
  int compared = 0, experts_same_bytes = 0;
  for (const auto& t : g->tensors()) {
    const gguf::TensorInfo* u = v->find(t.name);
    ASSERT_TRUE(u) << t.name << " missing from the folder view";
    EXPECT_EQ(u->ne, t.ne) << t.name;
    const auto a = decode_all(t), b = decode_all(*u);
    ASSERT_EQ(a.size(), b.size()) << t.name;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << t.name << " decodes differently ("
                                                              << ggml_type_name(t.type) << " vs " << ggml_type_name(u->type) << ")";
    if (static_cast<GgmlType>(t.type) == GgmlType::MXFP4) {
      ASSERT_EQ(u->type, t.type) << t.name;
      EXPECT_EQ(std::memcmp(t.data, u->data, t.nbytes), 0) << t.name << ": MXFP4 bytes differ";
      ++experts_same_bytes;
    }
    ++compared;
  }
  // The view has the GGUF's tensors plus the MTP block (blk.6.nextn.*), which the GGUF lacks.
  int mtp = 0;
  for (const auto& u : v->tensors()) {
    if (g->find(u.name)) continue;
    EXPECT_EQ(u.name.rfind("blk.6.nextn.", 0), 0u) << u.name << ": extra tensor outside the MTP block";
    ++mtp;
  }
  std::printf("  %d tensors bit-identical after decoding (%d MXFP4 expert tensors byte-identical), %d MTP tensors kept\n",
              compared, experts_same_bytes, mtp);
  std::printf("  repacks: %d FP8 tensors, %d FP4 expert matrices; %.1f MiB in place, %.1f MiB repacked in %.3f s\n",
              st.fp8_tensors, st.mxfp4_experts, st.in_place_bytes / 1048576.0, st.repacked_bytes / 1048576.0, st.seconds);
  EXPECT_EQ(experts_same_bytes, 18);
  EXPECT_GT(mtp, 30);
  EXPECT_EQ(st.nvfp4_experts, 0);
}

// The load-progress counters (engine/load_progress.h) reach the checkpoint's bytes: total = every
// tensor's bytes (from the safetensors headers, summed here independently), done = the bytes bound
// (repacks write the weights with their scales; FP8 rows are +1/128 over their source).
TEST(OfficialCheckpoint, LoadProgressCountsTheWeightBytes) {
  auto ck = gguf::SafetensorsCheckpoint::open(folder().string());
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  uint64_t weights = 0;
  for (const auto& t : ck->tensors()) weights += t.nbytes;
  auto v = open_official_checkpoint(folder().string());
  ASSERT_TRUE(v.ok()) << v.error().message;
  const uint64_t total = load_progress().total.load(), done = load_progress().done.load();
  EXPECT_GT(total, 1u << 20);
  EXPECT_EQ(total, weights);
  EXPECT_GE(done, total - total / 100) << done << " of " << total;
  EXPECT_LE(done, total + total / 50) << done << " of " << total;
}

TEST(OfficialCheckpoint, Nvfp4ExpertsChosenPerTensorAndDecodeLikeMxfp4) {
  if (!fs::exists(nvfp4_folder() / "config.json")) GTEST_SKIP() << "no dsv4-tiny-nvfp4 fixture";
  auto a = open_official_checkpoint(folder().string());
  OfficialCheckpointStats st;
  auto b = open_official_checkpoint(nvfp4_folder().string(), &st);
  ASSERT_TRUE(a.ok() && b.ok()) << (b.ok() ? "" : b.error().message);
  int nv = 0, mx = 0;
  for (const auto& t : b->tensors()) {
    if (t.name.find("_exps.weight") == std::string::npos) continue;
    const bool mtp = t.name.find(".nextn.") != std::string::npos;
    // layers.* experts are NVFP4; the mtp.* experts stay MXFP4 (the per-tensor choice).
    EXPECT_EQ(static_cast<GgmlType>(t.type), mtp ? GgmlType::MXFP4 : GgmlType::NVFP4_S2) << t.name;
    (mtp ? mx : nv)++;
    const gguf::TensorInfo* u = a->find(t.name);
    ASSERT_TRUE(u) << t.name;
    const auto x = decode_all(t), y = decode_all(*u);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0) << t.name << ": NVFP4 decode differs from MXFP4";
  }
  EXPECT_EQ(nv, 18);
  EXPECT_EQ(mx, 3);
  EXPECT_EQ(st.nvfp4_experts, 18 * 16);
  EXPECT_EQ(st.mxfp4_experts, 3 * 16);
  EXPECT_EQ(st.declared, "modelopt NVFP4 (config.json), NVFP4 (hf_quant_config.json)");
}

std::vector<float> prefill_logits(const std::string& path, Activations act, const std::vector<int32_t>& ids) {
  ModelOptions o;
  o.activations = act;
  o.threads = 2;
  auto m = Dsv4Model::open(path, o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  if (!m.ok()) return {};
  Dsv4Session s(*m);
  std::vector<float> all;
  auto e = s.eval(ids, &all, nullptr);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return !a.empty() && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(OfficialCheckpoint, FolderLogitsBitIdenticalToGguf) {
  const auto prompts = test::load_goldens();
  for (Activations act : {Activations::F32, Activations::Q8}) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto g = prefill_logits(test::tiny_gguf().string(), act, prompts[i].ids);
      const auto f = prefill_logits(folder().string(), act, prompts[i].ids);
      EXPECT_TRUE(same_bits(g, f)) << "prompt " << i << (act == Activations::F32 ? " f32" : " q8")
                                   << ": folder logits differ from the GGUF's";
    }
  }
  if (!fs::exists(nvfp4_folder() / "config.json")) return;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto a = prefill_logits(folder().string(), Activations::F32, prompts[i].ids);
    const auto b = prefill_logits(nvfp4_folder().string(), Activations::F32, prompts[i].ids);
    EXPECT_TRUE(same_bits(a, b)) << "prompt " << i << ": NVFP4 folder logits differ from the MXFP4 folder's";
  }
  // With Q8_1 activations the NVFP4 dot sums two 16-element halves per 32 (MXFP4: one 32); on
  // this fixture both halves carry the same power-of-two scale, so the integer dots still agree
  // bit for bit (not a property of NVFP4 checkpoints in general).
  const auto a = prefill_logits(folder().string(), Activations::Q8, prompts[1].ids);
  const auto b = prefill_logits(nvfp4_folder().string(), Activations::Q8, prompts[1].ids);
  EXPECT_TRUE(same_bits(a, b)) << "q8: NVFP4 folder logits differ from the MXFP4 folder's";
}

// The repacked view goes through tensor parallelism and the staging tiers like a GGUF: --tp 2 and
// the host tier give the same bits; the NVMe tier (which reads the file) is refused with a reason.
TEST(OfficialCheckpoint, FolderUnderTensorParallelAndStagingTiers) {
  const auto p = test::load_goldens().at(1);
  const auto base = prefill_logits(folder().string(), Activations::F32, p.ids);
  auto run = [&](ModelOptions o) {
    std::vector<float> all;
    auto m = Dsv4Model::open(folder().string(), o);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    if (!m.ok()) return all;
    Dsv4Session s(*m);
    EXPECT_TRUE(s.eval(p.ids, &all, nullptr).ok());
    return all;
  };
  ModelOptions tp2;
  tp2.tp = 2;
  EXPECT_TRUE(same_bits(run(tp2), base)) << "--tp 2";
  ModelOptions host;
  host.experts_tier = "host";
  EXPECT_TRUE(same_bits(run(host), base)) << "--experts-tier host";
  // tp 2: the rank threads' tier store (staging::make_rank_tier_store) over the repacked experts.
  ModelOptions host2 = host;
  host2.tp = 2;
  EXPECT_TRUE(same_bits(run(host2), base)) << "--experts-tier host --tp 2";
  for (int tp : {1, 2}) {
    ModelOptions nvme;
    nvme.experts_tier = "nvme";
    nvme.tp = tp;
    auto m = Dsv4Model::open(folder().string(), nvme);
    ASSERT_FALSE(m.ok()) << "tp " << tp;
    EXPECT_NE(m.error().message.find("--experts-tier nvme reads experts from the model file, but this checkpoint's "
                                     "experts are repacked in memory at load"),
              std::string::npos)
        << m.error().message;
  }
}

TEST(OfficialCheckpoint, FolderMeetsExactGoldens) {
  ModelOptions o;
  o.threads = 2;
  auto m = Dsv4Model::open(folder().string(), o);
  ASSERT_TRUE(m.ok()) << m.error().message;
  for (const auto& p : test::load_goldens()) {
    Dsv4Session s(*m);
    std::vector<float> pre, row, dec;
    ASSERT_TRUE(s.eval(p.ids, &pre, nullptr).ok());
    int32_t tok = test::argmax_row(pre, int64_t(p.ids.size()) - 1, kVocab);
    std::vector<int32_t> greedy;
    for (size_t k = 0; k < p.greedy_exact.size(); ++k) {
      greedy.push_back(tok);
      ASSERT_TRUE(s.eval(std::span<const int32_t>(&tok, 1), nullptr, &row).ok());
      dec.insert(dec.end(), row.begin(), row.end());
      tok = test::argmax_row(row, 0, kVocab);
    }
    const auto dp = test::compare_logprobs(pre, test::read_f32(p.exact_prefill), kVocab);
    const auto dd = test::compare_logprobs(dec, test::read_f32(p.exact_decode), kVocab);
    std::printf("  folder, %zu-token prompt: prefill %s; decode %s\n", p.ids.size(), test::describe(dp).c_str(),
                test::describe(dd).c_str());
    test::expect_exact_gate(dp, dd, "folder prompt of " + std::to_string(p.ids.size()));
    EXPECT_EQ(greedy, p.greedy_exact);
  }
}

// --activations fp8 (the reference's QAT simulation) against the fixture's `qat` goldens. The qat
// reference is chaotic on this random model (README: its own prefill and decode differ by up to
// 2.17 logits on prompt 0; one-ulp differences flip FP8/FP4 roundings, then routing and indexer
// top-k), so the gate is: (1) the positions before the first divergence match qat to 1e-4 while
// f32 activations do not (the QDQ semantics are REF's), (2) over all positions fp8 is at most half
// as far from qat as f32 is; figures, and the first router/indexer set that differs, are printed.
TEST(OfficialCheckpoint, Fp8ActivationsTrackQatGoldens) {
  const auto prompts = test::load_goldens();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    ModelOptions o;
    o.threads = 2;
    o.activations = Activations::Fp8;
    auto m = Dsv4Model::open(folder().string(), o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    Dsv4Session s(*m);
    ForwardTrace tr;
    s.set_trace(&tr);
    std::vector<float> fp8;
    ASSERT_TRUE(s.eval(p.ids, &fp8, nullptr).ok());
    const auto f32 = prefill_logits(folder().string(), Activations::F32, p.ids);
    const auto qat = test::read_f32(p.qat_prefill);
    const auto d8 = test::compare_logprobs(fp8, qat, kVocab), d32 = test::compare_logprobs(f32, qat, kVocab);
    const auto dx = test::compare_logprobs(fp8, test::read_f32(p.exact_prefill), kVocab);
    // Leading positions: per-row comparison until the first row above 1e-3.
    int64_t lead = 0;
    for (; lead < int64_t(p.ids.size()); ++lead) {
      std::vector<float> a(fp8.begin() + lead * kVocab, fp8.begin() + (lead + 1) * kVocab);
      std::vector<float> b(qat.begin() + lead * kVocab, qat.begin() + (lead + 1) * kVocab);
      if (test::compare_logprobs(a, b, kVocab).max_abs > 1e-3) break;
    }
    std::printf("  prompt %zu: fp8 vs qat %s; f32 vs qat %s; fp8 vs exact %s; first %lld positions within 1e-3 of qat\n", i,
                test::describe(d8).c_str(), test::describe(d32).c_str(), test::describe(dx).c_str(), (long long)lead);
    ASSERT_GE(lead, 4) << "prompt " << i << ": fp8 differs from qat from position " << lead;
    std::vector<float> a(fp8.begin(), fp8.begin() + lead * kVocab), b(qat.begin(), qat.begin() + lead * kVocab);
    std::vector<float> c(f32.begin(), f32.begin() + lead * kVocab);
    EXPECT_LE(test::compare_logprobs(a, b, kVocab).mean_abs, 1e-4);
    EXPECT_GT(test::compare_logprobs(c, b, kVocab).mean_abs, 1e-2) << "f32 should differ from qat";
    EXPECT_LE(d8.mean_abs, 0.5 * d32.mean_abs);
    if (i != 0) continue;
    for (const auto& [name, file] : p.exact_records) {
      std::string qfile = file;
      qfile.replace(qfile.find("exact"), 5, "qat");
      const auto ref = test::read_i32(qfile);
      const bool router = name.rfind("router_layer", 0) == 0;
      const int layer = std::stoi(name.substr(name.find("layer") + 5));
      const auto& ours = router ? tr.router.at(layer) : tr.indexer.at(layer);
      const size_t width = ref.size() / p.ids.size();
      int64_t differ = 0, first = -1;
      for (size_t t = 0; t < p.ids.size(); ++t) {
        std::set<int32_t> x, y(ours[t].begin(), ours[t].end());
        for (size_t k = 0; k < width; ++k)
          if (ref[t * width + k] >= 0) x.insert(ref[t * width + k]);
        if (x != y && differ++ == 0) first = int64_t(t);
      }
      std::printf("    %-16s %lld / %zu token sets differ from qat (first at position %lld)\n", name.c_str(), (long long)differ,
                  p.ids.size(), (long long)first);
    }
  }
}

std::string open_error(const fs::path& p) {
  auto m = Dsv4Model::open(p.string(), ModelOptions{});
  return m.ok() ? std::string("(opened)") : m.error().message;
}

TEST(OfficialCheckpoint, DoctoredCheckpointsAreRefused) {
  auto none = [](const std::string&, std::vector<uint8_t>&) {};
  struct Case {
    const char* what;
    std::function<void(const std::string&, std::vector<uint8_t>&)> edit;
    std::function<void(nlohmann::json&)> cfg;
    std::function<bool(const std::string&)> drop;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"tid2eid out of range",
       [](const std::string& n, std::vector<uint8_t>& b) {
         if (n == "layers.1.ffn.gate.tid2eid") {
           const int64_t bad = 16;
           std::memcpy(b.data() + 8 * 5, &bad, 8);
         }
       },
       {}, {}, "tensor 'layers.1.ffn.gate.tid2eid': entry 5 (token 1): expected an expert id 0..15, found 16"},
      {"FP8 scale NaN",
       [](const std::string& n, std::vector<uint8_t>& b) {
         if (n == "layers.2.attn.wq_b.scale") b[3] = 0xFF;
       },
       {}, {}, "tensor 'layers.2.attn.wq_b.scale': block [3, 0] is 0xFF (E8M0 NaN)"},
      {"FP4 expert scale NaN",
       [](const std::string& n, std::vector<uint8_t>& b) {
         if (n == "layers.4.ffn.experts.9.w2.scale") b[1] = 0xFF;
       },
       {}, {}, "tensor 'layers.4.ffn.experts.9.w2.scale': row 0 block 1 is 0xFF"},
      {"config key missing", none, [](nlohmann::json& c) { c.erase("o_groups"); }, {}, "config.json: key 'o_groups' missing"},
      {"config scoring", none, [](nlohmann::json& c) { c["scoring_func"] = "sigmoid"; }, {}, "expected 'sqrtsoftplus'"},
      {"config value of another JSON type", none, [](nlohmann::json& c) { c["model_type"] = 5; }, {}, "unexpected JSON type"},
      {"config rope_scaling type", none, [](nlohmann::json& c) { c["rope_scaling"]["type"] = 3; }, {}, "unexpected JSON type"},
      {"config float key not a number", none, [](nlohmann::json& c) { c["rope_theta"] = "10000"; }, {},
       "key 'rope_theta' is string, expected a number"},
      {"expert missing", none, {}, [](const std::string& n) { return n.rfind("layers.3.ffn.experts.7.w3", 0) == 0; },
       "blk.3.ffn_up_exps.weight: expected 16 routed experts, found 15 (expert 7 missing)"},
      {"FP8 scale missing", none, {}, [](const std::string& n) { return n == "layers.0.attn.wkv.scale"; },
       "tensor 'layers.0.attn.wkv.weight': F8_E4M3 weight without 'layers.0.attn.wkv.scale'"},
      {"dense tensor missing", none, {}, [](const std::string& n) { return n == "layers.5.attn.compressor.ape"; },
       "tensor 'blk.5.attn_compressor_ape.weight': expected shape"},
  };
  for (const Case& c : cases) {
    const fs::path dst = test::scratch_dir("official_doctored");
    test::doctor(folder(), dst, c.edit, c.cfg, c.drop);
    const std::string e = open_error(dst);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": " << e;
  }
  // An unexpected official name.
  const fs::path dst = test::scratch_dir("official_doctored_name");
  {
    auto ck = gguf::SafetensorsCheckpoint::open(folder().string());
    ASSERT_TRUE(ck.ok());
    test::doctor(folder(), dst, none);
    const std::vector<float> v{1};
    ASSERT_TRUE(gguf::write_safetensors((dst / "extra.safetensors").string(),
                                        {{"layers.0.attn.wq_c.weight", gguf::StDtype::F32, {1}, reinterpret_cast<const uint8_t*>(v.data()), 4}}).ok());
    std::ifstream f(dst / "model.safetensors.index.json");
    nlohmann::json idx = nlohmann::json::parse(f);
    idx["weight_map"]["layers.0.attn.wq_c.weight"] = "extra.safetensors";
    std::ofstream(dst / "model.safetensors.index.json") << idx.dump();
  }
  EXPECT_NE(open_error(dst).find("tensor 'layers.0.attn.wq_c.weight': unexpected official tensor name"), std::string::npos)
      << open_error(dst);
}

// tokenizer.json (HF tokenizers BPE) beside the shards becomes the tokenizer: written here from
// the fixture GGUF's own vocabulary and merges, the folder must tokenize text as the GGUF does.
TEST(OfficialCheckpoint, TokenizerJsonGivesTheGgufTokenizer) {
  auto g = gguf::GgufModel::open(test::tiny_gguf().string());
  ASSERT_TRUE(g.ok());
  auto tokens = g->metadata().get_string_array("tokenizer.ggml.tokens");
  auto merges = g->metadata().get_string_array("tokenizer.ggml.merges");
  auto types = g->metadata().get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens.ok() && merges.ok() && types.ok());
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  for (size_t i = 0; i < tokens->size(); ++i) {
    if ((*types)[i] == 3) added.push_back({{"id", i}, {"content", (*tokens)[i]}, {"special", true}});
    else vocab[(*tokens)[i]] = i;
  }
  nlohmann::json tj = {{"version", "1.0"}, {"added_tokens", added},
                       {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", *merges}}}};
  const fs::path dst = test::scratch_dir("official_tokenizer");
  test::doctor(folder(), dst, [](const std::string&, std::vector<uint8_t>&) {});
  std::ofstream(dst / "tokenizer.json") << tj.dump();
  auto a = Dsv4Model::open(test::tiny_gguf().string(), ModelOptions{});
  auto b = Dsv4Model::open(dst.string(), ModelOptions{});
  ASSERT_TRUE(a.ok() && b.ok()) << (b.ok() ? "" : b.error().message);
  ASSERT_TRUE((*a)->tokenizer() && (*b)->tokenizer());
  for (const char* text : {"hello world", "the quick brown fox jumps over the lazy dog 123", "a\nb  c\u00e9"}) {
    const auto x = (*a)->tokenizer()->encode(text, true), y = (*b)->tokenizer()->encode(text, true);
    EXPECT_EQ(x, y) << text;
    EXPECT_GT(x.size(), 1u);
  }
  EXPECT_EQ((*b)->tokenizer()->vocab_size(), 512);
  // Without tokenizer.json the folder has no tokenizer (token-id commands still work).
  auto c = Dsv4Model::open(folder().string(), ModelOptions{});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->tokenizer(), nullptr);
}

// Draft-block tensors without a llama.cpp name (the 0731 release's DSpark heads) are kept byte for
// byte under blk.{n_layer}.nextn.raw.*, with their scales; the model still opens and runs.
TEST(OfficialCheckpoint, UnknownDraftTensorsAreKeptRaw) {
  const fs::path dst = test::scratch_dir("official_dspark");
  test::doctor(folder(), dst, [](const std::string&, std::vector<uint8_t>&) {});
  std::vector<uint8_t> w(256 * 128, 0x38), s(2, 127);
  const std::vector<float> bias(4, 0.5f);
  ASSERT_TRUE(gguf::write_safetensors((dst / "extra.safetensors").string(),
                                      {{"mtp.0.main_proj.weight", gguf::StDtype::F8_E4M3, {128, 256}, w.data(), w.size()},
                                       {"mtp.0.main_proj.scale", gguf::StDtype::F8_E8M0, {1, 2}, s.data(), s.size()},
                                       {"mtp.0.markov.bias", gguf::StDtype::F32, {4}, reinterpret_cast<const uint8_t*>(bias.data()), 16}})
                  .ok());
  {
    std::ifstream f(dst / "model.safetensors.index.json");
    nlohmann::json idx = nlohmann::json::parse(f);
    for (const char* n : {"mtp.0.main_proj.weight", "mtp.0.main_proj.scale", "mtp.0.markov.bias"})
      idx["weight_map"][n] = "extra.safetensors";
    std::ofstream(dst / "model.safetensors.index.json") << idx.dump();
  }
  auto v = open_official_checkpoint(dst.string());
  ASSERT_TRUE(v.ok()) << v.error().message;
  const gguf::TensorInfo* a = v->find("blk.6.nextn.raw.main_proj.weight");
  const gguf::TensorInfo* b = v->find("blk.6.nextn.raw.main_proj.scale");
  const gguf::TensorInfo* c = v->find("blk.6.nextn.raw.markov.bias");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(static_cast<GgmlType>(a->type), GgmlType::I8);
  EXPECT_EQ(a->nbytes, w.size());
  EXPECT_EQ(std::memcmp(a->data, w.data(), w.size()), 0);
  EXPECT_EQ(static_cast<GgmlType>(c->type), GgmlType::F32);
  EXPECT_TRUE(Dsv4Model::open(dst.string(), ModelOptions{}).ok());
}

// A re-export whose names carry a `model.` prefix binds to the same view.
TEST(OfficialCheckpoint, ModelPrefixIsAccepted) {
  const fs::path dst = test::scratch_dir("official_prefix");
  test::doctor(folder(), dst, [](const std::string&, std::vector<uint8_t>&) {}, {}, {},
               [](const std::string& n) { return "model." + n; });
  auto a = open_official_checkpoint(folder().string());
  auto b = open_official_checkpoint(dst.string());
  ASSERT_TRUE(a.ok() && b.ok()) << (b.ok() ? "" : b.error().message);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const auto& t : a->tensors()) {
    const gguf::TensorInfo* u = b->find(t.name);
    ASSERT_TRUE(u) << t.name;
    EXPECT_EQ(u->type, t.type);
    EXPECT_EQ(std::memcmp(u->data, t.data, t.nbytes), 0) << t.name;
  }
}

TEST(OfficialCheckpoint, InternalTypesAreNotGgufTypes) {
  auto r = gguf::tensor_nbytes(uint32_t(GgmlType::F8_E4M3_R128), {128, 2, 1, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("ds4-internal"), std::string::npos) << r.error().message;
  EXPECT_FALSE(gguf::tensor_nbytes(uint32_t(GgmlType::NVFP4_S2), {64, 1, 1, 1}).ok());
}

}  // namespace
}  // namespace ds4
