// engine/cli/cmd_convert.cpp — `ds4-offload convert`:
//   convert -m SRC --to nvfp4 -o DIR [--prompts F [-c N] [-t N]]
//                                        lossless FP4 -> NVFP4 (ModelOpt layout) cast of the experts;
//                                        with --prompts, input_scale calibrated (nvfp4_calibration.h)
//   convert -m SRC --to gguf -o FILE [--experts keep|mxfp4|q8_0|q2_k|iq2_xxs|iq1_m] [--dense f32|bf16]
//   convert --audit A B                  compare two checkpoints tensor by tensor after decoding
// (engine/checkpoint_convert.h has the definitions.)
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/checkpoint_convert.h"
#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/cli/temp_cleanup.h"
#include "engine/model_config.h"
#include "engine/nvfp4_calibration.h"
#include "gguf/safetensors.h"

namespace ds4::cli {
namespace {

struct ConvertArgs {
  std::string model, to, out, prompts;
  std::vector<std::string> audit;
  GgufConvertOptions gguf;
  int threads = 0;
  int64_t ctx = 0;    // calibration window (0 = min(4096, context_length))
  int64_t chunk = 512;
  bool prompt_ids = false;  // --prompts holds token ids
};
ConvertArgs args;

/// Error unless `out` is absent or an empty folder, and its parent folder exists (both targets
/// create only the last path component). `what` names the option.
Result<void> check_new_output(const std::string& out, bool folder, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(out);
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) return Error{what + " '" + out + "': the folder '" + parent.string() + "' does not exist"};
  if (!folder) return ok();
  if (!fs::exists(p, ec)) return ok();
  if (!fs::is_directory(p, ec)) return Error{what + " '" + out + "': expected a new or empty folder, found a file"};
  size_t n = 0;
  for (auto it = fs::directory_iterator(p, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) ++n;
  if (n) return Error{what + " '" + out + "': expected a new or empty folder, found " + std::to_string(n) + " entries"};
  return ok();
}

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("convert", "Convert a checkpoint (FP4 -> NVFP4 lossless cast, or to a llama.cpp GGUF), or audit two");
  s->add_option("-m,--model", args.model, "Source: DeepSeek safetensors folder (or, for --to gguf, any model the engine reads)");
  s->add_option("--to", args.to, "nvfp4 (safetensors folder, ModelOpt layout) or gguf (llama.cpp deepseek4 file)");
  s->add_option("-o,--output", args.out, "Output folder (nvfp4) or file (gguf)");
  s->add_option("--prompts", args.prompts,
                "nvfp4: calibrate input_scale (ModelOpt: amax / (6 * 448)) from these prompts, one per non-empty line "
                "(as `calibrate`; FP32 activations); without it input_scale = 1.0");
  s->add_option("-c,--ctx-size,--ctx", args.ctx, "nvfp4 --prompts: window length in tokens (0 = min(4096, context_length))")
      ->capture_default_str();
  s->add_option("--chunk", args.chunk, "nvfp4 --prompts: tokens per eval call")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  s->add_flag("--prompt-ids", args.prompt_ids,
              "nvfp4 --prompts: each line is whitespace-separated token ids (for a checkpoint without tokenizer.json)");
  s->add_option("-t,--threads", args.threads, "nvfp4 --prompts: threads (0 = all)")->capture_default_str();
  s->add_option("--experts", args.gguf.experts, "gguf: routed-expert type: keep, mxfp4, q8_0, q2_k, iq2_xxs, iq1_m (default: mxfp4 for a safetensors "
                "FP4 source, lossless; keep = each tensor's own type for a GGUF source; a change of type prints a note, lossy)");
  s->add_option("--dense", args.gguf.dense, "gguf: FP8/BF16 dense tensors as f32 (lossless) or bf16 (checked lossless)")
      ->capture_default_str();
  s->add_option("--audit", args.audit, "Compare checkpoints A and B (GGUF or folders) after decoding")->expected(2);
  return s;
}

/// `--prompts`: the prompts run through SRC (loaded as `calibrate` loads it, FP32 activations) with
/// the activation hook, then ModelOpt's input_scale per expert matrix (engine/nvfp4_calibration.h).
Result<std::map<std::string, float>> calibrate_input_scales() {
  const char* cmd = "convert";
  DS4_TRY(std::string text, read_text_file(args.prompts, "--prompts", kMaxCorpusBytes, /*allow_stdin=*/true));
  const std::vector<std::string> lines = split_prompt_lines(text);
  if (lines.empty()) return Error{args.prompts + ": no prompt (every line is empty)"};
  if (args.ctx < 0) return Error{"-c/--ctx-size: expected 0 (auto) or >= 1, found " + std::to_string(args.ctx)};
  ModelArgs ma;
  ma.model = args.model;
  ma.activations = "f32";
  ma.threads = args.threads;
  DS4_TRY(std::shared_ptr<Model> m, load_model(ma, cmd));
  std::vector<std::vector<int32_t>> prompts;
  if (args.prompt_ids) {
    for (size_t i = 0; i < lines.size(); ++i) {
      DS4_TRY(auto ids, parse_token_ids(lines[i], args.prompts + " prompt " + std::to_string(i + 1), m->config().vocab));
      prompts.push_back(std::move(ids));
    }
  } else {
    const Tokenizer* tok = m->tokenizer();
    if (!tok) return Error{args.model + ": the checkpoint has no tokenizer.json; give --prompts as token ids with --prompt-ids"};
    prompts = tokenize_prompts(*tok, lines);
  }
  const ModelConfig& c = m->config();
  const int64_t ctx = args.ctx > 0 ? args.ctx : std::min<int64_t>(4096, c.n_ctx);
  if (ctx > c.n_ctx) return Error{"-c/--ctx-size " + std::to_string(ctx) + " exceeds the model's context_length " + std::to_string(c.n_ctx)};
  DS4_TRY(gguf::SafetensorsCheckpoint ck, gguf::SafetensorsCheckpoint::open(args.model));
  DS4_TRY(ExpertInputMaxima maxima, ExpertInputMaxima::create(c, ck, args.threads));
  DS4_TRY(std::unique_ptr<Session> session, Session::create(m));
  std::atomic<size_t> done_prompts{0};
  std::atomic<int64_t> done_tokens{0};
  const auto t0 = std::chrono::steady_clock::now();
  PromptRunStats st;
  {
    Progress progress("convert: calibrating", [&] {
      return "prompt " + std::to_string(done_prompts.load() + 1) + " of " + std::to_string(prompts.size()) + ", " +
             std::to_string(done_tokens.load()) + " tokens";
    });
    const PromptRunOptions ro{.window = ctx, .chunk = args.chunk, .done_prompts = &done_prompts, .done_tokens = &done_tokens};
    DS4_TRY_VOID(calibrate_expert_inputs(*session, prompts, ro, maxima, &st));
  }
  int filled = 0;
  DS4_TRY(auto scales, maxima.input_scales(&filled));
  int reached = 0;
  for (int l = 0; l < c.n_layer; ++l)
    for (int e = 0; e < c.n_expert; ++e) reached += maxima.routed(l, e) > 0;
  std::fprintf(stderr,
               "convert: calibrated on %zu prompts, %lld tokens in %.2f s: %d of %d (layer, expert) pairs reached; "
               "input_scale = amax / (6 * 448) (ModelOpt); %d matrices of unreached experts take their layer's largest\n",
               prompts.size(), (long long)st.tokens, seconds_since(t0), reached, c.n_layer * c.n_expert, filled);
  return scales;
}

int run() {
  const char* cmd = "convert";
  if (!args.audit.empty()) {
    if (!args.model.empty() || !args.to.empty()) return fail(cmd, "--audit A B takes no -m/--to");
    auto r = audit_checkpoints(args.audit[0], args.audit[1]);
    if (!r) return fail(cmd, r.error().message);
    std::printf("audit %s vs %s: %d tensors compared, %d bit-exact after decoding; %llu / %llu elements exact (%.4f %%)\n",
                args.audit[0].c_str(), args.audit[1].c_str(), r->tensors, r->identical, (unsigned long long)r->elements_exact,
                (unsigned long long)r->elements, r->elements ? 100.0 * double(r->elements_exact) / double(r->elements) : 100.0);
    for (const auto& d : r->differences) std::printf("  differs: %s\n", d.c_str());
    for (const auto& n : r->only_in_a) std::printf("  only in A: %s\n", n.c_str());
    for (const auto& n : r->only_in_b) std::printf("  only in B: %s\n", n.c_str());
    for (const auto& n : r->not_compared) std::printf("  not compared: %s\n", n.c_str());
    return r->identical == r->tensors && r->only_in_a.empty() && r->only_in_b.empty() ? 0 : 2;
  }
  if (args.model.empty() || args.out.empty() || args.to.empty()) return fail(cmd, "expected -m SRC --to nvfp4|gguf -o OUT, or --audit A B");
  // Test hook: DS4_TEST_CONVERT_STALL set = stop (sleep until a signal) after the first progress
  // line, with the temporary output partly written (tests/frontend/cli_test.cpp interrupts it there).
  static const bool stall = std::getenv("DS4_TEST_CONVERT_STALL") != nullptr;
  auto progress = [](const std::string& s) {
    std::fprintf(stderr, "convert: %s\n", s.c_str());
    if (stall && s.find("note:") == std::string::npos)
      for (;;) ::pause();
  };
  if (args.prompt_ids && args.prompts.empty()) return fail(cmd, "--prompt-ids applies only with --prompts");
  if (auto t = check_threads(args.threads); !t) return fail(cmd, t.error().message);
  if (args.to == "nvfp4") {
    if (!args.gguf.experts.empty()) return fail(cmd, "--experts applies only to --to gguf (NVFP4 casts the FP4 experts)");
    if (auto c = check_new_output(args.out, /*folder=*/true, "-o/--output"); !c) return fail(cmd, c.error().message);
    std::map<std::string, float> scales;
    if (args.prompts.empty()) {
      std::fprintf(stderr, "convert: input_scale = 1.0 for every expert (no --prompts; W4A16/W4A8 kernels ignore it)\n");
    } else {
      auto c = calibrate_input_scales();
      if (!c) return fail(cmd, c.error().message);
      scales = std::move(c.value());
    }
    // Written under a sibling temporary name and renamed at the end: an error, Ctrl-C or SIGTERM
    // leaves no partial folder under the final name.
    namespace fs = std::filesystem;
    const std::string tmp = args.out + ".tmp." + std::to_string(::getpid());
    std::error_code ec;
    fs::remove_all(tmp, ec);
    Result<Nvfp4CastReport> r = Error{""};
    {
      TempCleanupGuard guard(tmp, /*is_dir=*/true);  // removed on SIGINT/SIGTERM
      r = cast_checkpoint_to_nvfp4(args.model, tmp, progress, scales);
      if (r) {
        fs::remove(args.out, ec);  // an empty folder (checked above), or absent
        if (std::rename(tmp.c_str(), args.out.c_str()) != 0)
          r = Error{"-o/--output '" + args.out + "': cannot rename the finished folder into place (" + std::strerror(errno) + ")"};
      }
      if (!r) fs::remove_all(tmp, ec);
    }
    if (!r) return fail(cmd, r.error().message);
    std::printf("convert: %s -> %s (NVFP4, ModelOpt layout): %d expert matrices cast, %d tensors copied byte-identically; "
                "blocks bit-exact %llu / %llu (%.2f %%); %llu E2M1 -0 nibbles written as +0; widest scale range %d octaves "
                "(limit 17); %d input_scale calibrated; %.2f s\n",
                args.model.c_str(), args.out.c_str(), r->expert_tensors, r->copied_tensors, (unsigned long long)r->blocks_exact,
                (unsigned long long)r->blocks, r->blocks ? 100.0 * double(r->blocks_exact) / double(r->blocks) : 100.0,
                (unsigned long long)r->neg_zero, r->max_octaves, r->calibrated, r->seconds);
    return 0;
  }
  if (args.to == "gguf") {
    if (!args.prompts.empty()) return fail(cmd, "--prompts applies only to --to nvfp4 (input_scale calibration)");
    // The output must not be one of the source's files (a shard of a folder included): writing it
    // would destroy the checkpoint while it is memory-mapped.
    std::vector<std::string> inputs{args.model};
    std::error_code ec;
    if (std::filesystem::is_directory(args.model, ec))
      for (const auto& e : std::filesystem::directory_iterator(args.model, ec))
        if (e.is_regular_file(ec)) inputs.push_back(e.path().string());
    if (auto c = check_output_not_input(args.out, "-o/--output", inputs); !c) return fail(cmd, c.error().message);
    if (auto c = check_new_output(args.out, /*folder=*/false, "-o/--output"); !c) return fail(cmd, c.error().message);
    Result<uint64_t> r = Error{""};
    {
      // GgufWriter::write's temporary file (gguf_writer.cpp: "<out>.tmp.<pid>"), removed on a signal.
      TempCleanupGuard guard(args.out + ".tmp." + std::to_string(::getpid()), /*is_dir=*/false);
      r = convert_to_gguf(args.model, args.out, args.gguf, progress);
    }
    if (!r) return fail(cmd, r.error().message);
    const std::string et = !args.gguf.experts.empty() ? args.gguf.experts
                           : gguf::is_safetensors_path(args.model) ? "mxfp4" : "kept";
    std::printf("convert: %s -> %s (GGUF deepseek4, experts %s, dense %s): %.2f MiB of tensors\n", args.model.c_str(),
                args.out.c_str(), et.c_str(), args.gguf.dense.c_str(), double(*r) / 1048576.0);
    return 0;
  }
  return fail(cmd, "--to '" + args.to + "': expected nvfp4 or gguf");
}

const CommandRegistrar reg{{"convert", setup, run}};

}  // namespace
}  // namespace ds4::cli
