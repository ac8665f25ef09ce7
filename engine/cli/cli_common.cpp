// engine/cli/cli_common.cpp — see cli_common.h.
#include "engine/cli/cli_common.h"

#include "engine/load_progress.h"
#include "engine/cli/command.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "ds4/file_io.h"
#include "engine/dsv4_model.h"
#include "engine/model_config.h"
#include "engine/official_checkpoint.h"
#include "kernels/device.h"
#include "gguf/safetensors.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/iq_lookup.h"
#include "kernels/cpu/q8_passes.h"

namespace ds4::cli {

namespace {
// The text commands' tokenizer errors, the same before the load (preflight_model, from the
// header) and after it (text_tokenizer).
std::string no_tokenizer_message(const std::string& path) {
  return path + ": the model has no tokenizer.ggml.* metadata (GGUF) or tokenizer.json (checkpoint folder), so "
                "text cannot be tokenized (use `score --token-ids` with token ids)";
}
// At most `max` bytes of `s` as printable text: printable ASCII as is (`"` and `\` escaped),
// every other byte as \xNN (a NUL would end the message where it is printed), "..." when cut.
std::string escaped_prefix(std::string_view s, size_t max) {
  static const char* hex = "0123456789abcdef";
  std::string o;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += char(c);
    } else if (c >= 0x20 && c < 0x7f) {
      o += char(c);
    } else {
      o += "\\x";
      o += hex[c >> 4];
      o += hex[c & 15];
    }
  }
  if (s.size() > max) o += "...";
  return o;
}
std::string tokenizer_size_message(const std::string& path, int64_t tokens, int64_t vocab) {
  return path + ": tokenizer has " + std::to_string(tokens) + " tokens, expected vocab_size " + std::to_string(vocab) +
         " (tokenizer.ggml.tokens vs deepseek4.vocab_size)";
}
}  // namespace

Result<std::string> read_text_file(const std::string& path, const std::string& what, uint64_t max_bytes,
                                   bool allow_stdin) {
  return read_file_bounded(path, max_bytes, what, allow_stdin);
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
                   escaped_prefix(tok, 40) + "\" (at byte offset " + std::to_string(i) + ")"};
    if (v < 0 || v >= vocab)
      return Error{source + ": token " + std::to_string(index) + ": id " + std::to_string(v) +
                   " is out of range, expected 0 <= id < vocab_size " + std::to_string(vocab) + " (at byte offset " +
                   std::to_string(i) + ")"};
    ids.push_back(int32_t(v));
    i = j;
  }
  if (ids.empty()) return Error{source + ": expected at least one whitespace-separated token id, found none"};
  return ids;
}

Result<Activations> parse_activations(const std::string& s) {
  if (s == "f32") return Activations::F32;
  if (s == "q8") return Activations::Q8;
  if (s == "fp8") return Activations::Fp8;
  if (s == "auto") return Activations::Q8;
  return Error{"--activations: expected auto, f32, q8 or fp8, found \"" + s + "\""};
}

Result<Activations> resolve_activations(const std::string& s, const char* command, std::string* why) {
  DS4_TRY(Activations a, parse_activations(s));
  if (s != "auto") {
    // convert has no --activations: its calibration always runs FP32 activations.
    if (why) *why = std::string(command) == "convert" ? "convert calibrates with exactly decoded weights" : "as given by --activations";
    return a;
  }
  const std::string c = command;
  if (c == "score" || c == "perplexity" || c == "calibrate") {
    if (why) *why = "auto: f32 for " + c + " (exactly decoded weights: the figures are fidelity measurements)";
    return Activations::F32;
  }
  if (why)
    *why = "auto: q8 for " + c +
           " (2.4-3.8x faster decode than f32, mean |dlogprob| 0.118 vs the reference, llama.cpp 0.122; "
           "--activations f32 for exactly decoded weights)";
  return Activations::Q8;
}

const char* activations_name(Activations a) {
  return a == Activations::Q8 ? "q8" : a == Activations::Fp8 ? "fp8" : "f32";
}

Result<void> check_threads(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    return Error{"-t/--threads: expected 0 (all) to " + std::to_string(kMaxThreads) + ", found " + std::to_string(threads)};
  return ok();
}

