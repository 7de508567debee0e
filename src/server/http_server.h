#pragma once
// HTTP front end: routes, authentication, CORS, error shapes, and the bridge between a
// request's thread and its inference job (SSE streaming, keepalives, disconnect → cancel).
// The connection handling, limits and deadlines are http_transport.h's.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chat/conversation.h"
#include "server/inference_model.h"
#include "server/metrics.h"
#include "server/worker.h"

namespace ds4::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see bound_port())
  bool cors = false;
  bool webui = true;  // GET / serves the chat page (src/server/webui); --no-webui turns it off
  std::string api_key;  // empty: no authentication
  size_t max_body_bytes = 32u << 20;     // 413 beyond, for every transfer encoding
  size_t max_header_bytes = 64u << 10;   // 431 beyond
  int64_t header_timeout_ms = 10000;     // whole request head (and keep-alive idle time)
  int64_t body_timeout_ms = 60000;       // whole body
  int64_t write_timeout_ms = 30000;      // a client that takes no data this long is dropped
  size_t max_connections = 1024;         // open connections; 503 beyond
  int64_t keepalive_ms = 5000;  // SSE keepalive interval while nothing else is sent
  int http_threads = 32;  // generation requests handled at once (503 with Retry-After beyond)
  std::vector<std::string> model_ids{"deepseek-v4-flash", "deepseek-chat", "deepseek-reasoner"};
  int64_t default_max_tokens = 4096;
  chat::ChatFormat chat_format = chat::ChatFormat::DeepSeekV4;  // from the model's architecture
  chat::ChatmlTemplate chatml_template = chat::ChatmlTemplate::Qwen36;  // from its chat template
  // Directional steering the engine runs with (EngineInfo::steering_*), reported in the model
  // info; steering_file empty: none.
  std::string steering_file, steering_id;
  int64_t steering_first_layer = 0, steering_layers = 0;
  float steering_attn = 0, steering_ffn = 0;
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
