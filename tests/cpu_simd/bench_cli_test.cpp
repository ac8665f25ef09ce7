// tests/cpu_simd/bench_cli_test.cpp — `ds4-offload bench` on the dsv4-tiny fixture with tiny sizes
// (-p 16 -n 4 -r 1) in each output format: JSON parses with the expected rows and fields, CSV rows
// have the header's column count, the Markdown table rows have the header's column count; bad flag
// values give one clear error; `--probe` reports a bandwidth. Speed is not asserted (benchmarks).
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli_run.h"
#include "support/test_env.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using Out = ds4::test::CliOut;

/// Runs ds4-offload with `args`; stdout only unless `merge_stderr`.
Out run(const std::string& args, bool merge_stderr = false) {
  return ds4::test::run_cli(DS4_OFFLOAD_EXE, args, merge_stderr);
}

fs::path fixture() { return ds4::test::fixtures_dir() / "dsv4-tiny" / "dsv4-tiny-mxfp4.gguf"; }

std::string bench_args(const std::string& fmt) {
  return "bench -m '" + fixture().string() + "' -p 16 -n 4 -r 1 -t 2 --probe-mib 16 -o " + fmt;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l))
    if (!l.empty()) v.push_back(l);
  return v;
}

/// Number of CSV fields of one line (double-quoted fields may contain commas and "" escapes).
int csv_fields(const std::string& l) {
  int n = 1;
  bool q = false;
  for (char c : l) {
    if (c == '"') q = !q;
    else if (c == ',' && !q) ++n;
  }
  return q ? -1 : n;
}

#define REQUIRE_FIXTURE() \
  if (!fs::exists(fixture())) GTEST_SKIP() << "fixture missing: " << fixture()

TEST(BenchCli, JsonParsesWithPrefillAndDecodeRows) {
  REQUIRE_FIXTURE();
  const Out o = run(bench_args("json"));
  ASSERT_EQ(o.code, 0) << o.text;
  const json j = json::parse(o.text);
  ASSERT_EQ(j.at("results").size(), 2u) << o.text;
  const json& pp = j["results"][0];
  const json& tg = j["results"][1];
  EXPECT_EQ(pp.at("test"), "pp16");
  EXPECT_EQ(pp.at("n_prompt"), 16);
  EXPECT_GT(pp.at("avg_ts").get<double>(), 0.0);
  EXPECT_GT(pp.at("ttft_ms_avg").get<double>(), 0.0);
  EXPECT_EQ(tg.at("test"), "tg4 @ d16");
  EXPECT_EQ(tg.at("n_gen"), 4);
  EXPECT_GT(tg.at("avg_ts").get<double>(), 0.0);
  EXPECT_EQ(tg.at("stddev_ts").get<double>(), 0.0);  // one repetition
  EXPECT_GT(tg.at("frac_mem_bw").get<double>(), 0.0);
  // Measured by the engine's counters: the routed part is a strict, non-zero part of the total.
  EXPECT_GT(tg.at("bytes_per_token_experts").get<double>(), 0.0);
  EXPECT_GT(tg.at("bytes_per_token").get<double>(), tg.at("bytes_per_token_experts").get<double>());
  // The GGUF estimate counts every non-expert tensor (mHC mixes and norms included) and top-k of
  // the experts; the counters count only the matrices multiplied, each at its own size, so they
  // cannot exceed it (a column slice counted at its parent's row stride did: wo_b 4x here).
  EXPECT_LE(tg.at("bytes_per_token").get<double>(), tg.at("bytes_per_token_est").get<double>());
  EXPECT_GT(tg.at("bytes_per_token").get<double>(), 0.9 * tg.at("bytes_per_token_est").get<double>());
  EXPECT_EQ(tg.at("backend"), "CPU");
  const json& m = j.at("metadata");
  for (const char* k : {"model", "quant_mix", "placement", "build", "cpu_kernel_choices", "cpu_info", "gpu_info", "date",
                        "n_threads", "host_read_GBps", "bytes_per_token_est"})
    EXPECT_TRUE(m.contains(k)) << k;
  EXPECT_NE(m.at("quant_mix").get<std::string>().find("experts MXFP4"), std::string::npos) << m.dump();
  EXPECT_EQ(m.at("n_threads"), 2);
  EXPECT_EQ(m.at("backend"), "CPU");
  EXPECT_EQ(m.at("gpu_info"), "none");
  EXPECT_EQ(m.at("placement").get<std::string>().rfind("all CPU", 0), 0u) << m.dump();
  // Per link (bench_links.h): one CPU rank, whose tiers are the row's; the CPU backend times no
  // copies (overlap null = "n/a"), and no plan is in use.
  ASSERT_EQ(tg.at("ranks").size(), 1u) << tg.dump();
  const json& r0 = tg["ranks"][0];
  EXPECT_EQ(r0.at("bytes_per_token_device_host").get<double>(), tg.at("bytes_per_token_device_host").get<double>());
  EXPECT_EQ(r0.at("bytes_per_token_device_host").get<double>(), tg.at("bytes_per_token").get<double>());
  EXPECT_FALSE(r0.at("link_timed").get<bool>());
  EXPECT_TRUE(r0.at("overlap").is_null());
  EXPECT_TRUE(tg.at("overlap").is_null());
  EXPECT_TRUE(tg.at("plan").is_null());
  EXPECT_EQ(tg.at("cache_hits"), 0);
  // Routed experts read in host memory = the engine's routed-expert bytes (dense subtracted).
  EXPECT_DOUBLE_EQ(tg.at("bytes_per_token_experts_host").get<double>(), tg.at("bytes_per_token_experts").get<double>());
}