Result<void> preflight_model(const ModelArgs& a, const char* command, const ModelNeeds& need) {
  DS4_TRY(Activations acts, resolve_activations(a.activations, command, nullptr));
  (void)acts;
  DS4_TRY_VOID(check_threads(a.threads));
  // "auto" is resolved (with its one note) by Model::load; "cuda" without a device fails here.
  if (a.backend != "auto") {
    auto k = dev::parse_backend(a.backend);
    if (!k) return Error{"--backend: " + k.error().message};
  }
  std::error_code ec;
  // A safetensors checkpoint folder is opened (and validated) by the checkpoint reader; every other
  // model path must be a regular file (a FIFO or device would block or read forever).
  if (!std::filesystem::is_directory(a.model, ec)) DS4_TRY_VOID(check_regular_file(a.model, "-m/--model"));
  if (!a.plan.empty() && !std::filesystem::exists(a.plan, ec)) return Error{"--plan '" + a.plan + "': file not found"};
  if (a.ctx_size < 0)
    return Error{"-c/--ctx-size: expected 0 (the model's context) or a positive token count, found " +
                 std::to_string(a.ctx_size)};
  // The header only: a GGUF's key/value and tensor-info section, or a checkpoint's config files.
  DS4_TRY(gguf::Metadata md, read_model_metadata(a.model));
  if (md.has("deepseek4.context_length")) {
    if (auto n_ctx = md.get_int("deepseek4.context_length"); n_ctx.ok() && *n_ctx > 0) {
      if (a.ctx_size > *n_ctx)
        return Error{"-c/--ctx-size " + std::to_string(a.ctx_size) + ": expected at most the model's context_length " +
                     std::to_string(*n_ctx)};
      if (need.ctx > *n_ctx)
        return Error{std::string(need.ctx_option) + " " + std::to_string(need.ctx) +
                     ": expected at most the model's context_length " + std::to_string(*n_ctx)};
    }
  }
  if (need.tokenizer) {
    DS4_TRY(TokenizerVocab v, tokenizer_vocab_from_gguf(md));
    if (v.tokens.empty()) return Error{no_tokenizer_message(a.model)};
    if (auto vocab = md.get_int("deepseek4.vocab_size"); vocab.ok() && int64_t(v.tokens.size()) != *vocab)
      return Error{tokenizer_size_message(a.model, int64_t(v.tokens.size()), *vocab)};
  }
  // Once per process: a command may run the preflight before its own early work and load_model again.
  static bool warned = false;
  if (const unsigned hw = std::thread::hardware_concurrency(); hw > 0 && a.threads > int(hw) && !warned) {
    warned = true;
    std::fprintf(stderr, "%s: warning: -t %d is more than the %u hardware threads of this machine (slower, not faster)\n",
                 command, a.threads, hw);
  }
  return ok();
}

