// A plan made from probed numbers drives a tiny-model run, and the bytes moved per tier match the
// plan (issue 6, "must be shown"). On copies of the tiny fixture in a scratch dir:
//   1. `plan --probe` measures this machine and writes the profile;
//   2. `calibrate` on prompts (the documented flow: its plan must run and account exactly);
//   3. a long decode (`run --routing-out`, seed 1) gives statistics of the workload measured in 4;
//   4. `plan --emulate-gpu-kib --host-cap-kib` plans with a budget that needs several tiers;
//      `run --plan --plan-report` decodes 64 tokens with seed 42.
// Asserted: (a) the store's measured bytes per decode token equal the plan's bytes for the run's
// own routing (exact bookkeeping; doubles of integer byte sums / steps, 1e-9 relative), for every
// tier; (b) measured bytes per tier are within the sampling tolerance of the plan's
// statistics-based prediction (below); (c) the generated text equals a plain run's (same bits).
//
// Tolerance of (b). Per decode token the bytes of tier T are X = sum over layers of b_l times the
// number of the token's top_k experts of layer l that the plan puts in T. For independent tokens,
// Var(X) <= sum_l b_l^2 sum_{e in T} p_le (1 - p_le) (indicators of one layer's top_k are
// negatively correlated, so dropping the covariances over-estimates). The mean over n decoded
// tokens then has variance Var(X) / n, and p itself is estimated from N calibration tokens, adding
// about Var(X) / N. Generated tokens are correlated (sliding window, repeated patterns), which
// inflates the variance of the mean; we allow 5 standard deviations plus 2% of the prediction
// (the planner puts experts whose counts came out high into VRAM, so their true rate is a little
// lower: a selection bias of a few percent, seen as vram 0.93-1.0 and nvme 1.02-1.06 over seeds
// 42-45 when this test was written). Exits 77 (skipped) when the fixture is absent.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "placement/plan_file.h"
#include "placement/routing_stats.h"
#include "tests/support/cli_run.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;

using Out = test::CliOut;

// Runs ds4-offload with `args`; stdout (and stderr unless `stdout_only`) captured.
Out sh(const std::string& args, bool stdout_only = false) {
  return test::run_cli(DS4_OFFLOAD_EXE, args, /*merge_stderr=*/!stdout_only);
}

std::string q(const fs::path& p) {
  std::string s = "'";
  s += p.string();
  s += "'";
  return s;
}

