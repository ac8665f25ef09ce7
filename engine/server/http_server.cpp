// engine/server/http_server.cpp — see http_server.h. Response shapes: OpenAI's Chat Completions /
// Completions objects and chunk objects (SSE: "data: {json}\n\n", then "data: [DONE]\n\n");
// DeepSeek's `reasoning_content` and usage `prompt_cache_hit_tokens` / `prompt_cache_miss_tokens`.
#include "engine/server/http_server.h"
#include "ds4/json_depth.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include <httplib.h>

#include "engine/chat_output_parser.h"
#include "engine/server/connection_gate.h"
#include "engine/server/engine_slot.h"
#include "engine/server/openai_request.h"
#include "engine/server/peer_socket.h"
#include "engine/server/scheduler.h"
#include "engine/server/stop_matcher.h"
#include "engine/utf8_stream.h"

namespace ds4::server {
namespace {

int g_signal_pipe[2] = {-1, -1};

extern "C" void on_signal(int sig) {
  const unsigned char c = static_cast<unsigned char>(sig);
  (void)!write(g_signal_pipe[1], &c, 1);  // async-signal-safe
}

using clock_type = std::chrono::steady_clock;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const Json& j) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status, error_body(e));
}

ApiError make_error(int status, std::string msg, std::string type, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(msg);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

/// Parses a request body into `out`; a 400 `invalid_json` error when it nests deeper than
/// kMaxJsonRequestDepth (checked first: the JSON library prints and compares recursively) or is
/// malformed.
std::optional<ApiError> parse_body(const std::string& body, Json& out) {
  if (auto e = json_depth_error(body, kMaxJsonRequestDepth, "the request body"); !e.empty())
    return make_error(400, e, "invalid_request_error", "invalid_json");
  try {
    out = Json::parse(body);
  } catch (const std::exception& e) {
    return make_error(400, std::string("malformed JSON in the request body: ") + e.what(), "invalid_request_error",
                      "invalid_json");
  }
  return std::nullopt;
}

struct State {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Scheduler> sched;
  ServeOptions opts;
  std::string alias;
  std::time_t created = std::time(nullptr);
  std::atomic<uint64_t> next_id{1};
  std::atomic<uint64_t> http_4xx{0}, http_5xx{0};
  std::atomic<uint64_t> client_gone{0};  // non-streamed requests whose client disconnected
  std::mt19937_64 seed_rng{std::random_device{}()};
  std::mutex seed_mu;
  const GatedServer* gate = nullptr;  // connection counters for /metrics
};

// Turns a job's tokens into text / parsed events: UTF-8 completion, stop strings, then (chat) the
// DSML/think parser. Used identically by the plain and the streamed responses, so both give the
// same text for the same tokens.
class Pump {
 public:
  Pump(const Engine& e, std::shared_ptr<Job> job, std::vector<std::string> stops, bool chat, bool thinking)
      : eng_(e), job_(std::move(job)), stop_(std::move(stops)) {
    if (chat) parser_.emplace(thinking);
  }
  /// Waits up to `wait` for output; appends events; true once the generation is over.
  bool pull(std::chrono::milliseconds wait, std::vector<ChatOutputEvent>& ev) {
    std::vector<int32_t> fresh;
    std::vector<TokenLogprob> fresh_lp;
    Finish fin;
    {
      std::unique_lock lk(job_->mu);
      job_->cv.wait_for(lk, wait, [&] { return job_->tokens.size() > consumed_ || job_->finish != Finish::None; });
      fresh.assign(job_->tokens.begin() + long(consumed_), job_->tokens.end());
      if (job_->logprobs.size() > consumed_)
        fresh_lp.assign(job_->logprobs.begin() + long(consumed_), job_->logprobs.end());
      fin = job_->finish;
      error_ = job_->error;
    }
    for (size_t i = 0; i < fresh.size(); ++i) {
      const int32_t t = fresh[i];
      ++consumed_;
      if (i < fresh_lp.size()) logprobs_.push_back(fresh_lp[i]);
      if (parser_ && parser_->in_reasoning()) ++reasoning_tokens_;
      feed(stop_.push(utf8_.push(eng_.piece(t))), ev);
      if (stop_.stopped()) {
        job_->cancel = true;  // the scheduler frees the slot at its next step
        stopped_by_string_ = true;
        break;
      }
    }
    if (stopped_by_string_ || fin != Finish::None) {
      if (!stopped_by_string_) feed(stop_.push(utf8_.flush()), ev);
      feed(stop_.finish(), ev);
      if (parser_) {
        auto tail = parser_->finish();
        ev.insert(ev.end(), tail.begin(), tail.end());
      }
      finish_ = stopped_by_string_ ? Finish::Eos : fin;
      return true;
    }
    return false;
  }
  Finish finish() const { return finish_; }
  const std::string& error() const { return error_; }
  /// Log-probabilities of the tokens consumed so far (when the job records them).
  const std::vector<TokenLogprob>& logprobs() const { return logprobs_; }
  int64_t completion_tokens() const { return int64_t(consumed_); }
  /// Prompt tokens the scheduler restored from the prefix cache.
  int64_t cached_tokens() const {
    std::lock_guard lk(job_->mu);
    return job_->cached_tokens;
  }
  /// Tokens generated while the output was still reasoning (the token that closes it included).
  int64_t reasoning_tokens() const { return reasoning_tokens_; }

 private:
  void feed(const std::string& text, std::vector<ChatOutputEvent>& ev) {
    if (text.empty()) return;
    if (parser_) {
      auto e = parser_->push(text);
      ev.insert(ev.end(), e.begin(), e.end());
    } else {
      ChatOutputEvent c;
      c.kind = ChatOutputEvent::Kind::Content;
      c.text = text;
      ev.push_back(std::move(c));
    }
  }
  const Engine& eng_;
  std::shared_ptr<Job> job_;
  Utf8StreamDecoder utf8_;
  StopMatcher stop_;
  std::optional<ChatOutputParser> parser_;
  size_t consumed_ = 0;
  std::vector<TokenLogprob> logprobs_;
  int64_t reasoning_tokens_ = 0;
  bool stopped_by_string_ = false;
  Finish finish_ = Finish::None;
  std::string error_;
};

// Cached = prompt tokens restored from the prefix cache (DeepSeek's hit/miss names, OpenAI's
// prompt_tokens_details.cached_tokens).
Json usage_json(int64_t prompt, const Pump& p) {
  const int64_t cached = p.cached_tokens();
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", p.completion_tokens()},
              {"total_tokens", prompt + p.completion_tokens()},
              {"prompt_tokens_details", {{"cached_tokens", cached}}},
              {"completion_tokens_details", {{"reasoning_tokens", p.reasoning_tokens()}}},
              {"prompt_cache_hit_tokens", cached},
              {"prompt_cache_miss_tokens", prompt - cached}};
}

