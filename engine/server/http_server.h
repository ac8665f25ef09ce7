// engine/server/http_server.h — `ds4-offload serve`: an OpenAI-compatible HTTP server (cpp-httplib)
// over the slot scheduler. Endpoints: POST /v1/chat/completions, POST /v1/completions (both plain
// JSON or Server-Sent Events), GET /v1/models, GET /health, GET /metrics (Prometheus text format
// 0.0.4), POST /tokenize, POST /detokenize (llama.cpp's server shapes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ds4/result.h"

namespace ds4 {
class Model;
}

namespace ds4::server {

/// Server settings (defaults as `serve --help` prints them).
struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port (the chosen one is printed)
  int n_slots = 1;
  int max_queue = 16;          // requests waiting beyond the slots; more get 503
  int prefill_chunk = 256;     // prompt tokens fed per scheduler step
  int64_t ctx = 0;             // served context in tokens (0 = the model's)
  uint64_t prefix_cache_mib = 256;  // prefix-cache budget in MiB (0 = off)
  int prefix_cache_block = 64;      // prefix-cache snapshots every this many tokens
  std::string api_key;         // "" = none
  std::string model_alias;     // name in /v1/models and responses ("" = the file name)
  size_t max_body_bytes = 8u << 20;
  size_t max_messages = 1024;
  int timeout_s = 60;          // write timeout per send, and the most a request body may take (slow clients)
  int header_timeout_s = 10;   // a request head must arrive within this, from connect or the previous reply
  int max_connections = 256;   // open connections; more are answered 503 and closed
  /// Diagnostics: every reply is this text (Engine::set_scripted_output) when non-empty.
  std::string scripted_output;
};

/// Loads nothing: serves `model` until SIGINT or SIGTERM, then cancels in-flight requests and
/// returns. Prints "serve: listening on http://HOST:PORT" to stderr once accepting. Idle and slow
/// connections wait in one poll thread, not in a worker (engine/server/connection_gate.h).
/// Errors: bad options, slot creation, a port that cannot be bound. --max-connections above the
/// open-file limit is lowered to fit it, with a note.
Result<void> serve(std::shared_ptr<Model> model, const ServeOptions& opts);

}  // namespace ds4::server
