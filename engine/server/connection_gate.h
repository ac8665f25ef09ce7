// engine/server/connection_gate.h — the connection layer of `ds4-offload serve` in front of
// cpp-httplib's request handling, so that idle or slow clients cannot starve the server.
//
// cpp-httplib 0.11 (Debian's) gives every accepted connection a pool thread from the start:
// a client that connects and sends nothing holds one for the keep-alive timeout, one that sends
// half a request line for the read timeout per byte, so a few dozen idle sockets stalled /health
// for --timeout seconds. Here one poll(2) thread holds every connection until its request head
// (request line and headers, up to the blank line) has arrived, with a total deadline; only then
// does a bounded pool of workers run httplib's own request processing
// (httplib::Server::process_request, protected, so this class derives from httplib::Server) on a
// stream that replays the buffered head. Between keep-alive requests the connection goes back to
// the poll thread. Connections beyond a cap are answered 503 at once and closed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

namespace ds4::server {

/// Limits of the connection layer (serve's --header-timeout, --max-connections, --timeout and the
/// worker count; ServeOptions holds the user-facing values).
struct GateOptions {
  int header_timeout_s = 10;    // a request head must arrive within this (from connect or the previous reply)
  int timeout_s = 60;           // write timeout per send, and the most time a request body may take
  int max_connections = 256;    // open connections (idle, reading or being served); more are refused (503)
  int workers = 8;              // threads running requests (bounded; idle connections use none)
  size_t max_head_bytes = 64 << 10;  // a larger request head is refused (431)
};

/// Counters of the connection layer, for /metrics.
struct GateStats {
  int64_t open = 0;              // connections open now
  int64_t waiting = 0;           // of those, held by the poll thread (idle or sending their head)
  uint64_t accepted = 0;         // connections accepted since start
  uint64_t refused = 0;          // connections refused because --max-connections were open (503)
  uint64_t head_timeouts = 0;    // connections closed because their head did not arrive in time
};

/// An httplib::Server whose connections are accepted and held by the gate (see the file comment).
/// Routes, handlers and limits are set on it as on any httplib::Server; bind with bind_to_port or
/// bind_to_any_port, then call listen_gated instead of listen_after_bind.
class GatedServer : public httplib::Server {
 public:
  GatedServer() = default;
  ~GatedServer() override;

  /// Serves the bound socket until stop_gated(): accepts, holds, dispatches. Starts
  /// `opts.workers` worker threads and uses the calling thread as the poll thread. Returns false
  /// when accepting failed for a reason other than stop_gated (the socket is then closed), or
  /// when nothing was bound.
  bool listen_gated(const GateOptions& opts);

  /// Stops listen_gated from any thread (not from a signal handler): the listening socket is
  /// closed, connections waiting for a head are closed, streamed responses see the server shutting
  /// down; requests being processed finish, then their connections close. Idempotent.
  void stop_gated();

  /// Counters (thread-safe).
  GateStats stats() const;

  /// A connection and the bytes read from it that httplib has not consumed yet.
  struct Conn {
    int fd = -1;
    std::string buf;                    // received, not yet processed
    int64_t deadline_ms = 0;            // steady-clock ms by which the head must be complete
    size_t served = 0;                  // requests answered on this connection
  };

 private:
  void poll_loop();
  void worker_loop();
  void serve_one(Conn c);
  void close_conn(int fd);
  void hand_back(Conn c);  // a worker returns a keep-alive connection to the poll thread
  void dispatch(Conn c);   // a complete head: to the workers

  GateOptions opts_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};           // pipe: workers and stop_gated wake the poll thread
  std::atomic<bool> stopping_{false};
  std::atomic<bool> failed_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;       // workers wait for ready_
  std::deque<Conn> ready_;           // complete heads waiting for a worker
  std::vector<Conn> returned_;       // keep-alive connections handed back by workers
  std::vector<std::thread> workers_;

  std::atomic<int64_t> open_{0}, waiting_{0};
  std::atomic<uint64_t> accepted_{0}, refused_{0}, head_timeouts_{0};
};

/// Whether `buf` holds a complete HTTP/1.x request head: a CRLF CRLF (httplib reads header lines
/// ending in CRLF only, so a head of bare LFs stays with the poll thread until its timeout).
bool head_complete(const std::string& buf);

}  // namespace ds4::server