// --tp 2 on the CPU backend: one entry per rank, and the ranks' bytes sum to the row's totals.
TEST(BenchCli, JsonRanksSumToTheTotals) {
  REQUIRE_FIXTURE();
  const Out o = run("bench -m '" + fixture().string() + "' -p 16 -n 4 -r 1 -t 2 --tp 2 --probe-mib 16 -o json");
  ASSERT_EQ(o.code, 0) << o.text;
  const json j = json::parse(o.text);
  const json& tg = j.at("results").at(1);
  ASSERT_EQ(tg.at("ranks").size(), 2u) << tg.dump();
  double host = 0, resident = 0, staged = 0;
  for (const json& r : tg["ranks"]) {
    EXPECT_GT(r.at("bytes_per_token_device_host").get<double>(), 0.0) << r.dump();
    host += r.at("bytes_per_token_device_host").get<double>();
    resident += r.at("bytes_per_token_device_resident").get<double>();
    staged += r.at("bytes_per_token_device_staged").get<double>();
    EXPECT_TRUE(r.at("overlap").is_null());
  }
  EXPECT_DOUBLE_EQ(host, tg.at("bytes_per_token_device_host").get<double>());
  EXPECT_EQ(resident, 0.0);
  EXPECT_EQ(staged, 0.0);
}

TEST(BenchCli, CsvRowsMatchTheHeader) {
  REQUIRE_FIXTURE();
  const Out o = run(bench_args("csv"));
  ASSERT_EQ(o.code, 0) << o.text;
  const auto ls = lines(o.text);
  ASSERT_EQ(ls.size(), 3u) << o.text;
  EXPECT_EQ(ls[0].rfind("model,size,params,backend,threads,", 0), 0u) << ls[0];
  EXPECT_NE(ls[0].find(",host_read_GBps,cpu_kernel_choices"), std::string::npos) << ls[0];
  const int cols = csv_fields(ls[0]);
  EXPECT_GE(cols, 20);
  for (size_t i = 1; i < ls.size(); ++i) EXPECT_EQ(csv_fields(ls[i]), cols) << ls[i];
  EXPECT_NE(ls[1].find("\"pp16\""), std::string::npos);
  EXPECT_NE(ls[2].find("\"tg4 @ d16\""), std::string::npos);
}

TEST(BenchCli, MarkdownTableRowsMatchTheHeader) {
  REQUIRE_FIXTURE();
  const Out o = run(bench_args("md"));
  ASSERT_EQ(o.code, 0) << o.text;
  // The first table (the links table follows after a blank line and a note).
  std::vector<std::string> table, links;
  bool first = true;
  {
    std::stringstream ss(o.text);
    std::string l;
    while (std::getline(ss, l)) {
      if (!l.empty() && l[0] == '|') (first ? table : links).push_back(l);
      else if (!table.empty()) first = false;
    }
  }
  ASSERT_EQ(table.size(), 4u) << o.text;  // header, separator, pp16, tg4 @ d16
  auto pipes = [](const std::string& l) { return std::count(l.begin(), l.end(), '|'); };
  EXPECT_NE(table[0].find("| t/s |"), std::string::npos) << table[0];
  for (const auto& l : table) EXPECT_EQ(pipes(l), pipes(table[0])) << l;
  EXPECT_NE(table[2].find("| pp16 |"), std::string::npos) << table[2];
  EXPECT_NE(table[3].find("| tg4 @ d16 |"), std::string::npos) << table[3];
  // The links table: header, separator, rank 0, all; timing "n/a" on the CPU backend.
  ASSERT_EQ(links.size(), 4u) << o.text;
  EXPECT_NE(links[0].find("| overlap |"), std::string::npos) << links[0];
  for (const auto& l : links) EXPECT_EQ(pipes(l), pipes(links[0])) << l;
  EXPECT_EQ(links[2].rfind("| tg4 @ d16 | rank 0 |", 0), 0u) << links[2];
  EXPECT_EQ(links[3].rfind("| tg4 @ d16 | all |", 0), 0u) << links[3];
  EXPECT_NE(links[3].find("| n/a |"), std::string::npos) << links[3];
}