Result<std::shared_ptr<Model>> load_model(const ModelArgs& a, const char* command, const ModelNeeds& need) {
  DS4_TRY_VOID(preflight_model(a, command, need));
  std::string why;
  DS4_TRY(Activations acts, resolve_activations(a.activations, command, &why));
  if (acts == Activations::Fp8 && !gguf::is_safetensors_path(a.model))
    std::fprintf(stderr,
                 "%s: note: --activations fp8 reproduces DeepSeek's QAT numerics on an official safetensors checkpoint; "
                 "on a GGUF only its MXFP4/FP8 weights and the KV/indexer get the QDQ (its F32/Q8_0 dense weights "
                 "were dequantized or requantized), so the logits are not the reference's qat logits\n",
                 command);
  if (!a.n_gpu_layers.empty())
    std::fprintf(stderr,
                 "%s: note: -ngl/--n-gpu-layers %s is not used: this runtime runs every layer on each --tp device "
                 "and places routed experts by a plan (`ds4-offload plan -m MODEL --json plan.json`, then --plan "
                 "plan.json)\n", command, a.n_gpu_layers.c_str());
  ModelOptions mo;
  mo.activations = acts;
  mo.threads = a.threads;
  mo.tp = a.tp;
  mo.experts_tier = a.experts_tier;
  mo.expert_plan = a.plan;
  mo.backend = a.backend;
  mo.cuda_graphs = a.cuda_graphs == "on";
  auto t0 = std::chrono::steady_clock::now();
  std::error_code sec;
  // A checkpoint folder (or a path file_size cannot size) reports no size: 0, printed as none.
  uint64_t file_bytes = std::filesystem::file_size(a.model, sec);
  if (sec) file_bytes = 0;
  Result<std::shared_ptr<Model>> loaded = Error{""};
  {
    // Model::load maps the file and checks keys and tensors (a GGUF's weights are not read); a
    // checkpoint folder's repack reads every weight byte and counts them (engine/load_progress.h).
    load_progress().start_phase(LoadPhase::None, 0);
    Progress p(std::string(command) + ": loading " + a.model, [file_bytes] {
      const LoadProgress& lp = load_progress();
      const auto phase = static_cast<LoadPhase>(lp.phase.load());
      const uint64_t total = lp.total.load(), done = std::min(lp.done.load(), total);
      if (phase == LoadPhase::None || total == 0)
        return file_bytes == 0 ? std::string("mapping and checking")
                               : "mapping and checking " + std::to_string(file_bytes >> 20) + " MiB";
      const char* what = phase == LoadPhase::Repack   ? "repacking and binding"
                         : phase == LoadPhase::Upload ? "uploading resident experts:"
                                                      : "checked and bound";
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s %.1f of %.1f MiB of tensors (%.0f %%)", what, double(done) / 1048576.0,
                    double(total) / 1048576.0, 100.0 * double(done) / double(total));
      std::string st = buf;
      if (progress_forced()) st += " [" + std::to_string(done) + " of " + std::to_string(total) + " bytes]";
      return st;
    });
    loaded = Model::load(a.model, mo);
  }
  DS4_TRY(std::shared_ptr<Model> m, std::move(loaded));
  const ModelConfig& c = m->config();
  std::fprintf(stderr,
               "%s: model %s: %d layers, dim %lld, vocab %lld, %d experts (top-%d), weights %.1f MiB, loaded in %.2f s\n",
               command, a.model.c_str(), c.n_layer, (long long)c.dim, (long long)c.vocab, c.n_expert, c.n_expert_used,
               double(m->weight_bytes()) / (1024.0 * 1024.0), seconds_since(t0));
  const bool q8 = m->options().activations == Activations::Q8;
  // Read every CPU kernel policy now, so that a bad DS4_CPU_IQ_LOOKUP / DS4_CPU_Q8_0_PASSES is
  // reported here, once, whatever the model's types and the family (not only when first consulted).
  (void)cpu::simd_mode();
  (void)cpu::iq_lookup_mode();
  (void)cpu::q8_passes_mode();
  std::fprintf(stderr, "%s: activations: %s (%s; effective %s), threads: %d%s%s%s, backend: %s (%s)\n",
               command, activations_name(acts), why.c_str(), activations_name(m->options().activations), m->options().threads,
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

Result<void> check_gguf_output(const std::string& path, const char* option) {
  if (path.empty()) return Error{std::string(option) + ": expected a file path, found an empty string"};
  DS4_TRY_VOID(check_output_writable(path, option));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    const char* kind = S_ISCHR(st.st_mode)    ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return Error{std::string(option) + " '" + path + "': expected a regular file path (a GGUF is written to a " +
                 "temporary file, extended to its size and renamed into place), found " + kind};
  }
  return ok();
}

CLI::Validator non_empty(const std::string& expected) {
  return CLI::Validator(
      [expected](std::string& v) {
        return v.empty() ? "expected " + expected + ", found an empty string" : std::string();
      },
      "");
}