// OpenAI's logprobs object for `lps`: chat {"content": [{token, logprob, bytes, top_logprobs:
// [{token, logprob, bytes}]}], "refusal": null}; completions (legacy) {"tokens", "token_logprobs",
// "top_logprobs": [{token: logprob}], "text_offset"} with offsets counted in bytes from
// `*offset` (advanced). Token text is the token's bytes, invalid UTF-8 replaced; `bytes` are raw.
Json logprobs_json(const Engine& eng, std::span<const TokenLogprob> lps, bool chat, int64_t* offset) {
  auto bytes = [](const std::string& p) {
    Json a = Json::array();
    for (unsigned char c : p) a.push_back(int(c));
    return a;
  };
  if (chat) {
    Json content = Json::array();
    for (const auto& t : lps) {
      const std::string p = eng.piece(t.id);
      Json top = Json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string q = eng.piece(id);
        top.push_back({{"token", sanitize_utf8(q)}, {"logprob", lp}, {"bytes", bytes(q)}});
      }
      content.push_back({{"token", sanitize_utf8(p)}, {"logprob", t.logprob}, {"bytes", bytes(p)}, {"top_logprobs", top}});
    }
    return Json{{"content", content}, {"refusal", nullptr}};
  }
  Json toks = Json::array(), tlp = Json::array(), top = Json::array(), off = Json::array();
  for (const auto& t : lps) {
    const std::string p = eng.piece(t.id);
    toks.push_back(sanitize_utf8(p));
    tlp.push_back(t.logprob);
    Json m = Json::object();
    for (const auto& [id, lp] : t.top) m[sanitize_utf8(eng.piece(id))] = lp;
    top.push_back(m);
    off.push_back(*offset);
    *offset += int64_t(p.size());
  }
  return Json{{"tokens", toks}, {"token_logprobs", tlp}, {"top_logprobs", top}, {"text_offset", off}};
}

// A prepared request: tokens, limits checked, job built.
struct Prepared {
  GenerationRequest req;
  std::shared_ptr<Job> job;
  std::string id;
};