TEST(PlanRunCli, ProbedPlanDrivesATinyRunAndTheBytesMatch) {
  const fs::path src = test::fixtures_dir() / "dsv4-tiny" / "dsv4-tiny-mxfp4.gguf";
  if (!fs::exists(src)) {
    std::fprintf(stderr, "fixture %s absent: skipped\n", src.c_str());
    std::exit(77);
  }
  const fs::path dir = test::scratch_dir("plan_run_cli");
  const fs::path model = dir / "tiny.gguf";
  fs::copy_file(src, model);
  const std::string m = " -m " + q(model) + " ";
  const std::string run_args = " -p 'The quick brown fox' -t 2 --seed 42 -n 65";

  // 1. Probe (small buffers: a second or two).
  Out o = sh("plan --probe --probe-decode 0 --probe-dir " + q(dir) + " --probe-mem-mib 16 --probe-nvme-mib 16 --write-profile " +
             q(dir / "probed.json"));
  ASSERT_EQ(o.code, 0) << o.text;
  ASSERT_TRUE(fs::exists(dir / "probed.json"));

  // 2. Calibrate on prompts; plan; run: exact bookkeeping and identical text.
  std::ofstream(dir / "prompts.txt") << "The quick brown fox jumps over the lazy dog.\n"
                                        "Expert routing statistics, second prompt: 1 2 3 4 5 6 7 8 9 10.\n";
  o = sh("calibrate" + m + "--prompts " + q(dir / "prompts.txt") + " -o " + q(dir / "calib.json") + " -t 2");
  ASSERT_EQ(o.code, 0) << o.text;
  const std::string budget = " --ctx 512 --chunk 64 --emulate-gpu-kib 1024 --host-cap-kib 2048 ";
  o = sh("plan" + m + "--hw " + q(dir / "probed.json") + " --stats " + q(dir / "calib.json") + budget + "--json " +
         q(dir / "plan_calib.json"));
  ASSERT_EQ(o.code, 0) << o.text;

  // 3. Workload statistics: the routing of a long decode with another seed.
  o = sh("run" + m + "-p 'The quick brown fox' -t 2 --seed 1 -n 400 --routing-out " + q(dir / "decode_stats.json"));
  ASSERT_EQ(o.code, 0) << o.text;
  o = sh("plan" + m + "--hw " + q(dir / "probed.json") + " --stats " + q(dir / "decode_stats.json") + budget +
         "--dry-run --json " + q(dir / "plan.json"));
  ASSERT_EQ(o.code, 0) << o.text;
  std::printf("%s\n", o.text.c_str());

  const Out plain = sh("run" + m + run_args, /*stdout_only=*/true);
  ASSERT_EQ(plain.code, 0);
  ASSERT_GT(plain.text.size(), 10u);

  for (const char* which : {"plan_calib.json", "plan.json"}) {
    SCOPED_TRACE(which);
    auto pf = placement::read_plan_file((dir / which).string(), 6, 16, 4);
    ASSERT_TRUE(pf.ok()) << pf.error().message;
    // The budget must give several tiers: count the tiers with at least one expert.
    int n[4] = {};
    for (const auto& row : pf->plan.experts)
      for (const auto& e : row) n[int(e.tier)]++;
    const int tiers = (n[0] > 0) + (n[1] > 0) + (n[2] > 0) + (n[3] > 0);
    EXPECT_GE(tiers, 3) << "vram " << n[0] << " host " << n[1] << " cpu " << n[2] << " nvme " << n[3];
    EXPECT_GT(n[int(placement::Tier::Vram)], 0);
    EXPECT_GT(n[int(placement::Tier::Nvme)], 0);

    const fs::path rep = dir / (std::string(which) + ".report.json");
    // (c) same text as the plain run, bit for bit (stdout only).
    const Out planned = sh("run" + m + run_args + " --plan " + q(dir / which) + " --plan-report " + q(rep), true);
    ASSERT_EQ(planned.code, 0);
    EXPECT_EQ(planned.text, plain.text);
    std::ifstream in(rep);
    ASSERT_TRUE(in.good());
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_GE(j["decode_steps"].get<int>(), 32);  // 64 unless end-of-sequence comes first
    const int n_tok = j["decode_steps"].get<int>();
    // (a) exact bookkeeping, every tier.
    for (const auto& t : j["tiers"]) {
      const double meas = t["measured_per_token"], own = t["predicted_own_routing_per_token"];
      EXPECT_NEAR(meas, own, 1e-9 * std::max(1.0, own)) << t["tier"];
    }
    if (std::string(which) != "plan.json") continue;

    // (b) the statistics-based prediction, within the sampling tolerance.
    auto st = placement::load_routing_stats((dir / "decode_stats.json").string(), 6, 16, 4);
    ASSERT_TRUE(st.ok()) << st.error().message;
    auto in_tier = [&](const placement::ExpertPlacement& e, const std::string& t) {
      const bool on_cpu = e.tier == placement::Tier::Cpu || (e.tier == placement::Tier::Nvme && e.cpu_compute);
      if (t == "vram") return e.tier == placement::Tier::Vram;
      if (t == "link") return (e.tier == placement::Tier::Host || e.tier == placement::Tier::Nvme) && !on_cpu;
      if (t == "cpu") return on_cpu;
      return e.tier == placement::Tier::Nvme;
    };
    int checked = 0;
    for (const auto& t : j["tiers"]) {
      const std::string name = t["tier"];
      double var = 0;
      for (int l = 0; l < 6; ++l)
        for (int e = 0; e < 16; ++e)
          if (in_tier(pf->plan.experts[size_t(l)][size_t(e)], name)) {
            const double p = st->p[size_t(l)][size_t(e)], b = double(pf->expert_bytes[size_t(l)]);
            var += b * b * p * (1 - p);
          }
      const double pred = t["predicted_stats_per_token"], meas = t["measured_per_token"];
      const double sigma = std::sqrt(var * (1.0 / n_tok + 1.0 / double(st->tokens)));
      const double tol = 5 * sigma + 0.02 * pred;
      std::printf("tier %-5s measured %10.1f  predicted %10.1f  ratio %.3f  tolerance +-%.1f (sigma %.1f)\n",
                  name.c_str(), meas, pred, pred > 0 ? meas / pred : 1.0, tol, sigma);
      EXPECT_NEAR(meas, pred, tol) << name;
      if (pred > 0) ++checked;
    }
    EXPECT_GE(checked, 3);
  }
}

}  // namespace
}  // namespace ds4