void add_model_options(CLI::App* s, ModelArgs& a, const ModelOptionSet& which) {
  auto* m = s->add_option("-m,--model", a.model,
                          which.model_required ? "Model: a GGUF (a file, or any shard NAME-0000k-of-0000n.gguf of a split set) or an "
                                                 "official safetensors checkpoint (folder, index json or .safetensors)"
                                               : "Model: a GGUF (file or any shard of a split set) or a safetensors checkpoint");
  if (which.model_required) m->required();
  s->add_option("-t,--threads", a.threads, "CPU threads (0 = all hardware threads)")->capture_default_str();
  s->add_option("--activations", a.activations,
                "Matrix-product activations: auto (q8 for run/chat/serve/bench, f32 for score/perplexity/calibrate), "
                "f32 (exactly decoded weights, FP32 math), q8 (Q8_1 integer dots) or fp8 "
                "(DeepSeek's QAT simulation: FP8/FP4 activation QDQ, on safetensors folders)")
      ->capture_default_str();
  s->add_option("--tp", a.tp,
                "Tensor-parallel ranks (1, 2, 4, 8): one thread and device per rank; CPU ranks without GPUs. "
                "Every value gives bit-identical logits")
      ->capture_default_str();
  s->add_option("--backend", a.backend, "Compute backend: cpu, cuda (a CUDA build with a visible GPU), or auto (cuda when available, else cpu)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            if (v == "cpu" || v == "cuda" || v == "auto") return std::string();
            // An empty value (`--backend "$UNSET"`) is refused, not read as auto.
            return "expected cpu, cuda or auto, found " + (v.empty() ? std::string("an empty string") : "'" + v + "'");
          },
          "cpu|cuda|auto"));
  s->add_option("--cuda-graphs", a.cuda_graphs,
                "Decode steps of one token as CUDA graphs, one per span between host waits (on, the default, "
                "or off; llama.cpp's GGML_CUDA_DISABLE_GRAPHS=1 is --cuda-graphs off here). Same bits either way; "
                "no effect on the CPU backend")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            if (v == "on" || v == "off") return std::string();
            return "expected on or off, found " + (v.empty() ? std::string("an empty string") : "'" + v + "'");
          },
          "on|off"));
  if (which.experts_tier)
    s->add_option("--experts-tier", a.experts_tier,
                  "Force every routed expert into one staging tier: resident, host or nvme (diagnosis; default: "
                  "read from the GGUF mapping). Any --tp: at tp > 1 each rank reads the experts it owns (no "
                  "cache across steps); nvme needs a GGUF; not with --plan")
        ->check(non_empty("resident, host or nvme"));
  if (which.plan)
    s->add_option("--plan", a.plan,
                  "Placement plan (`ds4-offload plan --json`): each routed expert resident, staged from host memory, "
                  "computed on the CPU or read from NVMe as the plan says; bytes per tier are counted")
        ->check(non_empty("a plan file"));
  if (which.ctx_size)
    s->add_option("-c,--ctx-size,--ctx", a.ctx_size,
                  which.ctx_help != nullptr
                      ? which.ctx_help
                      : "Context length in tokens (0 = the model's context_length; the sequence state grows per token, "
                        "nothing is reserved up front; prompt + -n beyond it is clamped with a note)")
        ->capture_default_str();
  // "-ngl" itself is rewritten to --n-gpu-layers by main() (CLI11 short names are one letter).
  s->add_option("--n-gpu-layers,--gpu-layers", a.n_gpu_layers,
                "-ngl N, llama.cpp's GPU layer count: accepted but not used (every layer runs on each --tp device; "
                "routed experts go where `ds4-offload plan` puts them, see --plan)");
}

Result<int64_t> effective_ctx(const ModelArgs& a, int64_t model_ctx, int64_t default_cap, const char* command) {
  if (a.ctx_size < 0)
    return Error{"-c/--ctx-size: expected 0 (the model's context) or a positive token count, found " +
                 std::to_string(a.ctx_size)};
  if (a.ctx_size > model_ctx)
    return Error{"-c/--ctx-size " + std::to_string(a.ctx_size) + ": expected at most the model's context_length " +
                 std::to_string(model_ctx)};
  if (a.ctx_size > 0) return a.ctx_size;
  const int64_t c = std::min(model_ctx, default_cap);
  if (c < model_ctx)
    std::fprintf(stderr, "%s: context: %lld tokens (the model's %lld capped; -c/--ctx-size N for more)\n", command,
                 (long long)c, (long long)model_ctx);
  return c;
}

CLI::Option* add_seed_option(CLI::App* s, uint64_t& seed, const std::string& help, bool* random) {
  auto* o = s->add_option("--seed", seed, help);
  o->check(CLI::Validator(
      [random](std::string& v) {
        if (random && v == "-1") {
          *random = true;
          v = "0";
          return std::string();
        }
        if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
          return "expected a non-negative integer" + std::string(random ? " or -1 (random)" : "") + ", found '" + v + "'";
        // 2^64-1 has 20 digits; compare the digits without leading zeros.
        const std::string max = "18446744073709551615";
        const std::string d = v.substr(std::min(v.find_first_not_of('0'), v.size()));
        if (d.size() > max.size() || (d.size() == max.size() && d > max))
          return "expected at most 2^64-1 = " + max + ", found '" + v + "'";
        return std::string();
      },
      "UINT64"));
  o->capture_default_str();
  return o;
}

