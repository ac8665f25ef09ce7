// tests/engine/golden_data.h — access to the dsv4-tiny fixture (../shared/fixtures/dsv4-tiny:
// goldens.json + goldens/*.f32|*.i32) and the comparison metrics the golden tests print.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ds4::test {

/// Fixture directory of dsv4-tiny, or empty when absent (tests then exit 77).
std::filesystem::path tiny_dir();
/// Path of the MXFP4 GGUF.
std::filesystem::path tiny_gguf();

/// One prompt of goldens.json.
struct GoldenPrompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy_exact, greedy_qat;
  std::string exact_prefill, exact_decode, qat_prefill, qat_decode;  // file names under goldens/
  std::string lc_prefill, lc_decode;                                  // llama.cpp MXFP4 logits
  // record name ("router_layer3", "indexer_layer2") -> file (exact mode), prompt 0 only
  std::vector<std::pair<std::string, std::string>> exact_records;
};

/// Parses goldens.json.
std::vector<GoldenPrompt> load_goldens();
/// Reads a little-endian float32 / int32 file under goldens/.
std::vector<float> read_f32(const std::string& file);
std::vector<int32_t> read_i32(const std::string& file);

/// |delta log-softmax| statistics over rows x vocab, plus top-1 agreement of the rows.
struct LogprobDelta {
  double mean_abs = 0, max_abs = 0, top1 = 0;
  int64_t rows = 0;
};
LogprobDelta compare_logprobs(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab);
/// Index of the largest entry of row r (ties: lower index).
int32_t argmax_row(const std::vector<float>& logits, int64_t r, int64_t vocab);
/// "mean 1.2e-06 max 3.4e-05 top1 100.0% (500 rows)".
std::string describe(const LogprobDelta& d);

/// Issue 3's gate for F32 activations against the reference's `exact` goldens.
inline constexpr double kExactMeanTol = 1e-4;  // mean |delta logprob|
inline constexpr double kExactMaxTol = 1e-3;   // max |delta logprob|
/// Adds gtest failures (labelled `what`) unless prefill and decode rows both meet the gate:
/// mean <= kExactMeanTol, max <= kExactMaxTol, 100% top-1.
void expect_exact_gate(const LogprobDelta& prefill, const LogprobDelta& decode, const std::string& what);

}  // namespace ds4::test
