// engine/server/peer_socket.h — finding and watching the TCP connection of an HTTP request.
// cpp-httplib 0.11 (Debian's) gives a handler no handle on its connection and no "client gone"
// signal while a non-streamed response is being computed, so the server finds the connection's
// socket from the request's address pair and polls it between generated tokens.
#pragma once

#include <cstddef>
#include <string>

namespace ds4::server {

/// The descriptor of this process's connected TCP socket whose local port is `local_port` and whose
/// peer is `remote_addr`:`remote_port` (numeric IPv4/IPv6 text, as httplib's Request has it), found
/// by scanning /proc/self/fd; -1 when none matches. The descriptor stays owned by httplib.
int find_peer_socket(const std::string& remote_addr, int remote_port, int local_port);

/// True when the peer of connected socket `fd` has closed or reset the connection (an orderly
/// shutdown reads as end of file; bytes already sent by the peer, e.g. a pipelined request, do not
/// count as gone). Never blocks; never consumes data.
bool peer_gone(int fd);

/// Answers on connected socket `fd` with the complete HTTP response `response` (blocking send),
/// discards what the peer has already sent (at most `max_discard` bytes, without waiting) and shuts
/// the socket down both ways: the peer reads the answer and end of file; httplib, whose own write
/// then finds the connection closed, closes it instead of waiting for another request behind the
/// unread body. False when the send failed.
bool answer_and_shutdown(int fd, const std::string& response, size_t max_discard);

}  // namespace ds4::server
