#pragma once
// HTTP front end (cpp-httplib): routes, authentication, CORS, body limits, error shapes, and
// the bridge between a request's thread and its inference job (SSE streaming, keepalives,
// disconnect → cancel).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/inference_model.h"
#include "server/metrics.h"
#include "server/worker.h"

namespace httplib {
class Server;
}

namespace ds4::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see bound_port())
  bool cors = false;
  std::string api_key;  // empty: no authentication
  size_t max_body_bytes = 32u << 20;
  int64_t keepalive_ms = 5000;  // SSE keepalive interval while nothing else is sent
  int http_threads = 32;
  std::vector<std::string> model_ids{"deepseek-v4-flash", "deepseek-chat", "deepseek-reasoner"};
  int64_t default_max_tokens = 4096;
};

class HttpServer {
 public:
  HttpServer(InferenceModel& model, Worker& worker, Metrics& metrics, SharedToolCache& tools, ServerOptions opts);
  ~HttpServer();
  // Binds the listening socket; returns the port. Throws ds4::Error when it cannot bind.
  int bind();
  void listen();  // blocks until stop()
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::server