void add_sampling_options(CLI::App* s, SamplerParams& p, bool* random_seed) {
  add_seed_option(s, p.seed, "Sampling seed (0 .. 2^64-1; -1 = random, printed)", random_seed);
  s->add_option("--temp", p.temperature, "Temperature (0 = greedy)")->capture_default_str();
  s->add_option("--top-k", p.top_k, "Top-k (0 = off)")->capture_default_str();
  s->add_option("--top-p", p.top_p, "Top-p (1 = off)")->capture_default_str();
  s->add_option("--min-p", p.min_p, "Min-p relative to the best token (0 = off)")->capture_default_str();
  s->add_option("--repeat-penalty", p.repeat_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  s->add_option("--repeat-last-n", p.repeat_last_n, "Tokens the penalty looks back (-1 = all)")->capture_default_str();
}

void resolve_seed(uint64_t& seed, bool random, const char* command) {
  if (!random) return;
  std::random_device rd;
  seed = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  std::fprintf(stderr, "%s: seed: %llu (random; --seed %llu repeats this run)\n", command, (unsigned long long)seed,
               (unsigned long long)seed);
}

Result<const Tokenizer*> text_tokenizer(const Model& m, const std::string& path) {
  const Tokenizer* tok = m.tokenizer();
  if (!tok) return Error{no_tokenizer_message(path)};
  if (tok->vocab_size() != m.config().vocab)
    return Error{tokenizer_size_message(path, tok->vocab_size(), m.config().vocab)};
  return tok;
}

Result<TextModel> load_text_model(const ModelArgs& a, const char* command, ModelNeeds need) {
  need.tokenizer = true;
  DS4_TRY(std::shared_ptr<Model> m, load_model(a, command, need));
  DS4_TRY(const Tokenizer* tok, text_tokenizer(*m, a.model));
  return TextModel{std::move(m), tok};
}

Result<void> check_finite_logits(std::span<const float> logits, int64_t vocab, int64_t pos0,
                                 const std::string& model_path) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i]))
      return Error{"the model produced a non-finite logit (" + std::string(std::isnan(logits[i]) ? "NaN" : "Inf") +
                   ") at position " + std::to_string(pos0 + int64_t(i) / std::max<int64_t>(vocab, 1)) + ", token id " +
                   std::to_string(int64_t(i) % std::max<int64_t>(vocab, 1)) +
                   ": its weights or metadata are broken; check it with `ds4-offload inspect --validate " +
                   model_path + "`"};
  return ok();
}

struct Progress::State {
  std::string label;
  std::function<std::string()> status;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool printed = false;
  bool forced = false;  // DS4_PROGRESS=1
  bool tty = ::isatty(2) != 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::thread th;
};

bool progress_forced() {
  static const bool forced = [] {
    const char* e = std::getenv("DS4_PROGRESS");
    return e != nullptr && std::string(e) == "1";
  }();
  return forced;
}

namespace {
// One progress line: rewritten in place on a terminal, a new line elsewhere.
void print_progress_line(Progress::State* s) {
  const std::string st = s->status ? s->status() : std::string();
  std::fprintf(stderr, "%s%s: %s (%.1f s)%s", s->tty ? "\r\x1b[K" : "", s->label.c_str(), st.c_str(),
               seconds_since(s->t0), s->tty ? "" : "\n");
  std::fflush(stderr);
  s->printed = true;
}
}  // namespace


Progress::Progress(std::string label, std::function<std::string()> status) : s_(std::make_unique<State>()) {
  s_->label = std::move(label);
  s_->status = std::move(status);
  s_->forced = progress_forced();
  if (s_->forced) s_->tty = false;
  State* s = s_.get();
  s->th = std::thread([s] {
    std::unique_lock<std::mutex> lk(s->mu);
    if (!s->forced && s->cv.wait_for(lk, std::chrono::seconds(1), [s] { return s->stop; })) return;
    const auto period = s->forced ? std::chrono::milliseconds(10)
                        : s->tty  ? std::chrono::milliseconds(500)
                                  : std::chrono::milliseconds(5000);
    do print_progress_line(s);
    while (!s->cv.wait_for(lk, period, [s] { return s->stop; }));
  });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lk(s_->mu);
    s_->stop = true;
  }
  s_->cv.notify_all();
  s_->th.join();
  // Once shown, the line ends with the finished figure (e.g. all bytes bound), not the last tick's.
  if (s_->printed) print_progress_line(s_.get());
  if (s_->printed && s_->tty) std::fputs("\n", stderr);
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
  return kExitBadInput;
}

}  // namespace ds4::cli
