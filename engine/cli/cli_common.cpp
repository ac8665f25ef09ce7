// engine/cli/cli_common.cpp — see cli_common.h.
#include "engine/cli/cli_common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/model_config.h"
#include "kernels/cpu/cpu_features.h"

namespace ds4::cli {

Result<std::string> read_text_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Error{what + " '" + path + "': file not found"};
  if (std::filesystem::is_directory(path, ec)) return Error{what + " '" + path + "': is a directory, expected a file"};
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error{what + " '" + path + "': cannot open (" + std::strerror(errno) + ")"};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<std::vector<int32_t>> parse_token_ids(const std::string& text, const std::string& source, int64_t vocab) {
  std::vector<int32_t> ids;
  size_t i = 0;
  const size_t n = text.size();
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (true) {
    while (i < n && is_space(text[i])) ++i;
    if (i >= n) break;
    size_t j = i;
    while (j < n && !is_space(text[j])) ++j;
    std::string_view tok(text.data() + i, j - i);
    const size_t index = ids.size() + 1;
    int64_t v = 0;
    auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc() || p != tok.data() + tok.size())
      return Error{source + ": token " + std::to_string(index) + ": expected a non-negative integer id, found \"" +
                   std::string(tok.substr(0, 40)) + "\""};
    if (v < 0 || v >= vocab)
      return Error{source + ": token " + std::to_string(index) + ": id " + std::to_string(v) +
                   " is out of range, expected 0 <= id < vocab_size " + std::to_string(vocab)};
    ids.push_back(int32_t(v));
    i = j;
  }
  if (ids.empty()) return Error{source + ": expected at least one whitespace-separated token id, found none"};
  return ids;
}

Result<Activations> parse_activations(const std::string& s) {
  if (s == "f32") return Activations::F32;
  if (s == "q8") return Activations::Q8;
  return Error{"--activations: expected f32 or q8, found \"" + s + "\""};
}

const char* activations_name(Activations a) { return a == Activations::Q8 ? "q8" : "f32"; }

Result<std::shared_ptr<Model>> load_model(const ModelArgs& a, const char* command) {
  DS4_TRY(Activations acts, parse_activations(a.activations));
  if (a.threads < 0) return Error{"-t/--threads: expected 0 (all) or a positive count, found " + std::to_string(a.threads)};
  std::error_code ec;
  if (!std::filesystem::exists(a.model, ec)) return Error{"-m/--model '" + a.model + "': file not found"};
  ModelOptions mo;
  mo.activations = acts;
  mo.threads = a.threads;
  mo.tp = a.tp;
  mo.experts_tier = a.experts_tier;
  mo.expert_plan = a.plan;
  mo.backend = a.backend;
  if (!a.plan.empty() && !std::filesystem::exists(a.plan, ec)) return Error{"--plan '" + a.plan + "': file not found"};
  auto t0 = std::chrono::steady_clock::now();
  DS4_TRY(std::shared_ptr<Model> m, Model::load(a.model, mo));
  const ModelConfig& c = m->config();
  std::fprintf(stderr,
               "%s: model %s: %d layers, dim %lld, vocab %lld, %d experts (top-%d), weights %.1f MiB, loaded in %.2f s\n",
               command, a.model.c_str(), c.n_layer, (long long)c.dim, (long long)c.vocab, c.n_expert, c.n_expert_used,
               double(m->weight_bytes()) / (1024.0 * 1024.0), seconds_since(t0));
  const bool q8 = m->options().activations == Activations::Q8;
  std::fprintf(stderr, "%s: activations: %s (default f32; effective %s), threads: %d%s%s%s, backend: %s (%s)\n",
               command, activations_name(acts), activations_name(m->options().activations), m->options().threads,
               m->options().threads == 0 ? " (all)" : "", q8 ? ", q8 dot kernels: " : "",
               q8 ? cpu::dot_backend_name(cpu::selected_backend()) : "", a.backend.c_str(), m->device_name().c_str());
  return m;
}

Result<void> check_output_not_input(const std::string& output, const char* option,
                                    const std::vector<std::string>& inputs) {
  std::error_code ec;
  if (output.empty() || !std::filesystem::exists(output, ec)) return ok();
  for (const auto& in : inputs) {
    if (in.empty()) continue;
    if (std::filesystem::equivalent(output, in, ec) && !ec)
      return Error{std::string(option) + " '" + output + "': expected a new output file, found the input '" + in +
                   "' (it would be overwritten)"};
  }
  return ok();
}

Result<void> check_output_writable(const std::string& path, const char* option) {
  namespace fs = std::filesystem;
  if (path.empty()) return ok();
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return Error{std::string(option) + ": expected a file path, found the directory '" + path + "'"};
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    return Error{std::string(option) + " '" + path + "': folder '" + dir.string() + "' does not exist"};
  if (::access(dir.c_str(), W_OK) != 0 || (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0))
    return Error{std::string(option) + " '" + path + "': not writable"};
  return ok();
}

void add_parallel_options(CLI::App* s, ModelArgs& a, bool experts_tier) {
  s->add_option("--tp", a.tp,
                "Tensor-parallel ranks (1, 2, 4, 8): one thread and device per rank; CPU ranks without GPUs. "
                "Every value gives bit-identical logits")
      ->capture_default_str();
  s->add_option("--backend", a.backend, "Compute backend: cpu, or auto (the best available; cpu until the CUDA backend)")
      ->capture_default_str();
  if (experts_tier)
    s->add_option("--experts-tier", a.experts_tier,
                  "Force every routed expert into one staging tier: resident, host or nvme (diagnosis; default: "
                  "read from the GGUF mapping)");
}

CLI::Option* add_seed_option(CLI::App* s, uint64_t& seed, const std::string& help) {
  return s->add_option("--seed", seed, help)
      ->check(CLI::Validator(
          [](std::string& v) {
            if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
              return "expected a non-negative integer, found '" + v + "'";
            // 2^64-1 has 20 digits; compare the digits without leading zeros.
            const std::string max = "18446744073709551615";
            const std::string d = v.substr(std::min(v.find_first_not_of('0'), v.size()));
            if (d.size() > max.size() || (d.size() == max.size() && d > max))
              return "expected at most 2^64-1 = " + max + ", found '" + v + "'";
            return std::string();
          },
          "UINT64"))
      ->capture_default_str();
}

void add_plan_option(CLI::App* s, ModelArgs& a) {
  s->add_option("--plan", a.plan,
                "Placement plan (`ds4-offload plan --json`): each routed expert resident, staged from host memory, "
                "computed on the CPU or read from NVMe as the plan says; bytes per tier are counted");
}

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int fail(const char* command, const std::string& message) {
  std::fprintf(stderr, "ds4-offload %s: error: %s\n", command, message.c_str());
  return 1;
}

}  // namespace ds4::cli
