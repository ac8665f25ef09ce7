// `ds4-offload calibrate` on the tiny fixture: the statistics it writes are consistent (every
// layer sums to tokens x top_k), the hash layers agree with tid2eid of the prompt tokens read
// straight from the GGUF, the file loads in the planner, and `plan --stats` runs on it.
// Exits 77 (skipped) when the fixture is absent. Also: `plan --probe`'s GPU report (no fixture).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/model_config.h"
#include "engine/session.h"
#include "engine/tokenizer.h"
#include "gguf/gguf_file.h"
#include "placement/routing_stats.h"
#include "placement/topology.h"
#include "staging/h2d_probe.h"
#include "tests/support/cli_run.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;

using Out = test::CliOut;

Out sh(const std::string& args) {
  return test::run_cli(DS4_OFFLOAD_EXE, args, /*merge_stderr=*/true);
}

fs::path fixture() { return test::fixtures_dir() / "dsv4-tiny" / "dsv4-tiny-mxfp4.gguf"; }

// `plan --probe` reports its GPU part honestly: the per GPU x node lines and the all-GPUs line when
// a CUDA device is visible, else why none was probed (the same reason the staging probe gives);
// --probe-h2d-mib 0 skips GPUs. Needs no fixture, so it runs first (the others exit 77 without it).
TEST(PlanProbeCli, SaysWhyNoGpuWasProbedOrListsEveryLink) {
  const fs::path dir = test::scratch_dir("plan_probe_gpu");
  const std::string base = "plan --probe --probe-decode 0 --probe-mem-mib 16 --probe-nvme-mib 0 --probe-h2d-mib 16 --write-profile '" +
                           (dir / "p.json").string() + "'";
  Out o = sh(base);
  if (staging::h2d_probe_available()) {
    ASSERT_EQ(o.code, 0) << o.text;
    EXPECT_NE(o.text.find("gpu 0 "), std::string::npos) << o.text;
    EXPECT_NE(o.text.find(" at once (pinned): "), std::string::npos) << o.text;
  } else {
    auto topo = placement::discover_topology();
    ASSERT_TRUE(topo.ok());
    bool hwloc_gpu = false;
    for (const auto& d : topo->devices) hwloc_gpu = hwloc_gpu || d.kind == placement::PciDevice::Kind::Gpu;
    const std::string why = staging::h2d_probe_unavailable_reason();
    if (hwloc_gpu) {  // GPUs we cannot measure: refused, naming why
      EXPECT_EQ(o.code, 1);
      EXPECT_NE(o.text.find(why), std::string::npos) << o.text;
    } else {
      ASSERT_EQ(o.code, 0) << o.text;
      EXPECT_NE(o.text.find("gpu: none probed: " + why), std::string::npos) << o.text;
      std::ifstream f(dir / "p.json");
      std::stringstream js;
      js << f.rdbuf();
      EXPECT_NE(js.str().find("No GPU probed: " + why), std::string::npos) << js.str();
    }
  }
  o = sh("plan --probe --probe-decode 0 --probe-mem-mib 16 --probe-nvme-mib 0 --probe-h2d-mib 0");
  ASSERT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("gpu: none probed: skipped"), std::string::npos) << o.text;
  o = sh("plan --probe --probe-h2d-mib -1");
  EXPECT_NE(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("--probe-h2d-mib"), std::string::npos) << o.text;
}

