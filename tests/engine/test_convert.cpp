// `convert` (label golden): the FP4 -> NVFP4 cast of ../shared/fixtures/dsv4-tiny reproduces
// ../shared/fixtures/dsv4-tiny-nvfp4 tensor for tensor (name, dtype, shape, bytes, shard;
// input_scale aside: the fixture's are calibration stand-ins, ours 1.0), with 100 % of blocks
// exact; the audit finds the two checkpoints identical after decoding; a source with one block
// out of E4M3 range is refused naming tensor, row and block, and nothing is written;
// `--to gguf` of the folder gives logits bit-identical to the fixture GGUF's.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "checkpoint_doctor.h"
#include "engine/checkpoint_convert.h"
#include "engine/dsv4_model.h"
#include "golden_data.h"
#include "gguf/safetensors.h"
#include "support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;

fs::path nvfp4_fixture() { return test::fixtures_dir() / "dsv4-tiny-nvfp4"; }

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

TEST(Convert, Nvfp4CastReproducesTheFixture) {
  if (!fs::exists(nvfp4_fixture() / "config.json")) GTEST_SKIP() << "no dsv4-tiny-nvfp4 fixture";
  const fs::path out = test::scratch_dir("convert_nvfp4") / "out";
  auto r = cast_checkpoint_to_nvfp4(test::tiny_dir().string(), out.string());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->blocks_exact, r->blocks);
  EXPECT_GT(r->blocks, 0u);
  EXPECT_EQ(r->expert_tensors, 6 * 16 * 3);
  std::printf("  cast: %d expert matrices, %llu / %llu blocks exact, %llu -0 nibbles, widest range %d octaves\n",
              r->expert_tensors, (unsigned long long)r->blocks_exact, (unsigned long long)r->blocks,
              (unsigned long long)r->neg_zero, r->max_octaves);
  auto a = gguf::SafetensorsCheckpoint::open(out.string());
  auto b = gguf::SafetensorsCheckpoint::open(nvfp4_fixture().string());
  ASSERT_TRUE(a.ok() && b.ok()) << (a.ok() ? "" : a.error().message);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  int same = 0;
  for (const auto& t : b->tensors()) {
    const gguf::StTensor* u = a->find(t.name);
    ASSERT_TRUE(u) << t.name << " missing from the cast";
    EXPECT_EQ(u->dtype, t.dtype) << t.name;
    EXPECT_EQ(u->shape, t.shape) << t.name;
    EXPECT_EQ(fs::path(a->shards()[size_t(u->shard)].path).filename(), fs::path(b->shards()[size_t(t.shard)].path).filename()) << t.name;
    if (ends_with(t.name, ".input_scale")) continue;
    ASSERT_EQ(u->nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.nbytes), 0) << t.name << ": bytes differ from the fixture";
    ++same;
  }
  std::printf("  %d tensors byte-identical to dsv4-tiny-nvfp4 (input_scale aside)\n", same);
  auto audit = audit_checkpoints(test::tiny_dir().string(), out.string());
  ASSERT_TRUE(audit.ok()) << audit.error().message;
  EXPECT_EQ(audit->identical, audit->tensors);
  EXPECT_TRUE(audit->only_in_a.empty() && audit->only_in_b.empty());
  EXPECT_EQ(audit->elements_exact, audit->elements);
  // Casting again into the same folder is refused.
  auto again = cast_checkpoint_to_nvfp4(test::tiny_dir().string(), out.string());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("already holds a checkpoint"), std::string::npos);
}

TEST(Convert, OutOfRangeBlockIsRefusedNamingIt) {
  const fs::path dir = test::scratch_dir("convert_doctored");
  const fs::path src = dir / "src", out = dir / "out";
  fs::create_directories(src);
  // Expert 5 of layer 2, w3 row 1 block 2: 20 octaves below its pair's largest scale.
  int pair_max = 0;
  {
    auto ck = gguf::SafetensorsCheckpoint::open(test::tiny_dir().string());
    ASSERT_TRUE(ck.ok());
    for (const char* n : {"layers.2.ffn.experts.5.w1.scale", "layers.2.ffn.experts.5.w3.scale"}) {
      const gguf::StTensor* s = ck->find(n);
      ASSERT_TRUE(s);
      for (uint64_t i = 0; i < s->nbytes; ++i) pair_max = std::max<int>(pair_max, s->data[i]);
    }
  }
  test::doctor(test::tiny_dir(), src, [&](const std::string& n, std::vector<uint8_t>& b) {
    if (n == "layers.2.ffn.experts.5.w3.scale") b[1 * 8 + 2] = uint8_t(pair_max - 20);  // [out, in/32] = [128, 8]
  });
  auto r = cast_checkpoint_to_nvfp4(src.string(), out.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("tensor 'layers.2.ffn.experts.5.w3.scale': row 1 block 2"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("20 octaves"), std::string::npos) << r.error().message;
  EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
  // The loader itself still reads the doctored folder (MXFP4 holds any E8M0 scale).
  EXPECT_TRUE(Dsv4Model::open(src.string(), ModelOptions{}).ok());
}

TEST(Convert, NegativeZeroNibblesBecomePositiveZero) {
  const fs::path dir = test::scratch_dir("convert_negzero");
  const fs::path src = dir / "src", out = dir / "out";
  fs::create_directories(src);
  test::doctor(test::tiny_dir(), src, [](const std::string& n, std::vector<uint8_t>& b) {
    if (n == "layers.0.ffn.experts.3.w2.weight") b[10] = 0x8A;  // element 21 = -0, element 20 = code 10
  });
  auto r = cast_checkpoint_to_nvfp4(src.string(), out.string());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->neg_zero, 1u);
  EXPECT_EQ(r->blocks_exact, r->blocks);
  auto ck = gguf::SafetensorsCheckpoint::open(out.string());
  ASSERT_TRUE(ck.ok());
  const gguf::StTensor* w = ck->find("layers.0.ffn.experts.3.w2.weight");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->data[10], 0x0A);
}