TEST(BenchCli, BadFlagValuesGiveOneClearError) {
  REQUIRE_FIXTURE();
  const std::string m = "bench -m '" + fixture().string() + "' ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {m + "-o xml", "-o/--output: expected md, json or csv, found \"xml\""},
      {m + "-p -1", "-p/--n-prompt: expected comma-separated integers from 0 to 1000000, found \"-1\""},
      {m + "-p 99999999", "from 0 to 1000000, found \"99999999\""},
      {m + "-p 4,", "found a trailing comma in \"4,\""},
      {m + "-p 16,abc", "found \"abc\""},
      {m + "-r 0", "-r/--repetitions: expected >= 1, found 0"},
      {m + "-t -1", "-t/--threads"},
      {m + "--activations f16", "--activations: expected auto, f32, q8 or fp8"},
      {"bench -p 16", "-m/--model is required"},
      {m + "-p 100000", "exceeds the model's context_length"},
      // -n 1 has no decode step to time (the one token comes from the prefill): refused, not dropped.
      {m + "-p 4 -n 1", "-n/--n-gen 1 cannot be measured"},
      {m + "-p 4 -n 1,2", "expected 0 (no generation test) or at least 2"},
      {m + "-p 0 -n 1", "-n/--n-gen 1 cannot be measured"},
      {m + "-p 0 -n 0", "nothing to measure: -p 0 and -n 0"},
      {m + "-p 0,0 -n 0", "nothing to measure"},
  };
  for (const auto& [args, msg] : cases) {
    const Out o = run(args + " --probe-mib 16", true);
    EXPECT_EQ(o.code, 1) << args << "\n" << o.text;
    EXPECT_NE(o.text.find(msg), std::string::npos) << args << "\n" << o.text;
    int error_lines = 0;
    for (const auto& l : lines(o.text)) error_lines += l.find("error") != std::string::npos;
    EXPECT_EQ(error_lines, 1) << args << "\n" << o.text;
  }
}

