// engine/server/peer_socket.cpp — see peer_socket.h. POSIX getpeername/getsockname, poll(2) with
// POLLRDHUP (Linux), recv(2) with MSG_PEEK.
#include "engine/server/peer_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace ds4::server {
namespace {

// Numeric address and port of a socket address; false for non-IP families.
bool addr_port(const sockaddr_storage& ss, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

}  // namespace

int find_peer_socket(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0 || local_port <= 0) return -1;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
    struct stat st {};
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    std::string pa, sa;
    int pp = 0, sp = 0;
    if (!addr_port(peer, pa, pp) || !addr_port(self, sa, sp)) continue;
    if (pp == remote_port && sp == local_port && pa == remote_addr) {
      found = int(fd);
      break;
    }
  }
  closedir(d);
  return found;
}

bool peer_gone(int fd) {
  pollfd p{};
  p.fd = fd;
  p.events = POLLIN | POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

bool answer_and_shutdown(int fd, const std::string& response, size_t max_discard) {
  size_t sent = 0;
  while (sent < response.size()) {
    const ssize_t w = send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    sent += size_t(w);
  }
  char buf[16384];
  size_t n = 0;
  while (n < max_discard) {
    const ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r <= 0) break;
    n += size_t(r);
  }
  shutdown(fd, SHUT_RDWR);
  return sent == response.size();
}

}  // namespace ds4::server