TEST(Convert, GgufRoundTripGivesTheFixtureLogits) {
  const fs::path out = test::scratch_dir("convert_gguf") / "tiny.gguf";
  auto r = convert_to_gguf(test::tiny_dir().string(), out.string(), GgufConvertOptions{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto p = test::load_goldens().at(1);
  auto logits = [&](const std::string& path) {
    ModelOptions o;
    o.threads = 2;
    auto m = Dsv4Model::open(path, o);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    std::vector<float> all;
    if (!m.ok()) return all;
    Dsv4Session s(*m);
    EXPECT_TRUE(s.eval(p.ids, &all, nullptr).ok());
    return all;
  };
  const auto a = logits(out.string()), b = logits(test::tiny_gguf().string());
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "converted GGUF logits differ from the fixture GGUF's";
  const auto d = test::compare_logprobs(a, test::read_f32(p.exact_prefill), 512);
  std::printf("  converted GGUF vs ref exact: %s\n", test::describe(d).c_str());
  EXPECT_LE(d.mean_abs, test::kExactMeanTol);
  EXPECT_EQ(d.top1, 1.0);
  // The converted file has the fixture GGUF's tensors (names, types, shapes).
  auto g = gguf::GgufModel::open(out.string());
  auto f = gguf::GgufModel::open(test::tiny_gguf().string());
  ASSERT_TRUE(g.ok() && f.ok());
  EXPECT_EQ(g->tensors().size(), f->tensors().size());
  for (const auto& t : f->tensors()) {
    const gguf::TensorInfo* u = g->find(t.name);
    ASSERT_TRUE(u) << t.name;
    EXPECT_EQ(u->type, t.type) << t.name;
    EXPECT_EQ(u->ne, t.ne) << t.name;
  }
  // From the NVFP4 folder: experts re-encoded as MXFP4 (exactly, on this fixture), so the audit
  // finds the fixture GGUF's values everywhere.
  if (fs::exists(nvfp4_fixture() / "config.json")) {
    const fs::path nv = out.parent_path() / "from_nvfp4.gguf";
    std::vector<std::string> lines;
    ASSERT_TRUE(convert_to_gguf(nvfp4_fixture().string(), nv.string(), GgufConvertOptions{},
                                [&](const std::string& s) { lines.push_back(s); }).ok());
    for (const auto& s : lines) EXPECT_EQ(s.find("lossy"), std::string::npos) << s;
    auto au = audit_checkpoints(nv.string(), test::tiny_gguf().string());
    ASSERT_TRUE(au.ok()) << au.error().message;
    EXPECT_EQ(au->identical, au->tensors);
    EXPECT_EQ(au->tensors, int(f->tensors().size()));
  }
  // Lossy expert types go through the quantizers and stay loadable.
  GgufConvertOptions q;
  q.experts = "q8_0";
  auto rq = convert_to_gguf(test::tiny_dir().string(), (out.parent_path() / "q8.gguf").string(), q);
  ASSERT_TRUE(rq.ok()) << rq.error().message;
  EXPECT_TRUE(Dsv4Model::open((out.parent_path() / "q8.gguf").string(), ModelOptions{}).ok());
  GgufConvertOptions bad;
  bad.experts = "q5_k";
  EXPECT_FALSE(convert_to_gguf(test::tiny_dir().string(), (out.parent_path() / "x.gguf").string(), bad).ok());
  // 256-element block types on the fixture's 128-wide expert rows: one error before any work (a
  // fresh tester hit an assertion abort in the row quantizer), and no output file.
  for (const char* t : {"q2_k", "iq2_xxs", "iq1_m"}) {
    GgufConvertOptions k;
    k.experts = t;
    const fs::path o = out.parent_path() / (std::string(t) + ".gguf");
    auto rk = convert_to_gguf(test::tiny_dir().string(), o.string(), k);
    ASSERT_FALSE(rk.ok()) << t;
    EXPECT_NE(rk.error().message.find("needs a multiple of its block of 256"), std::string::npos) << rk.error().message;
    EXPECT_FALSE(fs::exists(o)) << t;
  }
}

}  // namespace
}  // namespace ds4
