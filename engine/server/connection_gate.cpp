// engine/server/connection_gate.cpp — see connection_gate.h. POSIX sockets, poll(2), a pipe to
// wake the poll thread; httplib::Server::process_request does the HTTP parsing and routing.
#include "engine/server/connection_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace ds4::server {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waits until `fd` has `events` or `timeout_ms` passed; true when ready (POLLHUP/POLLERR count as
// ready: the following recv/send reports the condition).
bool wait_fd(int fd, short events, int64_t timeout_ms) {
  pollfd p{fd, events, 0};
  const int64_t end = now_ms() + std::max<int64_t>(timeout_ms, 0);
  while (true) {
    const int64_t left = std::max<int64_t>(end - now_ms(), 0);
    const int r = ::poll(&p, 1, int(std::min<int64_t>(left, 1 << 30)));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Numeric address and port of a socket address ("" and -1 for non-IP families).
void addr_port(const sockaddr_storage& ss, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  addr.clear();
  port = -1;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) addr = buf;
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) addr = buf;
    port = ntohs(a->sin6_port);
  }
}

// Sends `text` without blocking for long (a refusal or timeout answer): best effort.
void send_best_effort(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t w = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    sent += size_t(w);
  }
}

// A complete HTTP response with a JSON error body (OpenAI's error shape) and Connection: close.
std::string error_response(int status, const char* reason, const std::string& message, const char* code) {
  std::string esc;
  for (char ch : message) {
    if (ch == '"' || ch == '\\') esc += '\\';
    esc += ch;
  }
  const std::string body = "{\"error\":{\"message\":\"" + esc + "\",\"type\":\"" +
                           (status >= 500 ? "server_error" : "invalid_request_error") + "\",\"param\":null,\"code\":\"" +
                           code + "\"}}";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + (status == 503 ? "Retry-After: 1\r\n" : "") + "Connection: close\r\n\r\n" +
         body;
}

// The stream httplib's request processing reads and writes: first the bytes the poll thread
// buffered (the whole head, maybe more), then the socket. A body read waits at most
// `pause_ms` for each piece and ends at `body_end_ms`, or within kStopPollMs once `*stop` is set
// (a shutdown does not wait for a slow client's body); a write waits at most `write_ms` for room.
class GateStream final : public httplib::Stream {
 public:
  GateStream(int fd, std::string buf, int64_t pause_ms, int64_t body_end_ms, int64_t write_ms,
             const std::atomic<bool>* stop)
      : fd_(fd), buf_(std::move(buf)), pause_ms_(pause_ms), body_end_ms_(body_end_ms), write_ms_(write_ms), stop_(stop) {}

  bool is_readable() const override { return pos_ < buf_.size() || wait_readable(); }
  bool is_writable() const override {
    if (!wait_fd(fd_, POLLOUT, write_ms_)) return false;
    pollfd p{fd_, POLLOUT, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < buf_.size()) {
      const size_t n = std::min(size, buf_.size() - pos_);
      std::memcpy(ptr, buf_.data() + pos_, n);
      pos_ += n;
      return ssize_t(n);
    }
    if (!wait_readable()) return -1;
    while (true) {
      const ssize_t r = ::recv(fd_, ptr, size, 0);
      if (r < 0 && errno == EINTR) continue;
      return r;
    }
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!wait_fd(fd_, POLLOUT, write_ms_)) return -1;
    while (true) {
      const ssize_t w = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      return w;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) addr_port(ss, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) addr_port(ss, ip, port);
  }
  socket_t socket() const override { return fd_; }

  /// The buffered bytes httplib has not read (the start of a pipelined request).
  std::string leftover() const { return buf_.substr(pos_); }

 private:
  static constexpr int64_t kStopPollMs = 100;  ///< how often a waiting read looks at *stop_
  int64_t read_wait_ms() const { return std::min(pause_ms_, body_end_ms_ - now_ms()); }
  /// Waits up to read_wait_ms() for input, in slices of kStopPollMs, giving up once *stop_ is set.
  bool wait_readable() const {
    const int64_t end = now_ms() + read_wait_ms();
    while (true) {
      const int64_t left = std::max<int64_t>(end - now_ms(), 0);
      if (wait_fd(fd_, POLLIN, std::min(left, kStopPollMs))) return true;
      if (left <= kStopPollMs || (stop_ != nullptr && stop_->load())) return false;
    }
  }
  int fd_;
  std::string buf_;
  size_t pos_ = 0;
  int64_t pause_ms_, body_end_ms_, write_ms_;
  const std::atomic<bool>* stop_;
};

}  // namespace