TEST(CalibrateCli, StatsMatchTheRouterOnTheTinyFixture) {
  if (!fs::exists(fixture())) {
    std::fprintf(stderr, "fixture %s absent: skipped\n", fixture().c_str());
    std::exit(77);
  }
  const fs::path dir = test::scratch_dir("calibrate_cli");
  const std::vector<std::string> lines = {"The quick brown fox jumps over the lazy dog.",
                                          "Expert routing statistics, second prompt: 1 2 3 4 5 6 7 8 9 10."};
  {
    std::ofstream p(dir / "prompts.txt");
    p << lines[0] << "\n\n" << lines[1] << "\n";  // the empty line is not a prompt
  }
  const fs::path stats = dir / "stats.json";
  Out o = sh("calibrate -m '" + fixture().string() + "' --prompts '" + (dir / "prompts.txt").string() + "' -o '" +
             stats.string() + "' -t 2 --chunk 7");
  ASSERT_NE(o.text.find("2 prompts"), std::string::npos) << o.text;
  ASSERT_EQ(o.code, 0) << o.text;

  // Expected tokens: the model's tokenizer, as calibrate documents (BOS when the model adds one).
  ModelOptions mo;
  mo.threads = 1;
  auto model = Model::load(fixture().string(), mo);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const Tokenizer* tok = (*model)->tokenizer();
  ASSERT_NE(tok, nullptr);
  const ModelConfig& c = (*model)->config();
  std::vector<int32_t> ids;
  for (const auto& l : lines) {
    auto t = tok->encode(l, tok->add_bos(), true);
    ids.insert(ids.end(), t.begin(), t.end());
  }
  ASSERT_GT(c.n_hash_layers, 0);

  std::ifstream in(stats);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["format"], "ds4-routing-stats");
  EXPECT_EQ(j["version"], 2);  // token routes kept (calibrate --max-routes, default 4096)
  ASSERT_LE(ids.size(), 4096u);   // so every token's route is kept, in token order
  ASSERT_EQ(j["routes"].size(), size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) EXPECT_EQ(j["routes"][size_t(l)].size(), ids.size()) << "layer " << l;
  ASSERT_EQ(j["tokens"].get<int64_t>(), int64_t(ids.size()));
  ASSERT_EQ(j["n_layers"].get<int>(), c.n_layer);
  ASSERT_EQ(j["top_k"].get<int>(), c.n_expert_used);
  const int64_t k = c.n_expert_used;
  for (int l = 0; l < c.n_layer; ++l) {
    int64_t sum = 0;
    for (const auto& v : j["counts"][size_t(l)]) sum += v.get<int64_t>();
    EXPECT_EQ(sum, int64_t(ids.size()) * k) << "layer " << l;
    int64_t pairs = 0;
    for (const auto& t : j["coactivation"][size_t(l)]) pairs += t[2].get<int64_t>();
    EXPECT_EQ(pairs, int64_t(ids.size()) * k * (k - 1) / 2) << "layer " << l;
  }

  // Hash layers: counts and pairs follow tid2eid rows of the tokens, read from the GGUF here.
  auto g = gguf::GgufModel::open(fixture().string());
  ASSERT_TRUE(g.ok()) << g.error().message;
  for (int l = 0; l < c.n_hash_layers; ++l) {
    const std::string name = "blk." + std::to_string(l) + ".ffn_gate_tid2eid.weight";
    const gguf::TensorInfo* t = g->find(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(t->ne[0], k);
    const auto* tid2eid = reinterpret_cast<const int32_t*>(t->data);
    std::vector<int64_t> expect(size_t(c.n_expert), 0);
    std::map<std::pair<int, int>, int64_t> expect_pairs;
    for (int32_t id : ids)
      for (int64_t a = 0; a < k; ++a) {
        const int32_t ea = tid2eid[int64_t(id) * k + a];
        ++expect[size_t(ea)];
        for (int64_t b = a + 1; b < k; ++b) {
          const int32_t eb = tid2eid[int64_t(id) * k + b];
          ++expect_pairs[{std::min(ea, eb), std::max(ea, eb)}];
        }
      }
    EXPECT_EQ(j["counts"][size_t(l)].get<std::vector<int64_t>>(), expect) << "hash layer " << l;
    std::map<std::pair<int, int>, int64_t> got_pairs;
    for (const auto& tr : j["coactivation"][size_t(l)]) got_pairs[{tr[0].get<int>(), tr[1].get<int>()}] = tr[2];
    EXPECT_EQ(got_pairs, expect_pairs) << "hash layer " << l;
    // Route i is token i's tid2eid row (as a set).
    for (size_t i = 0; i < ids.size(); ++i) {
      std::set<int32_t> want(tid2eid + int64_t(ids[i]) * k, tid2eid + int64_t(ids[i]) * k + k), got;
      for (const auto& v : j["routes"][size_t(l)][i]) got.insert(v.get<int32_t>());
      EXPECT_EQ(got, want) << "hash layer " << l << ", token " << i;
    }
  }

  // Windows of 8 tokens (fresh state each) route the same tokens: the token total and the hash
  // layers are unchanged.
  const fs::path stats8 = dir / "stats8.json";
  o = sh("calibrate -m '" + fixture().string() + "' --prompts '" + (dir / "prompts.txt").string() + "' -o '" +
         stats8.string() + "' -t 2 --ctx 8");
  ASSERT_EQ(o.code, 0) << o.text;
  std::ifstream in8(stats8);
  const nlohmann::json j8 = nlohmann::json::parse(in8);
  EXPECT_EQ(j8["tokens"], j["tokens"]);
  for (int l = 0; l < c.n_hash_layers; ++l) EXPECT_EQ(j8["counts"][size_t(l)], j["counts"][size_t(l)]) << l;

  // The planner's loader accepts it, and `plan --stats` runs on it.
  auto st = placement::load_routing_stats(stats.string(), c.n_layer, c.n_expert, c.n_expert_used);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->coactivation.size(), size_t(c.n_layer));
  Out p = sh("plan -m '" + fixture().string() + "' --stats '" + stats.string() +
             "' --hw '" + (test::source_dir() / "configs/hw/1x2080ti-22g-pcie3.json").string() + "' --dry-run");
  EXPECT_EQ(p.code, 0) << p.text;
  EXPECT_NE(p.text.find(stats.string()), std::string::npos) << p.text;
}