std::optional<ApiError> prepare(State& st, const httplib::Request& http, bool chat, Prepared& p) {
  if (!valid_utf8(http.body)) return make_error(400, "the request body is not valid UTF-8", "invalid_request_error", "invalid_utf8");
  Json body;
  if (auto e = parse_body(http.body, body)) return e;
  RequestLimits lim;
  lim.max_messages = st.opts.max_messages;
  auto err = chat ? parse_chat_request(body, lim, p.req) : parse_completion_request(body, lim, p.req);
  if (err) return err;
  GenerationRequest& r = p.req;
  std::vector<int32_t> prompt;
  if (chat) {
    auto text = render_chat(r.messages, r.chat_options);
    if (!text) return make_error(400, text.error().message, "invalid_request_error");
    prompt = st.engine->tokenize(text.value(), /*add_bos=*/false, /*parse_special=*/true);
  } else if (r.prompt_is_tokens) {
    for (size_t i = 0; i < r.prompt_tokens.size(); ++i)
      if (r.prompt_tokens[i] >= st.engine->vocab())
        return make_error(400, "'prompt[" + std::to_string(i) + "]': expected a token id below the vocabulary size " +
                                   std::to_string(st.engine->vocab()) + ", found " + std::to_string(r.prompt_tokens[i]),
                          "invalid_request_error");
    prompt = r.prompt_tokens;
  } else {
    prompt = st.engine->tokenize(r.prompt_text, /*add_bos=*/true, /*parse_special=*/true);
  }
  if (prompt.empty()) return make_error(400, "the prompt is empty after tokenization", "invalid_request_error");
  const int64_t ctx = st.engine->n_ctx(), n = int64_t(prompt.size());
  if (n >= ctx)
    return make_error(400, "the prompt has " + std::to_string(n) + " tokens; the context is " + std::to_string(ctx) +
                               " tokens, which leaves no room to generate",
                      "invalid_request_error", "context_length_exceeded");
  const int64_t max_tokens = r.max_tokens.value_or(ctx - n);
  if (n + max_tokens > ctx)
    return make_error(400, "the prompt (" + std::to_string(n) + " tokens) plus max_tokens (" + std::to_string(max_tokens) +
                               ") exceed the context of " + std::to_string(ctx) + " tokens",
                      "invalid_request_error", "context_length_exceeded");
  if (!r.seed_given) {
    std::lock_guard lk(st.seed_mu);
    r.sampling.seed = st.seed_rng();
  }
  if (auto c = st.engine->check(r.sampling); !c) return make_error(400, c.error().message, "invalid_request_error");
  p.job = std::make_shared<Job>();
  p.job->prompt = std::move(prompt);
  p.job->sampling = r.sampling;
  p.job->max_tokens = max_tokens;
  p.job->cache_prompt = r.cache_prompt;
  p.job->top_logprobs = r.top_logprobs;
  char id[48];
  std::snprintf(id, sizeof id, "%s-%llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)st.next_id++);
  p.id = id;
  if (!st.sched->submit(p.job))
    return make_error(503, "the server is busy: all " + std::to_string(st.opts.n_slots) + " slots and " +
                               std::to_string(st.opts.max_queue) + " queue places are taken; retry later",
                      "server_error", "server_busy");
  return std::nullopt;
}

const char* finish_reason(Finish f, bool tool_calls) {
  if (f == Finish::Length) return "length";
  return tool_calls ? "tool_calls" : "stop";
}

// An error that ended a generation after it was admitted.
ApiError generation_error(const Pump& p) {
  if (p.finish() == Finish::Cancelled)
    return make_error(503, p.error().empty() ? "the request was cancelled" : p.error(), "server_error", "cancelled");
  return make_error(500, "generation failed: " + p.error(), "server_error", "engine_error");
}

Json tool_call_json(const ParsedToolCall& c, size_t index, const std::string& id, bool with_index) {
  Json j = {{"id", id + "-call-" + std::to_string(index)},
            {"type", "function"},
            {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
  if (with_index) j["index"] = index;
  return j;
}

void handle_generation(State& st, const httplib::Request& http, httplib::Response& res, bool chat) {
  auto p = std::make_shared<Prepared>();
  if (auto e = prepare(st, http, chat, *p)) {
    (e->status >= 500 ? st.http_5xx : st.http_4xx)++;
    return send_error(res, *e);
  }
  const bool thinking = chat && p->req.chat_options.mode == ThinkingMode::Thinking;
  auto pump = std::make_shared<Pump>(*st.engine, p->job, p->req.stop, chat, thinking);
  const int64_t n_prompt = int64_t(p->job->prompt.size());
  const std::time_t created = std::time(nullptr);
  const std::string model = st.alias;

  if (!p->req.stream) {
    // The client may go away while its reply is computed: its connection is polled between pulls
    // (every 100 ms or token batch), and the job is cancelled so the slot frees at the next step.
    const int fd = find_peer_socket(http.remote_addr, http.remote_port, http.local_port);
    // Counted once per request: pulls return per token batch too, so the peer can be seen gone
    // on several pulls before the cancel takes effect at the scheduler's next step.
    std::vector<ChatOutputEvent> ev;
    bool gone = false;
    while (!pump->pull(std::chrono::milliseconds(100), ev)) {
      if (!gone && fd >= 0 && peer_gone(fd)) {
        gone = true;
        p->job->cancel = true;
        st.client_gone++;
      }
    }
    if (pump->finish() == Finish::Cancelled || pump->finish() == Finish::Error) {
      st.http_5xx++;
      return send_error(res, generation_error(*pump));
    }
    std::string content, reasoning;
    Json calls = Json::array();
    for (const auto& e : ev) {
      if (e.kind == ChatOutputEvent::Kind::Content) content += e.text;
      if (e.kind == ChatOutputEvent::Kind::Reasoning) reasoning += e.text;
      if (e.kind == ChatOutputEvent::Kind::ToolCall) calls.push_back(tool_call_json(e.call, calls.size(), p->id, false));
    }
    const char* fr = finish_reason(pump->finish(), !calls.empty());
    Json lp = nullptr;
    int64_t offset = 0;
    if (p->req.top_logprobs >= 0) lp = logprobs_json(*st.engine, pump->logprobs(), chat, &offset);
    Json out;
    if (chat) {
      Json msg = {{"role", "assistant"}, {"content", content}};
      if (content.empty() && !calls.empty()) msg["content"] = nullptr;
      if (thinking) msg["reasoning_content"] = reasoning;
      if (!calls.empty()) msg["tool_calls"] = calls;
      out = {{"id", p->id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
             {"choices", Json::array({{{"index", 0}, {"message", msg}, {"logprobs", lp}, {"finish_reason", fr}}})}};
    } else {
      out = {{"id", p->id}, {"object", "text_completion"}, {"created", created}, {"model", model},
             {"choices", Json::array({{{"index", 0}, {"text", content}, {"logprobs", lp}, {"finish_reason", fr}}})}};
    }
    out["usage"] = usage_json(n_prompt, *pump);
    return send_json(res, 200, out);
  }

  // Streamed: one provider call writes the whole stream (httplib gives it this connection's thread).
  const bool include_usage = p->req.include_usage;
  auto provider = [&st, p, pump, chat, thinking, n_prompt, created, model, include_usage](size_t, httplib::DataSink& sink) {
    const bool want_lp = p->req.top_logprobs >= 0;
    size_t lp_sent = 0;
    int64_t lp_offset = 0;
    // Each chunk carries the logprobs of the tokens consumed since the previous chunk.
    auto chunk = [&](Json choice_delta, const Json& finish) {
      Json lp = nullptr;
      if (want_lp) {
        const auto& all = pump->logprobs();
        lp = logprobs_json(*st.engine, std::span<const TokenLogprob>(all).subspan(lp_sent), chat, &lp_offset);
        lp_sent = all.size();
      }
      Json c;
      if (chat)
        c = {{"id", p->id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
             {"choices", Json::array({{{"index", 0}, {"delta", std::move(choice_delta)}, {"logprobs", lp},
                                       {"finish_reason", finish}}})}};
      else
        c = {{"id", p->id}, {"object", "text_completion"}, {"created", created}, {"model", model},
             {"choices", Json::array({{{"index", 0}, {"text", choice_delta.value("content", "")}, {"logprobs", lp},
                                       {"finish_reason", finish}}})}};
      if (include_usage) c["usage"] = nullptr;
      const std::string s = "data: " + dump(c) + "\n\n";
      return sink.write(s.data(), s.size());
    };
    bool ok = true;
    if (chat) ok = chunk(Json{{"role", "assistant"}, {"content", ""}}, nullptr);
    size_t n_calls = 0;
    auto last_write = clock_type::now();
    bool done = false;
    while (ok && !done) {
      std::vector<ChatOutputEvent> ev;
      done = pump->pull(std::chrono::milliseconds(250), ev);
      for (const auto& e : ev) {
        if (!ok) break;
        if (e.kind == ChatOutputEvent::Kind::Content) ok = chunk(Json{{"content", e.text}}, nullptr);
        if (e.kind == ChatOutputEvent::Kind::Reasoning) ok = chunk(Json{{"reasoning_content", e.text}}, nullptr);
        if (e.kind == ChatOutputEvent::Kind::ToolCall)
          ok = chunk(Json{{"tool_calls", Json::array({tool_call_json(e.call, n_calls++, p->id, true)})}}, nullptr);
        last_write = clock_type::now();
      }
      // An SSE comment now and then while nothing is produced (long prefill): it finds a client
      // that has gone away, so its slot is freed.
      if (ok && !done && clock_type::now() - last_write > std::chrono::seconds(2)) {
        ok = sink.write(": keep-alive\n\n", 14);
        last_write = clock_type::now();
      }
    }
    if (!ok) {
      p->job->cancel = true;  // client gone: the slot is freed at the next step
      return false;
    }
    if (pump->finish() == Finish::Cancelled || pump->finish() == Finish::Error) {
      st.http_5xx++;
      const std::string s = "data: " + dump(error_body(generation_error(*pump))) + "\n\n";
      sink.write(s.data(), s.size());
    } else {
      const char* fr = finish_reason(pump->finish(), n_calls > 0);
      ok = chunk(chat ? Json::object() : Json{{"content", ""}}, fr);
      if (ok && include_usage) {
        Json u = {{"id", p->id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                  {"model", model}, {"choices", Json::array()}, {"usage", usage_json(n_prompt, *pump)}};
        const std::string s = "data: " + dump(u) + "\n\n";
        ok = sink.write(s.data(), s.size());
      }
    }
    if (ok) {
      static const std::string kDone = "data: [DONE]\n\n";
      sink.write(kDone.data(), kDone.size());
    }
    sink.done();
    return true;
  };
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", provider, [p](bool) { p->job->cancel = true; });
}

std::string metrics_text(State& st) {
  const SchedulerStats s = st.sched->stats();
  std::string o;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + buf + "\n";
  };
  metric("ds4_slots", "gauge", "Sequence slots (-np).", s.slots);
  metric("ds4_requests_processing", "gauge", "Requests holding a slot.", s.processing);
  metric("ds4_requests_queued", "gauge", "Requests waiting for a slot.", s.queued);
  metric("ds4_requests_total", "counter", "Generation requests admitted.", double(s.requests));
  metric("ds4_requests_rejected_total", "counter", "Generation requests refused because the queue was full (503).",
         double(s.rejected));
  metric("ds4_requests_cancelled_total", "counter", "Requests ended early (client gone, stop string, shutdown).",
         double(s.cancelled));
  metric("ds4_requests_failed_total", "counter", "Requests ended by an engine error.", double(s.errors));
  metric("ds4_http_client_errors_total", "counter", "Responses with a 4xx status from the generation endpoints.",
         double(st.http_4xx.load()));
  metric("ds4_http_server_errors_total", "counter", "Responses with a 5xx status from the generation endpoints.",
         double(st.http_5xx.load()));
  metric("ds4_http_client_gone_total", "counter",
         "Non-streamed requests whose client disconnected before the reply (generation cancelled).",
         double(st.client_gone.load()));
  if (st.gate) {
    const GateStats g = st.gate->stats();
    metric("ds4_http_connections_open", "gauge", "TCP connections open (idle, sending a request, or being answered).",
           double(g.open));
    metric("ds4_http_connections_waiting", "gauge",
           "Open connections waiting for a request head (held by the poll thread, not a worker).", double(g.waiting));
    metric("ds4_http_connections_accepted_total", "counter", "TCP connections accepted.", double(g.accepted));
    metric("ds4_http_connections_refused_total", "counter",
           "Connections refused with 503 because --max-connections were open.", double(g.refused));
    metric("ds4_http_header_timeouts_total", "counter",
           "Connections closed because their request head did not arrive within --header-timeout (408).",
           double(g.head_timeouts));
  }
  metric("ds4_prompt_tokens_total", "counter", "Prompt tokens prefilled.", double(s.prompt_tokens));
  metric("ds4_prompt_seconds_total", "counter", "Seconds spent in prefill.", s.prompt_seconds);
  metric("ds4_prompt_tokens_per_second", "gauge", "Prompt tokens per second of prefill time (average).",
         s.prompt_seconds > 0 ? double(s.prompt_tokens) / s.prompt_seconds : 0.0);
  metric("ds4_generated_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
  metric("ds4_generation_seconds_total", "counter", "Seconds spent in decode steps.", s.generation_seconds);
  metric("ds4_generation_tokens_per_second", "gauge", "Generated tokens per second of decode time (average).",
         s.generation_seconds > 0 ? double(s.generated_tokens) / s.generation_seconds : 0.0);
  metric("ds4_batch_steps_total", "counter", "Batched forward passes (one per scheduler step).", double(s.steps));
  metric("ds4_batch_sequences_total", "counter", "Sequences over all batched passes (divide by steps: mean batch).",
         double(s.batched_sequences));
  const PrefixCacheStats pc = st.engine->prefix_cache_stats();
  metric("ds4_prefix_cache_lookups_total", "counter", "Prefix-cache lookups (requests with cache_prompt).",
         double(pc.lookups));
  metric("ds4_prefix_cache_hits_total", "counter", "Prefix-cache lookups that restored a snapshot.", double(pc.hits));
  metric("ds4_prefix_cache_hit_tokens_total", "counter", "Prompt tokens restored instead of prefilled.",
         double(pc.hit_tokens));
  metric("ds4_prefix_cache_entries", "gauge", "Snapshots held.", double(pc.entries));
  metric("ds4_prefix_cache_bytes", "gauge", "Bytes of snapshots held.", double(pc.bytes));
  metric("ds4_prefix_cache_max_bytes", "gauge", "Prefix-cache budget (--prefix-cache-mib).", double(pc.max_bytes));
  metric("ds4_prefix_cache_evictions_total", "counter", "Snapshots evicted (least recently used).",
         double(pc.evictions));
  metric("ds4_sequence_state_bytes", "gauge", "Bytes of sequence state held by all slots.", double(s.state_bytes));
  // Per-tier routed-expert traffic of the expert store (staging/staging_counters.h), one labelled
  // series per tier; the store's tier is an info gauge. The default mmap store counts no copies.
  const staging::StagingCounters& e = s.experts;
  o += "# HELP ds4_expert_bytes_total Routed-expert weight bytes by where they came from (expert store counters).\n"
       "# TYPE ds4_expert_bytes_total counter\n";
  const std::pair<const char*, uint64_t> tiers[] = {
      {"resident_reads", e.bytes_resident_reads}, {"host_to_device", e.bytes_host_to_device},
      {"nvme_to_device", e.bytes_nvme_to_device}, {"cpu_reads", e.bytes_cpu_reads},
      {"nvme_to_cpu", e.bytes_nvme_to_cpu}};
  for (const auto& [name, v] : tiers)
    o += std::string("ds4_expert_bytes_total{tier=\"") + name + "\"} " + std::to_string(v) + "\n";
  o += "# HELP ds4_expert_store_info The expert store's tier (mmap, resident, host, nvme, plan).\n"
       "# TYPE ds4_expert_store_info gauge\nds4_expert_store_info{tier=\"" +
       (e.tier.empty() ? std::string("none") : e.tier) + "\"} 1\n";
  return o;
}

void handle_tokenize(State& st, const httplib::Request& http, httplib::Response& res) {
  if (!valid_utf8(http.body)) return send_error(res, make_error(400, "the request body is not valid UTF-8", "invalid_request_error", "invalid_utf8"));
  Json b;
  if (auto e = parse_body(http.body, b)) return send_error(res, *e);
  if (!b.is_object() || !b.contains("content") || !b["content"].is_string())
    return send_error(res, make_error(400, "'content': expected a string", "invalid_request_error"));
  for (auto it = b.begin(); it != b.end(); ++it)
    if (it.key() != "content" && it.key() != "add_special" && it.key() != "parse_special")
      return send_error(res, make_error(400, "unknown field '" + it.key() + "'", "invalid_request_error", "unknown_parameter"));
  bool add_special = false, parse_special = true;
  for (auto [k, v] : {std::pair{"add_special", &add_special}, std::pair{"parse_special", &parse_special}})
    if (b.contains(k)) {
      if (!b[k].is_boolean()) return send_error(res, make_error(400, std::string("'") + k + "': expected a boolean", "invalid_request_error"));
      *v = b[k].get<bool>();
    }
  send_json(res, 200, Json{{"tokens", st.engine->tokenize(b["content"].get<std::string>(), add_special, parse_special)}});
}

void handle_detokenize(State& st, const httplib::Request& http, httplib::Response& res) {
  Json b;
  if (auto e = parse_body(http.body, b)) return send_error(res, *e);
  if (!b.is_object() || !b.contains("tokens") || !b["tokens"].is_array())
    return send_error(res, make_error(400, "'tokens': expected an array of token ids", "invalid_request_error"));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < b["tokens"].size(); ++i) {
    const Json& t = b["tokens"][i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= st.engine->vocab())
      return send_error(res, make_error(400, "'tokens[" + std::to_string(i) + "]': expected a token id in [0, " +
                                                 std::to_string(st.engine->vocab()) + "), found " + t.dump().substr(0, 60),
                                        "invalid_request_error"));
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  send_json(res, 200, Json{{"content", sanitize_utf8(st.engine->detokenize(ids))}});
}

}  // namespace

Result<void> serve(std::shared_ptr<Model> model, const ServeOptions& opts) {
  if (opts.port < 0 || opts.port > 65535) return Error{"--port: expected 0 to 65535, found " + std::to_string(opts.port)};
  if (opts.max_messages < 1) return Error{"--max-messages: expected 1 or more"};
  if (opts.header_timeout_s < 1)
    return Error{"--header-timeout: expected 1 or more seconds, found " + std::to_string(opts.header_timeout_s)};
  if (opts.max_connections < 1)
    return Error{"--max-connections: expected 1 or more, found " + std::to_string(opts.max_connections)};
  auto st = std::make_unique<State>();
  st->opts = opts;
  // Each connection is a descriptor; the model, slots and logs need some of the limit too.
  if (struct rlimit rl {}; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const int64_t room = int64_t(rl.rlim_cur) - 64;
    if (int64_t(opts.max_connections) > room) {
      st->opts.max_connections = int(std::max<int64_t>(room, 1));
      std::fprintf(stderr, "serve: note: --max-connections %d lowered to %d to fit the open-file limit %lld (ulimit -n)\n",
                   opts.max_connections, st->opts.max_connections, (long long)rl.rlim_cur);
    }
  }
  st->alias = opts.model_alias.empty() ? "ds4" : opts.model_alias;
  auto eng = Engine::create(std::move(model), opts.ctx);
  if (!eng) return eng.error();
  st->engine = std::move(eng).value();
  if (opts.prefix_cache_mib > 0) st->engine->enable_prefix_cache(opts.prefix_cache_mib << 20, opts.prefix_cache_block);
  if (!opts.scripted_output.empty()) {
    st->engine->set_scripted_output(opts.scripted_output);
    std::fprintf(stderr, "serve: DS4_SERVE_SCRIPTED_OUTPUT is set: every reply is that text (diagnostics)\n");
  }

  // SIGINT/SIGTERM: a handler (any thread may receive the signal, including the model's worker
  // threads started before this point) writes the signal number to a pipe; a watcher thread reads
  // it and shuts down outside signal context.
  if (pipe(g_signal_pipe) != 0) return Error{"cannot create the shutdown pipe"};
  struct sigaction sa {}, old_int{}, old_term{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  signal(SIGPIPE, SIG_IGN);
  auto restore = [&] {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    close(g_signal_pipe[0]);
    close(g_signal_pipe[1]);
  };

  auto sched = Scheduler::create(*st->engine, opts.n_slots, opts.max_queue, opts.prefill_chunk);
  if (!sched) {
    restore();
    return sched.error();
  }
  st->sched = std::move(sched).value();

  // Connections are held by the gate's poll thread until a request head has arrived, so idle
  // and slow clients take no worker (engine/server/connection_gate.h). Workers: one per request
  // that can be admitted (slots + queue) and 4 for the other endpoints (/health, /metrics, ...).
  GatedServer svr;
  GateOptions gate;
  gate.header_timeout_s = opts.header_timeout_s;
  gate.timeout_s = opts.timeout_s;
  gate.max_connections = st->opts.max_connections;
  gate.workers = opts.n_slots + opts.max_queue + 4;
  svr.set_payload_max_length(opts.max_body_bytes);
  svr.set_read_timeout(opts.timeout_s, 0);
  svr.set_write_timeout(opts.timeout_s, 0);
  State& s = *st;
  s.gate = &svr;
  svr.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    // The body's size is checked from the headers, before httplib reads (or drains) any of it:
    // cpp-httplib 0.11 skips an oversized body byte by byte before answering 413. The connection
    // is closed after the reply, since the unread body is still in the socket.
    if (req.has_header("Content-Length")) {
      const std::string v = req.get_header_value("Content-Length");
      const bool digits = !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoull(v) > s.opts.max_body_bytes) {
        const ApiError e = digits ? make_error(413, "the request body (Content-Length " + v + ") is larger than " +
                                                        std::to_string(s.opts.max_body_bytes) + " bytes",
                                               "invalid_request_error", "request_too_large")
                                  : make_error(400, "the Content-Length header is not a byte count: '" +
                                                        v.substr(0, 40) + "'",
                                               "invalid_request_error", "bad_content_length");
        res.set_header("Connection", "close");
        send_error(res, e);
        if (const int fd = find_peer_socket(req.remote_addr, req.remote_port, req.local_port); fd >= 0) {
          const std::string body = dump(error_body(e));
          answer_and_shutdown(fd,
                              "HTTP/1.1 " + std::to_string(e.status) +
                                  (e.status == 413 ? " Payload Too Large" : " Bad Request") +
                                  "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                                  "\r\nConnection: close\r\n\r\n" + body,
                              size_t(1) << 20);
        }
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // `curl -d` sends JSON as application/x-www-form-urlencoded, and the distribution's compiled
    // cpp-httplib refuses such bodies above its CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH (8 KiB)
    // with a 413. Every endpoint reads its body as JSON whatever the type, so the type is relabelled
    // before the body is read; --max-body-bytes stays the one limit. (The Request object httplib
    // passes here is its own non-const one.)
    for (auto [it, end] = req.headers.equal_range("Content-Type"); it != end; ++it)
      if (it->second.rfind("application/x-www-form-urlencoded", 0) == 0)
        const_cast<std::string&>(it->second) = "application/octet-stream";
    if (s.opts.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + s.opts.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, make_error(401, "missing or wrong API key (expected the header 'Authorization: Bearer KEY')",
                               "invalid_request_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413)
      send_error(res, make_error(413, "the request body is larger than " + std::to_string(s.opts.max_body_bytes) + " bytes",
                                 "invalid_request_error", "request_too_large"));
    else if (res.status == 404)
      send_error(res, make_error(404, "no endpoint " + req.method + " " + req.path, "invalid_request_error", "not_found"));
    else
      send_error(res, make_error(res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error"));
  });
  svr.Post("/v1/chat/completions", [&s](const httplib::Request& q, httplib::Response& r) { handle_generation(s, q, r, true); });
  svr.Post("/v1/completions", [&s](const httplib::Request& q, httplib::Response& r) { handle_generation(s, q, r, false); });
  svr.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& r) {
    send_json(r, 200, Json{{"object", "list"},
                           {"data", Json::array({{{"id", s.alias}, {"object", "model"}, {"created", s.created},
                                                  {"owned_by", "ds4-offload"}, {"context_length", s.engine->n_ctx()}}})}});
  });
  svr.Get("/health", [](const httplib::Request&, httplib::Response& r) { send_json(r, 200, Json{{"status", "ok"}}); });
  svr.Get("/metrics", [&s](const httplib::Request&, httplib::Response& r) {
    r.set_content(metrics_text(s), "text/plain; version=0.0.4");
  });
  svr.Post("/tokenize", [&s](const httplib::Request& q, httplib::Response& r) { handle_tokenize(s, q, r); });
  svr.Post("/detokenize", [&s](const httplib::Request& q, httplib::Response& r) { handle_detokenize(s, q, r); });

  int port = opts.port;
  if (port == 0) {
    port = svr.bind_to_any_port(opts.host);
    if (port < 0) {
      restore();
      return Error{"cannot bind " + opts.host + " to any port"};
    }
  } else if (!svr.bind_to_port(opts.host, port)) {
    restore();
    return Error{"cannot bind " + opts.host + ":" + std::to_string(port) + " (in use, or not an address of this host)"};
  }

  std::atomic<bool> signalled{false};
  std::thread watcher([&] {
    unsigned char sig = 0;
    while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    if (sig == 0) return;  // woken by serve() itself
    signalled = true;
    std::fprintf(stderr, "serve: %s received, cancelling in-flight requests and shutting down\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    s.sched->stop();  // first: wakes every handler waiting on a job
    svr.stop_gated();
  });
  std::fprintf(stderr, "serve: model %s (%s), %d slot(s), context %lld tokens, queue %d\n", s.alias.c_str(),
               s.engine->describe().c_str(), opts.n_slots, (long long)s.engine->n_ctx(), opts.max_queue);
  std::fprintf(stderr, "serve: listening on http://%s:%d\n", opts.host.c_str(), port);
  std::fflush(stderr);
  const bool listened = svr.listen_gated(gate);
  if (!signalled) {
    const unsigned char zero = 0;
    (void)!write(g_signal_pipe[1], &zero, 1);
  }
  watcher.join();
  s.sched->stop();
  restore();
  if (!listened && !signalled) return Error{"the HTTP server stopped unexpectedly"};
  std::fprintf(stderr, "serve: stopped\n");
  return {};
}

}  // namespace ds4::server
