// tests/engine/golden_data.cpp — see golden_data.h.
#include "golden_data.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/test_env.h"

namespace ds4::test {
namespace {
/// Golden binaries exit 77 (ctest: skipped) when the fixture is absent.
class FixtureEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    if (tiny_dir().empty()) {
      std::printf("dsv4-tiny fixture not found under %s: skipped\n", fixtures_dir().c_str());
      std::exit(77);
    }
  }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new FixtureEnv);
}  // namespace

std::filesystem::path tiny_dir() {
  auto d = fixtures_dir() / "dsv4-tiny";
  if (!std::filesystem::exists(d / "goldens.json") || !std::filesystem::exists(d / "dsv4-tiny-mxfp4.gguf")) return {};
  return d;
}

std::filesystem::path tiny_gguf() { return tiny_dir() / "dsv4-tiny-mxfp4.gguf"; }

std::vector<GoldenPrompt> load_goldens() {
  std::ifstream f(tiny_dir() / "goldens.json");
  nlohmann::json j = nlohmann::json::parse(f);
  std::vector<GoldenPrompt> out;
  const auto& lc = j["llama_cpp"]["mxfp4"]["prompts"];
  for (size_t i = 0; i < j["prompts"].size(); ++i) {
    const auto& p = j["prompts"][i];
    GoldenPrompt g;
    g.ids = p["prompt_ids"].get<std::vector<int32_t>>();
    const auto& ex = p["modes"]["exact"];
    const auto& qa = p["modes"]["qat"];
    g.greedy_exact = ex["greedy_tokens"].get<std::vector<int32_t>>();
    g.greedy_qat = qa["greedy_tokens"].get<std::vector<int32_t>>();
    g.exact_prefill = ex["prefill_logits"];
    g.exact_decode = ex["decode_logits"];
    g.qat_prefill = qa["prefill_logits"];
    g.qat_decode = qa["decode_logits"];
    g.lc_prefill = lc[i]["prefill_logits"];
    g.lc_decode = lc[i]["decode_logits"];
    if (ex.contains("records"))
      for (auto it = ex["records"].begin(); it != ex["records"].end(); ++it)
        g.exact_records.emplace_back(it.key(), it.value()["file"].get<std::string>());
    out.push_back(std::move(g));
  }
  return out;
}

namespace {
template <class T>
std::vector<T> read_raw(const std::string& file) {
  std::filesystem::path p = tiny_dir() / file;
  if (!std::filesystem::exists(p)) p = tiny_dir() / "goldens" / std::filesystem::path(file).filename();
  std::ifstream f(p, std::ios::binary);
  std::vector<T> v(std::filesystem::file_size(p) / sizeof(T));
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  return v;
}
}  // namespace

std::vector<float> read_f32(const std::string& file) { return read_raw<float>(file); }
std::vector<int32_t> read_i32(const std::string& file) { return read_raw<int32_t>(file); }

int32_t argmax_row(const std::vector<float>& logits, int64_t r, int64_t vocab) {
  int32_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (logits[r * vocab + v] > logits[r * vocab + best]) best = static_cast<int32_t>(v);
  return best;
}

LogprobDelta compare_logprobs(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  LogprobDelta d;
  d.rows = static_cast<int64_t>(std::min(a.size(), b.size())) / vocab;
  auto lse = [vocab](const float* x) {
    double m = x[0];
    for (int64_t v = 1; v < vocab; ++v) m = std::max(m, static_cast<double>(x[v]));
    double s = 0;
    for (int64_t v = 0; v < vocab; ++v) s += std::exp(x[v] - m);
    return m + std::log(s);
  };
  double sum = 0;
  int64_t agree = 0;
  for (int64_t r = 0; r < d.rows; ++r) {
    const float* x = a.data() + r * vocab;
    const float* y = b.data() + r * vocab;
    const double la = lse(x), lb = lse(y);
    for (int64_t v = 0; v < vocab; ++v) {
      const double e = std::fabs((x[v] - la) - (y[v] - lb));
      sum += e;
      d.max_abs = std::max(d.max_abs, e);
    }
    agree += argmax_row(a, r, vocab) == argmax_row(b, r, vocab);
  }
  d.mean_abs = d.rows ? sum / static_cast<double>(d.rows * vocab) : 0;
  d.top1 = d.rows ? static_cast<double>(agree) / static_cast<double>(d.rows) : 0;
  return d;
}

std::string describe(const LogprobDelta& d) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "mean %.3g max %.3g top1 %.1f%% (%lld rows)", d.mean_abs, d.max_abs,
                100 * d.top1, static_cast<long long>(d.rows));
  return buf;
}

void expect_exact_gate(const LogprobDelta& prefill, const LogprobDelta& decode, const std::string& what) {
  for (const auto* d : {&prefill, &decode}) {
    const char* part = d == &prefill ? "prefill" : "decode";
    EXPECT_LE(d->mean_abs, kExactMeanTol) << what << " " << part;
    EXPECT_LE(d->max_abs, kExactMaxTol) << what << " " << part;
    EXPECT_EQ(d->top1, 1.0) << what << " " << part;
  }
}

}  // namespace ds4::test