TEST(CalibrateCli, InputErrorsAreReported) {
  if (!fs::exists(fixture())) std::exit(77);
  const fs::path dir = test::scratch_dir("calibrate_cli_errors");
  std::ofstream(dir / "empty.txt") << "\n  \n";
  Out o = sh("calibrate -m '" + fixture().string() + "' --prompts '" + (dir / "empty.txt").string() + "' -o '" +
             (dir / "s.json").string() + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("no prompt"), std::string::npos) << o.text;
  EXPECT_FALSE(fs::exists(dir / "s.json"));
  o = sh("plan --probe --hw '" + (test::source_dir() / "configs/hw/1x2080ti-22g-pcie3.json").string() + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--probe"), std::string::npos) << o.text;
  o = sh("plan --probe --probe-decode 0 --probe-dir '" + (dir / "missing").string() + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("missing"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("No such file or directory"), std::string::npos) << o.text;  // the errno text
  EXPECT_NE(o.text.find("--probe-dir"), std::string::npos) << o.text;               // how to choose it
  // The decode calibration's temporary folder is made before its rate probes: a quick failure.
  o = sh("plan --probe --probe-nvme-mib 0 --probe-mem-mib 16 --probe-h2d-mib 0 --probe-dir '" +
         (dir / "missing").string() + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("cannot create a temporary folder in " + (dir / "missing").string() +
                        ": No such file or directory (choose a writable folder with --probe-dir DIR)"),
            std::string::npos)
      << o.text;
  // --probe-decode 0 skips the calibration: the note says so instead of "run plan --probe".
  o = sh("plan --probe --probe-decode 0 --probe-nvme-mib 0 --probe-mem-mib 16 --probe-h2d-mib 0 -m '" +
         fixture().string() + "' --dry-run");
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("--probe-decode 0 skipped the calibration"), std::string::npos) << o.text;
  EXPECT_EQ(o.text.find("run `plan --probe`"), std::string::npos) << o.text;
  o = sh("plan --probe-decode 3 -m '" + fixture().string() + "' --hw '" +
         (test::source_dir() / "configs/hw/1x2080ti-22g-pcie3.json").string() + "' --dry-run");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--probe-decode sets the decode calibration of --probe"), std::string::npos) << o.text;
  // The model's context_length bounds --ctx and is the default when shorter than 32768.
  const std::string hw = " --hw '" + (test::source_dir() / "configs/hw/1x2080ti-22g-pcie3.json").string() + "'";
  const std::string m = "plan -m '" + fixture().string() + "'" + hw + " --dry-run";
  o = sh(m + " --ctx 5000");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("-c/--ctx-size 5000 exceeds the model's context length 1024 tokens"), std::string::npos) << o.text;
  o = sh(m);
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("context    1024 tokens; prefill chunk 1024 tokens"), std::string::npos) << o.text;
  // --decode-depth is a position in the context: 0 .. context_length - 1 (or --ctx - 1).
  o = sh(m + " --decode-depth 16777216");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--decode-depth 16777216 exceeds the model's context_length 1024"), std::string::npos)
      << o.text;
  o = sh(m + " --decode-depth 1024");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("exceeds the model's context_length 1024"), std::string::npos) << o.text;
  o = sh(m + " --ctx 512 --decode-depth 600");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--decode-depth 600 exceeds -c/--ctx-size 512"), std::string::npos) << o.text;
  o = sh(m + " --decode-depth 1023");
  EXPECT_EQ(o.code, 0) << o.text;
  o = sh(m + " --seed -1");
  EXPECT_NE(o.code, 0);  // CLI11 validation errors exit with its own code
  EXPECT_NE(o.text.find("--seed: expected a non-negative integer, found '-1'"), std::string::npos) << o.text;
  o = sh("plan -m '" + fixture().string() + "' --hw '" +
         (test::source_dir() / "configs/hw/devbox-2c-24g-nogpu.json").string() +
         "' --dry-run --emulate-gpu-kib 1024 --host-cap-kib 2048");  // that profile lists no NVMe
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("expected a profile with an NVMe device"), std::string::npos) << o.text;
  // Prior flags that would be ignored are refused.
  o = sh(m + " --zipf-s 1.2");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--zipf-s sets the exponent of --prior zipf"), std::string::npos) << o.text;
  std::ofstream(dir / "stats.json") << "{}";
  o = sh(m + " --prior zipf --stats '" + (dir / "stats.json").string() + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("replaces it"), std::string::npos) << o.text;
}

