// engine/prompt_runner.cpp — see prompt_runner.h.
#include "engine/prompt_runner.h"

#include <algorithm>
#include <chrono>
#include <sstream>

namespace ds4 {

std::vector<std::string> split_prompt_lines(const std::string& text) {
  std::vector<std::string> prompts;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) prompts.push_back(line);
  }
  return prompts;
}

std::vector<std::vector<int32_t>> tokenize_prompts(const Tokenizer& tok, std::span<const std::string> prompts) {
  std::vector<std::vector<int32_t>> out;
  out.reserve(prompts.size());
  for (const std::string& p : prompts) out.push_back(tok.encode(p, tok.add_bos(), /*parse_special=*/true));
  return out;
}

Result<PromptRunStats> run_prompts(Session& session, std::span<const std::vector<int32_t>> prompts,
                                   const PromptRunOptions& o, const std::function<void(ForwardTrace&)>& prepare,
                                   const std::function<Result<void>(size_t prompt, std::span<const int32_t> window,
                                                                    ForwardTrace& trace)>& on_window) {
  if (o.window < 1 || o.chunk < 1) return Error{"run_prompts: window and chunk must be >= 1"};
  const auto t0 = std::chrono::steady_clock::now();
  PromptRunStats st;
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    if (o.done_prompts) *o.done_prompts = pi;
    const std::vector<int32_t>& toks = prompts[pi];
    for (size_t w0 = 0; w0 < toks.size(); w0 += size_t(o.window)) {
      const size_t w1 = std::min(toks.size(), w0 + size_t(o.window));
      session.reset();
      ForwardTrace trace;
      if (prepare) prepare(trace);
      session.set_trace(&trace);
      for (size_t p = w0; p < w1; p += size_t(o.chunk)) {
        const size_t q = std::min(w1, p + size_t(o.chunk));
        auto e = session.eval(std::span<const int32_t>(toks.data() + p, q - p), nullptr, nullptr);
        if (!e) {
          session.set_trace(nullptr);
          return Error{"prompt " + std::to_string(pi + 1) + ": " + e.error().message};
        }
        st.tokens += int64_t(q - p);
        if (o.done_tokens) *o.done_tokens += int64_t(q - p);
      }
      session.set_trace(nullptr);
      ++st.windows;
      if (on_window) DS4_TRY_VOID(on_window(pi, std::span<const int32_t>(toks.data() + w0, w1 - w0), trace));
    }
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace ds4