bool head_complete(const std::string& buf) { return buf.find("\r\n\r\n") != std::string::npos; }

GatedServer::~GatedServer() {
  stop_gated();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  for (int& fd : wake_)
    if (fd >= 0) ::close(fd), fd = -1;
}

void GatedServer::stop_gated() {
  if (stopping_.exchange(true)) return;
  // httplib's streamed responses stop when its listening socket reads as invalid.
  svr_sock_ = INVALID_SOCKET;
  cv_.notify_all();
  if (wake_[1] >= 0) {
    const char c = 's';
    (void)!::write(wake_[1], &c, 1);
  }
}

GateStats GatedServer::stats() const {
  GateStats s;
  s.open = open_.load();
  s.waiting = waiting_.load();
  s.accepted = accepted_.load();
  s.refused = refused_.load();
  s.head_timeouts = head_timeouts_.load();
  return s;
}

void GatedServer::close_conn(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  open_--;
}

void GatedServer::dispatch(Conn c) {
  {
    std::lock_guard lk(mu_);
    ready_.push_back(std::move(c));
  }
  cv_.notify_one();
}

void GatedServer::hand_back(Conn c) {
  {
    std::lock_guard lk(mu_);
    returned_.push_back(std::move(c));
  }
  const char ch = 'r';
  (void)!::write(wake_[1], &ch, 1);
}

bool GatedServer::listen_gated(const GateOptions& opts) {
  opts_ = opts;
  listen_fd_ = svr_sock_;
  if (listen_fd_ == INVALID_SOCKET) return false;
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  // The Keep-Alive header httplib writes announces the idle time the poll thread allows.
  set_keep_alive_timeout(opts_.header_timeout_s);
  if (stopping_) return true;
  for (int i = 0; i < std::max(1, opts_.workers); ++i) workers_.emplace_back([this] { worker_loop(); });
  poll_loop();
  // Stopped: the workers finish what they run, drop what waits, and end.
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  {
    std::lock_guard lk(mu_);
    for (auto& c : ready_) close_conn(c.fd);
    for (auto& c : returned_) close_conn(c.fd);
    ready_.clear();
    returned_.clear();
  }
  return !failed_;
}