// Bad inputs of calibrate / plan / run that used to be found only after the work (or crashed):
// each fails with one message naming what was expected, exit 1 (CLI11 range errors: its own
// code), and leaves no output file.
TEST(CalibrateCli, BadOutputsAndInputsFailFirstWithoutOutput) {
  if (!fs::exists(fixture())) std::exit(77);
  const fs::path dir = test::scratch_dir("calibrate_cli_bad_outputs");
  const std::string model = " -m '" + fixture().string() + "'";
  const std::string d = dir.string();
  std::ofstream(dir / "prompts.txt") << "Hello world\n";
  // calibrate -o a directory / a missing folder: before the model is evaluated.
  Out o = sh("calibrate" + model + " --prompts '" + d + "/prompts.txt' -o '" + d + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("-o/--output: expected a file path, found the directory"), std::string::npos) << o.text;
  EXPECT_EQ(o.text.find("tokens in"), std::string::npos) << o.text;
  o = sh("calibrate" + model + " --prompts '" + d + "/prompts.txt' -o '" + d + "/missing/s.json'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("does not exist"), std::string::npos) << o.text;
  // plan: --zipf-s nan used to abort in zipf_routing.
  const std::string hw = " --hw '" + (test::source_dir() / "configs/hw/devbox-2c-24g-nogpu.json").string() + "'";
  const std::string plan = "plan" + model + hw;
  o = sh(plan + " --dry-run --prior zipf --zipf-s nan");
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_NE(o.text.find("--zipf-s: expected a number in [0, 8], found nan"), std::string::npos) << o.text;
  // --host-cap-kib 0 left no host memory (0/0 in the planner's budget): refused by its range.
  o = sh(plan + " --dry-run --host-cap-kib 0");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.code, -1) << o.text;  // no signal
  EXPECT_NE(o.text.find("--host-cap-kib"), std::string::npos) << o.text;
  // A directory given as an input file is named as such.
  o = sh("plan" + model + " --hw '" + d + "' --dry-run");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("expected a hardware profile file, found a directory"), std::string::npos) << o.text;
  o = sh(plan + " --dry-run --stats '" + d + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("expected a routing statistics file, found a directory"), std::string::npos) << o.text;
  // A bad --stats leaves neither --json nor --write-profile behind.
  std::ofstream(dir / "empty.json") << "";
  o = sh(plan + " --json '" + d + "/p.json' --write-profile '" + d + "/hw.json' --stats '" + d + "/empty.json'");
  EXPECT_EQ(o.code, 1);
  EXPECT_FALSE(fs::exists(dir / "p.json"));
  EXPECT_FALSE(fs::exists(dir / "hw.json"));
  o = sh(plan + " --dry-run --json '" + d + "/missing/p.json'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--json '" + d + "/missing/p.json': folder"), std::string::npos) << o.text;
  // Hand-broken statistics: wrong types and integers past 32/64 bits are named.
  Out c = sh("calibrate" + model + " --prompts '" + d + "/prompts.txt' -o '" + d + "/s.json'");
  ASSERT_EQ(c.code, 0) << c.text;
  auto broken = [&](const char* name, auto edit) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "s.json"));
    edit(j);
    std::ofstream(dir / name) << j.dump();
    return sh(plan + " --dry-run --stats '" + d + "/" + name + "'");
  };
  using J = nlohmann::json;
  o = broken("fmt.json", [](J& j) { j["format"] = 3; });
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("expected \"format\": \"ds4-routing-stats\", found 3"), std::string::npos) << o.text;
  o = broken("ver.json", [](J& j) { j["version"] = 4294967298LL; });  // 2 through a 32-bit int
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("expected \"version\": 1 or 2, found 4294967298"), std::string::npos) << o.text;
  o = broken("tok.json", [](J& j) { j["tokens"] = int64_t(1) << 62; });  // tokens * top_k overflowed
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("key 'tokens': expected 1..1099511627776, found 4611686018427387904"), std::string::npos)
      << o.text;
  o = broken("pair.json", [](J& j) { j["coactivation"][0][0][0] = 4294967296LL; });  // 0 through int32
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("coactivation[0]: expected 0 <= a < b < 16"), std::string::npos) << o.text;
  // run: outputs and -n checked before generation.
  const std::string run = "run" + model + " -p Hello";
  o = sh(run + " -n 1 --routing-out '" + d + "/r.json'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--routing-out records decode tokens: expected -n 2 or more, found -n 1"), std::string::npos)
      << o.text;
  EXPECT_EQ(o.text.find("prompt tokens"), std::string::npos) << o.text;
  EXPECT_FALSE(fs::exists(dir / "r.json"));
  o = sh(run + " -n 4 --routing-out '" + d + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--routing-out: expected a file path, found the directory"), std::string::npos) << o.text;
  EXPECT_EQ(o.text.find("prompt tokens"), std::string::npos) << o.text;
  // run --plan: a plan for this shape with other expert sizes (as from another expert type).
  o = sh(plan + " --json '" + d + "/plan.json'");
  ASSERT_EQ(o.code, 0) << o.text;
  J j = J::parse(std::ifstream(dir / "plan.json"));
  const int64_t b = j["layers"][2]["expert_bytes"].get<int64_t>();
  j["layers"][2]["expert_bytes"] = b + 256;
  std::ofstream(dir / "other.json") << j.dump();
  o = sh(run + " -n 4 --plan '" + d + "/other.json'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("layers[2].expert_bytes: expected " + std::to_string(b) + " (one routed expert of this model), found " +
                        std::to_string(b + 256)),
            std::string::npos)
      << o.text;
  o = sh(run + " -n 4 --plan '" + d + "/plan.json' --plan-report '" + d + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--plan-report: expected a file path, found the directory"), std::string::npos) << o.text;
  // -n 1: the one token comes from the prefill, no decode step: --plan-report is refused before
  // the run (as --routing-out), and --plan alone says so instead of a table of 0.000 ratios.
  o = sh(run + " -n 1 --plan '" + d + "/plan.json' --plan-report '" + d + "/rep.json'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--plan-report compares decode tokens' bytes: expected -n 2 or more, found -n 1"),
            std::string::npos)
      << o.text;
  EXPECT_EQ(o.text.find("prompt tokens"), std::string::npos) << o.text;
  EXPECT_FALSE(fs::exists(dir / "rep.json"));
  o = sh(run + " -n 1 --plan '" + d + "/plan.json'");
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("no decode steps, so no bytes per decode token to compare with the plan"), std::string::npos)
      << o.text;
  EXPECT_EQ(o.text.find("over 0 decode steps"), std::string::npos) << o.text;
  o = sh(run + " -n 4 --plan '" + d + "'");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("expected a plan file, found a directory"), std::string::npos) << o.text;
}

}  // namespace
}  // namespace ds4