// bench --plan: a plan with emulated-GPU, host and NVMe tiers (from probed numbers) makes the
// decode rows report staged and NVMe bytes per token from the expert store's counters.
TEST(BenchCli, PlanSplitsDecodeTrafficByPath) {
  REQUIRE_FIXTURE();
  const fs::path dir = ds4::test::scratch_dir("bench_plan");
  const fs::path model = dir / "tiny.gguf";
  fs::remove(model);
  fs::copy_file(fixture(), model);
  const std::string d = std::string("'").append(dir.string()).append("/");
  Out o = run("plan --probe --probe-decode 0 --probe-dir " + d + "' --probe-mem-mib 16 --probe-nvme-mib 16 --write-profile " + d + "hw.json'", true);
  ASSERT_EQ(o.code, 0) << o.text;
  // The probed CPU expert rates decide whether the planner computes the experts that do not fit
  // the emulated VRAM on the CPU or stages them (on a fast, quiet CPU it may pick the CPU for all,
  // and nothing is staged): they are set low here so that this test of bench's traffic split does
  // not depend on the machine or its load.
  {
    std::ifstream in(dir / "hw.json");
    json hw = json::parse(in);
    in.close();
    for (json& node : hw.at("numa_nodes"))
      for (auto& [type, gbps] : node.at("cpu_expert_gbps").items()) gbps = 0.05;
    std::ofstream(dir / "hw.json") << hw.dump(2);
  }
  o = run("plan -m " + d + "tiny.gguf' --hw " + d + "hw.json' --ctx 512 --chunk 64 --emulate-gpu-kib 1024 "
          "--host-cap-kib 2048 --json " + d + "plan.json'", true);
  ASSERT_EQ(o.code, 0) << o.text;
  o = run("bench -m " + d + "tiny.gguf' --plan " + d + "plan.json' -p 16 -n 8 -r 1 -t 2 --probe-mib 16 -o json");
  ASSERT_EQ(o.code, 0) << o.text;
  const json j = json::parse(o.text);
  EXPECT_EQ(j.at("metadata").at("placement").get<std::string>().rfind("plan ", 0), 0u);
  const json& tg = j.at("results").at(1);
  EXPECT_GT(tg.at("bytes_per_token_staged").get<double>(), 0.0) << tg.dump();
  EXPECT_GT(tg.at("bytes_per_token_nvme").get<double>(), 0.0) << tg.dump();
  EXPECT_LE(tg.at("bytes_per_token_staged").get<double>(), tg.at("bytes_per_token_experts").get<double>());
  // The plan's prediction beside the measurement, as the plan file gives it (read here directly).
  {
    std::ifstream pf(dir / "plan.json");
    const json plan = json::parse(pf);
    const json& pr = plan.at("prediction");
    const json& bp = tg.at("plan");
    ASSERT_TRUE(bp.is_object()) << tg.dump();
    double link = 0, vram = 0, cpu = 0;
    for (const json& x : pr.at("link_bytes_per_token")) link += x.get<double>();
    for (const json& x : pr.at("vram_bytes_per_token")) vram += x.get<double>();
    for (const json& x : pr.at("cpu_bytes_per_token")) cpu += x.get<double>();
    EXPECT_DOUBLE_EQ(bp.at("link_bytes_per_token_total").get<double>(), link);
    EXPECT_DOUBLE_EQ(bp.at("vram_bytes_per_token_total").get<double>(), vram);
    EXPECT_DOUBLE_EQ(bp.at("cpu_bytes_per_token").get<double>(), cpu);
    EXPECT_DOUBLE_EQ(bp.at("nvme_bytes_per_token").get<double>(), pr.at("nvme_bytes_per_token").get<double>());
    EXPECT_GT(pr.at("decode_tok_s").get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(bp.at("decode_tok_s").get<double>(), pr.at("decode_tok_s").get<double>());
    EXPECT_EQ(bp.at("link_bytes_per_token").size(), pr.at("link_bytes_per_token").size());
  }
  // The Markdown tiers line names the NVMe reads too (they were only in the table's column).
  o = run("bench -m " + d + "tiny.gguf' --plan " + d + "plan.json' -p 16 -n 8 -r 1 -t 2 --probe-mib 16 -o md");
  ASSERT_EQ(o.code, 0) << o.text;
  const auto at = o.text.find("- tiers (tg8 @ d16");
  ASSERT_NE(at, std::string::npos) << o.text;
  const std::string tiers = o.text.substr(at, o.text.find('\n', at) - at);
  EXPECT_NE(tiers.find("read from NVMe "), std::string::npos) << tiers;
  EXPECT_NE(o.text.find("| tg8 @ d16 | plan all |"), std::string::npos) << o.text;
  // CSV: the plan columns are filled on the decode row.
  o = run("bench -m " + d + "tiny.gguf' --plan " + d + "plan.json' -p 16 -n 8 -r 1 -t 2 --probe-mib 16 -o csv");
  ASSERT_EQ(o.code, 0) << o.text;
  const auto ls = lines(o.text);
  ASSERT_EQ(ls.size(), 3u) << o.text;
  EXPECT_NE(ls[0].find(",plan_link_bytes_per_token,"), std::string::npos) << ls[0];
  EXPECT_NE(ls[0].find(",overlap,"), std::string::npos) << ls[0];
  EXPECT_EQ(csv_fields(ls[2]), csv_fields(ls[0])) << ls[2];
  EXPECT_NE(ls[2].find(",n/a,"), std::string::npos) << ls[2];  // overlap on the CPU backend
}

TEST(BenchCli, ProbeOutputPathCheckedBeforeProbing) {
  const Out o = run("bench --probe --probe-mib 16 --probe-out /nonexistent-ds4-dir/probe.json", true);
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_NE(o.text.find("folder '/nonexistent-ds4-dir' does not exist"), std::string::npos) << o.text;
  EXPECT_EQ(o.text.find("GB/s"), std::string::npos) << "probed before refusing:\n" << o.text;
  const Out d = run("bench --probe --probe-mib 16 --probe-out /tmp", true);
  EXPECT_EQ(d.code, 1) << d.text;
  EXPECT_NE(d.text.find("expected a file path, found the directory"), std::string::npos) << d.text;
}

TEST(BenchCli, ProbeReportsHostBandwidth) {
  const fs::path out = ds4::test::scratch_dir("bench_probe") / "probe.json";
  const Out o = run("bench --probe --probe-mib 16 -o json --probe-out '" + out.string() + "'");
  ASSERT_EQ(o.code, 0) << o.text;
  const json j = json::parse(o.text);
  EXPECT_GT(j.at("host_read_GBps").get<double>(), 0.0);
  EXPECT_GT(j.at("host_memcpy_GBps").get<double>(), 0.0);
  EXPECT_EQ(j.at("buffer_MiB"), 16);
  // No GPU on a CPU-only machine: the H2D list is empty and the reason is given.
  if (j.at("h2d").empty()) {
    EXPECT_TRUE(j.contains("gpus")) << j.dump();
  }
  std::ifstream in(out);
  const json f = json::parse(in);
  EXPECT_EQ(f.at("buffer_MiB"), 16);
}

}  // namespace