void GatedServer::poll_loop() {
  std::vector<Conn> held;  // connections waiting for (the rest of) a request head
  std::vector<pollfd> pfds;
  const int64_t head_ms = int64_t(opts_.header_timeout_s) * 1000;
  while (!stopping_) {
    pfds.clear();
    pfds.push_back({wake_[0], POLLIN, 0});
    pfds.push_back({listen_fd_, POLLIN, 0});
    int64_t next = now_ms() + 1000;
    for (const Conn& c : held) {
      pfds.push_back({c.fd, POLLIN, 0});
      next = std::min(next, c.deadline_ms);
    }
    const int r = ::poll(pfds.data(), pfds.size(), int(std::max<int64_t>(next - now_ms(), 0)));
    if (r < 0 && errno != EINTR) {
      failed_ = true;
      break;
    }
    if (stopping_) break;
    const int64_t now = now_ms();
    std::vector<Conn> keep;
    keep.reserve(held.size());
    // Held connections: read what arrived; complete heads go to the workers.
    for (size_t i = 0; i < held.size(); ++i) {
      Conn& c = held[i];
      const short ev = r > 0 ? pfds[i + 2].revents : 0;
      bool closed = false;
      if (ev != 0) {
        char buf[16384];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          c.buf.append(buf, size_t(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          close_conn(c.fd);
          waiting_--;
          closed = true;
        }
      }
      if (closed) continue;
      if (head_complete(c.buf)) {
        waiting_--;
        dispatch(std::move(c));
      } else if (c.buf.size() > opts_.max_head_bytes) {
        send_best_effort(c.fd, error_response(431, "Request Header Fields Too Large",
                                              "the request head is larger than " + std::to_string(opts_.max_head_bytes) +
                                                  " bytes",
                                              "request_header_too_large"));
        close_conn(c.fd);
        waiting_--;
      } else if (now >= c.deadline_ms) {
        // A client that sent part of a head is told why; an idle keep-alive one is just closed.
        if (!c.buf.empty()) {
          send_best_effort(c.fd, error_response(408, "Request Timeout",
                                                "the request head did not arrive within " +
                                                    std::to_string(opts_.header_timeout_s) + " s (--header-timeout)",
                                                "request_timeout"));
          head_timeouts_++;
        }
        close_conn(c.fd);
        waiting_--;
      } else {
        keep.push_back(std::move(c));
      }
    }
    held.swap(keep);
    // Keep-alive connections back from the workers wait for their next head.
    if (r > 0 && pfds[0].revents != 0) {
      char drain[256];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
      std::vector<Conn> back;
      {
        std::lock_guard lk(mu_);
        back.swap(returned_);
      }
      for (Conn& c : back) {
        c.deadline_ms = now + head_ms;
        waiting_++;
        held.push_back(std::move(c));
      }
    }
    // New connections, refused beyond the cap.
    if (r > 0 && pfds[1].revents != 0) {
      while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          if (errno == EMFILE || errno == ENFILE) {  // out of descriptors: retry after a pause
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            break;
          }
          failed_ = true;
          break;
        }
        accepted_++;
        if (open_.load() >= opts_.max_connections) {
          refused_++;
          send_best_effort(fd, error_response(503, "Service Unavailable",
                                              "the server has " + std::to_string(open_.load()) +
                                                  " connections open, the most --max-connections allows; retry later",
                                              "too_many_connections"));
          ::shutdown(fd, SHUT_WR);
          char drain[4096];
          while (::recv(fd, drain, sizeof drain, MSG_DONTWAIT) > 0) {
          }
          ::close(fd);
          continue;
        }
        open_++;
        waiting_++;
        Conn c;
        c.fd = fd;
        c.deadline_ms = now_ms() + head_ms;
        held.push_back(std::move(c));
      }
      if (failed_) break;
    }
  }
  for (Conn& c : held) {
    close_conn(c.fd);
    waiting_--;
  }
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  listen_fd_ = -1;
  stopping_ = true;
  svr_sock_ = INVALID_SOCKET;
}

void GatedServer::worker_loop() {
  while (true) {
    Conn c;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;  // what still waits is closed by listen_gated
      c = std::move(ready_.front());
      ready_.pop_front();
    }
    serve_one(std::move(c));
  }
}

void GatedServer::serve_one(Conn c) {
  while (true) {
    const int64_t now = now_ms();
    GateStream strm(c.fd, std::move(c.buf), int64_t(opts_.header_timeout_s) * 1000, now + int64_t(opts_.timeout_s) * 1000,
                    int64_t(opts_.timeout_s) * 1000, &stopping_);
    const bool close_connection = c.served + 1 >= keep_alive_max_count_;
    bool connection_closed = false;
    const bool ok = process_request(strm, close_connection, connection_closed, nullptr);
    ++c.served;
    if (!ok || connection_closed || close_connection || stopping_) {
      close_conn(c.fd);
      return;
    }
    c.buf = strm.leftover();
    // A pipelined request already complete is served at once; otherwise the poll thread waits.
    if (!head_complete(c.buf)) return hand_back(std::move(c));
  }
}

}  // namespace ds4::server
