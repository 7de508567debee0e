#pragma once
// HTTP/1.1 transport (Boost.Beast's parser over Boost.Asio, event-driven): accepting,
// reading requests under limits and deadlines, writing responses. No routes; http_server.cpp
// gives it an HttpHandler.
//
// Guarantees (tests/integration/server/hostile.test.mjs):
//  - Reading is asynchronous on a few I/O threads, so idle, slow or stuck connections hold no
//    thread; each has a deadline for its request headers and one for its body (408 and
//    close when missed) and the number of open connections is bounded (503 beyond).
//  - Headers larger than max_header_bytes → 431; a body larger than max_body_bytes → 413,
//    for Content-Length (at once, before "100 Continue" is sent) and chunked bodies alike
//    (checked while reading); malformed, negative, overflowing or conflicting Content-Length
//    and other malformed requests → 400; all at once, then the connection is closed.
//  - Pipelined requests are answered in order, one after the other.
//  - Quick requests are answered on the I/O threads; blocking ones (generation) each get a
//    thread of their own, at most max_blocking at once (503 with Retry-After beyond).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ds4::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string path;  // target without the query string
  HeaderList headers;
  std::string body;
  // Case-insensitive lookup; empty when absent.
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HeaderList headers;
};

// Given to blocking handlers; used from the handler's thread only.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // A whole response. False when the client is gone or too slow to take it.
  virtual bool send(const HttpResponse& r) = 0;
  // A streamed response (chunked transfer encoding): begin once, write any number of chunks,
  // end once. Each returns false when the client is gone (stop then).
  virtual bool begin_stream(int status, const std::string& content_type, const HeaderList& headers) = 0;
  virtual bool write(std::string_view data) = 0;
  virtual bool end_stream() = 0;
  // True when the peer closed or reset the connection, or the server is stopping.
  virtual bool peer_closed() = 0;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // On an I/O thread; must not block. nullopt: the request needs blocking() instead.
  virtual std::optional<HttpResponse> quick(const HttpRequest& req) = 0;
  // On a thread of its own; must answer through `sink` (any status).
  virtual void blocking(const HttpRequest& req, ResponseSink& sink) = 0;
  // A response the transport makes itself (400, 408, 413, 431, 503), in the API's shape.
  virtual HttpResponse transport_error(const std::string& path, int status, const std::string& message) = 0;
  // After each response (metrics).
  virtual void responded(const std::string& path, int status) = 0;
};

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  size_t max_body_bytes = 32u << 20;
  size_t max_header_bytes = 64u << 10;
  int64_t header_timeout_ms = 10000;  // from the first byte of a request to its last header
  int64_t body_timeout_ms = 60000;    // from the end of the headers to the end of the body
  int64_t write_timeout_ms = 30000;   // a client that takes no data for this long is dropped
  size_t max_connections = 1024;
  size_t max_blocking = 32;  // blocking handlers at once
  int io_threads = 2;
  HeaderList default_headers;  // on every response (CORS)
};

class HttpTransport {
 public:
  HttpTransport(HttpHandler& handler, TransportOptions opts);
  ~HttpTransport();
  int bind();      // returns the port; throws ds4::Error when it cannot bind
  void listen();   // serves until stop(); returns after every blocking handler has ended
  void stop();     // from any thread (a signal thread)
  const TransportOptions& options() const;

  struct Impl;  // opaque (http_transport.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::server
