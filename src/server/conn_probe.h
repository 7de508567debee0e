#pragma once
// Detects that the client of a request has gone away, so its generation can stop at once even
// when nothing is being written (non-streamed requests, long prefills).
//
// cpp-httplib 0.11 does not hand the socket to handlers, so the probe finds it by the
// connection's address pair among this process's descriptors (once per request), then polls
// it for a peer shutdown. The probe must only be used while the request's handler or content
// provider runs: afterwards the descriptor may be closed and reused.
#include <string>

namespace ds4::server {

class ConnProbe {
 public:
  // local/remote: the request's addresses and ports as httplib reports them.
  ConnProbe(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);
  // True when the peer closed or reset the connection. False when the socket was not found.
  bool peer_closed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace ds4::server
