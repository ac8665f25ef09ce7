// engine/cli/cmd_serve.cpp — `ds4-offload serve -m MODEL [--host H] [--port P] [-np N] [-c N]
// [--api-key KEY] [--model-alias NAME] ...`: loads the model once and serves the OpenAI-compatible
// API of engine/server/http_server.h until SIGINT/SIGTERM.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/server/http_server.h"

namespace ds4::cli {
namespace {

struct ServeArgs {
  ModelArgs model;
  server::ServeOptions opts;
};
ServeArgs args;
CLI::Option* s_api_key = nullptr;
// The byte, message and MiB limits are read as signed 64-bit values and range-checked before they
// go into the unsigned ServeOptions fields: read straight into an unsigned field, "-1" wrapped to
// 2^64 - 1 and a value past 2^64 saturated, both accepted (a fresh tester's finding).
int64_t s_prefix_cache_mib = int64_t(server::ServeOptions{}.prefix_cache_mib);
int64_t s_max_body_bytes = int64_t(server::ServeOptions{}.max_body_bytes);
int64_t s_max_messages = int64_t(server::ServeOptions{}.max_messages);

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API (chat, completions, models, metrics)");
  auto& o = args.opts;
  add_model_options(s, args.model,
                    ModelOptionSet{.model_required = true, .experts_tier = true, .plan = true, .ctx_size = true,
                                   .ctx_help = "Context per slot in tokens (0 = the model's context_length)"});
  s->add_option("--host", o.host, "Address to listen on (loopback by default)")->capture_default_str();
  s->add_option("--port", o.port, "Port (0 = any free port; the chosen one is printed)")->capture_default_str();
  s->add_option("--np,--parallel", o.n_slots, "Sequence slots served together (-np N is accepted too)")
      ->capture_default_str();
  s->add_option("--queue", o.max_queue, "Requests that may wait for a slot; more are refused with 503")
      ->capture_default_str();
  s->add_option("--prefill-chunk", o.prefill_chunk, "Prompt tokens prefilled per scheduler step")->capture_default_str();
  s->add_option("--prefix-cache-mib", s_prefix_cache_mib,
                "Host memory for prefix-cache state snapshots in MiB (0 = no prefix cache)")
      ->capture_default_str();
  s->add_option("--prefix-cache-block", o.prefix_cache_block,
                "Prefix-cache block in tokens: prefill snapshots at 1, 2, 4, ... blocks and the prompt's last block multiple")
      ->capture_default_str();
  s_api_key = s->add_option("--api-key", o.api_key, "Require 'Authorization: Bearer KEY' (all endpoints but /health)");
  s->add_option("--model-alias", o.model_alias, "Model name in /v1/models and responses (default: the file name)");
  s->add_option("--max-body-bytes", s_max_body_bytes, "Largest accepted request body (1024 to 4294967296)")
      ->capture_default_str();
  s->add_option("--max-messages", s_max_messages, "Most messages accepted in one chat request (1 to 1048576)")
      ->capture_default_str();
  s->add_option("--timeout", o.timeout_s,
                "Seconds a reply may wait for a slow client to take its bytes, and the most a request body may take")
      ->capture_default_str();
  s->add_option("--header-timeout", o.header_timeout_s,
                "Seconds a client has to send a request's headers (from connecting, or from its previous reply on a "
                "kept-alive connection), and the longest pause inside a body; slower clients are closed (408). "
                "Waiting clients hold no worker thread")
      ->capture_default_str();
  s->add_option("--max-connections", o.max_connections,
                "Open TCP connections served at once (idle ones included); more are answered 503 and closed")
      ->capture_default_str();
  return s;
}

int run() {
  const char* cmd = "serve";
  auto& o = args.opts;
  if (o.n_slots < 1 || o.n_slots > 256) return fail(cmd, "-np/--np: expected 1 to 256 slots, found " + std::to_string(o.n_slots));
  if (o.max_queue < 0 || o.max_queue > 4096) return fail(cmd, "--queue: expected 0 to 4096, found " + std::to_string(o.max_queue));
  if (o.prefill_chunk < 1) return fail(cmd, "--prefill-chunk: expected 1 or more, found " + std::to_string(o.prefill_chunk));
  if (s_prefix_cache_mib < 0 || s_prefix_cache_mib > (int64_t(1) << 20))
    return fail(cmd, "--prefix-cache-mib: expected 0 to 1048576, found " + std::to_string(s_prefix_cache_mib));
  o.prefix_cache_mib = uint64_t(s_prefix_cache_mib);
  if (o.prefix_cache_block < 1) return fail(cmd, "--prefix-cache-block: expected 1 or more tokens, found " + std::to_string(o.prefix_cache_block));
  if (o.port < 0 || o.port > 65535) return fail(cmd, "--port: expected 0 to 65535, found " + std::to_string(o.port));
  o.ctx = args.model.ctx_size;
  if (o.ctx < 0)
    return fail(cmd, "-c/--ctx-size: expected 0 (the model's) or a positive count, found " + std::to_string(o.ctx));
  if (o.timeout_s < 1) return fail(cmd, "--timeout: expected 1 or more seconds, found " + std::to_string(o.timeout_s));
  if (o.header_timeout_s < 1)
    return fail(cmd, "--header-timeout: expected 1 or more seconds, found " + std::to_string(o.header_timeout_s));
  if (o.max_connections < 1 || o.max_connections > 65536)
    return fail(cmd, "--max-connections: expected 1 to 65536, found " + std::to_string(o.max_connections));
  // `--api-key "$UNSET"` must not switch authentication off silently.
  if (s_api_key != nullptr && s_api_key->count() > 0 && o.api_key.empty())
    return fail(cmd, "--api-key: expected a non-empty key, found an empty string");
  if (s_max_messages < 1 || s_max_messages > (int64_t(1) << 20))
    return fail(cmd, "--max-messages: expected 1 to 1048576, found " + std::to_string(s_max_messages));
  if (s_max_body_bytes < 1024 || s_max_body_bytes > (int64_t(1) << 32))
    return fail(cmd, "--max-body-bytes: expected 1024 to 4294967296, found " + std::to_string(s_max_body_bytes));
  o.max_messages = size_t(s_max_messages);
  o.max_body_bytes = size_t(s_max_body_bytes);
  if (const char* sc = std::getenv("DS4_SERVE_SCRIPTED_OUTPUT")) o.scripted_output = sc;
  if (o.model_alias.empty()) o.model_alias = std::filesystem::path(args.model.model).stem().string();
  // Checked from the header before the load: a tokenizer (every endpoint takes text) and -c.
  ModelNeeds need;
  need.tokenizer = true;
  auto model = load_model(args.model, cmd, need);
  if (!model) return fail(cmd, model.error().message);
  if (auto r = server::serve(model.value(), o); !r) return fail(cmd, r.error().message);
  return 0;
}

const CommandRegistrar reg{{"serve", setup, run}};

}  // namespace
}  // namespace ds4::cli
