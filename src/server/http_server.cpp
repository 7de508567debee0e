#include "server/http_server.h"

#include <chrono>
#include <cstdio>
#include <ctime>

#include "core/error.h"
#include "server/api_error.h"
#include "server/http_transport.h"
#include "server/prepare.h"
#include "server/webui/webui.h"
#include "server/writers.h"

namespace ds4::server {

using nlohmann::json;

namespace {

std::string endpoint_label(const std::string& path) {
  static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                                "/v1/models", "/health", "/metrics"};
  for (const char* k : known) {
    if (path == k) return k;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (path == "/" || path == "/index.html" || path.rfind("/webui/", 0) == 0) return "webui";
  return "other";
}

ApiKind api_for_path(const std::string& path) {
  if (path.rfind("/v1/messages", 0) == 0) return ApiKind::Messages;
  if (path.rfind("/v1/responses", 0) == 0) return ApiKind::Responses;
  if (path.rfind("/v1/completions", 0) == 0) return ApiKind::Completions;
  return ApiKind::Chat;
}

std::optional<ApiKind> generation_route(const std::string& path) {
  if (path == "/v1/chat/completions") return ApiKind::Chat;
  if (path == "/v1/completions") return ApiKind::Completions;
  if (path == "/v1/responses") return ApiKind::Responses;
  if (path == "/v1/messages") return ApiKind::Messages;
  return std::nullopt;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse json_response(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump(body);
  return r;
}

HttpResponse error_response(ApiKind api, const ApiError& e) {
  HttpResponse r = json_response(e.status(), error_body(api, e));
  if (e.status() == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

TransportOptions transport_options(const ServerOptions& o) {
  TransportOptions t;
  t.host = o.host;
  t.port = o.port;
  t.max_body_bytes = o.max_body_bytes;
  t.max_header_bytes = o.max_header_bytes;
  t.header_timeout_ms = o.header_timeout_ms;
  t.body_timeout_ms = o.body_timeout_ms;
  t.write_timeout_ms = o.write_timeout_ms;
  t.max_connections = o.max_connections;
  t.max_blocking = static_cast<size_t>(std::max(1, o.http_threads));
  if (o.cors) {
    t.default_headers = {{"Access-Control-Allow-Origin", "*"},
                         {"Access-Control-Allow-Headers",
                          "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, OpenAI-Beta"},
                         {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"}};
  }
  return t;
}

}  // namespace

struct HttpServer::Impl final : HttpHandler {
  InferenceModel& model;
  Worker& worker;
  Metrics& metrics;
  SharedToolCache& tools;
  ServerOptions opts;
  ParseContext pctx;
  HttpTransport transport;

  Impl(InferenceModel& m, Worker& w, Metrics& mt, SharedToolCache& t, ServerOptions o)
      : model(m), worker(w), metrics(mt), tools(t), opts(std::move(o)), transport(*this, transport_options(opts)) {
    pctx.model_ids = opts.model_ids;
    pctx.n_ctx = model.n_ctx();
    pctx.default_max_tokens = opts.default_max_tokens;
    pctx.chat_format = opts.chat_format;
    pctx.chatml_template = opts.chatml_template;
    pctx.lookup_tool_block = [this](const std::vector<std::string>& ids) { return tools.get_all(ids); };
  }

  json model_json(const std::string& id) const {
    json j{{"id", id},
           {"object", "model"},
           {"created", 1767225600},
           {"owned_by", "ds4"},
           {"context_length", model.n_ctx()},
           {"max_completion_tokens", std::min<int64_t>(opts.default_max_tokens, model.n_ctx())}};
    if (!opts.steering_file.empty())
      j["steering"] = json{{"file", opts.steering_file},
                           {"id", opts.steering_id},
                           {"first_layer", opts.steering_first_layer},
                           {"layers", opts.steering_layers},
                           {"attn", opts.steering_attn},
                           {"ffn", opts.steering_ffn}};
    return j;
  }

  // Everything but generation: answered on an I/O thread.
  std::optional<HttpResponse> quick(const HttpRequest& req) override {
    const std::string& p = req.path;
    if (req.method == "OPTIONS" && opts.cors) {
      HttpResponse r;
      r.status = 204;
      r.content_type.clear();
      return r;
    }
    // The page itself is public (it holds no data); with --api-key it asks for the key and
    // sends it with its /v1 requests.
    if (opts.webui && req.method == "GET") {
      if (auto page = webui::serve(p, req.header("If-None-Match"), req.header("Accept-Encoding"))) return page;
    }
    if (!opts.api_key.empty() && req.method != "OPTIONS" && p.rfind("/v1/", 0) == 0) {
      std::string bearer = req.header("Authorization");
      std::string xkey = req.header("x-api-key");
      if (bearer != "Bearer " + opts.api_key && xkey != opts.api_key) {
        return error_response(api_for_path(p), ApiError(401, "invalid or missing API key"));
      }
    }
    if (req.method == "GET") {
      if (p == "/health") return json_response(200, json{{"status", "ok"}, {"queue_length", worker.queue_length()}});
      if (p == "/metrics") {
        HttpResponse r;
        r.content_type = "text/plain; version=0.0.4";
        r.body = metrics.prometheus();
        return r;
      }
      if (p == "/v1/models") {
        json data = json::array();
        for (const auto& id : opts.model_ids) data.push_back(model_json(id));
        return json_response(200, json{{"object", "list"}, {"data", data}});
      }
      if (p.rfind("/v1/models/", 0) == 0 && p.size() > 11) {
        std::string id = p.substr(11);
        for (const auto& m : opts.model_ids) {
          if (m == id) return json_response(200, model_json(id));
        }
        return error_response(ApiKind::Chat, ApiError(404, "model '" + id + "' not found", "model", "model_not_found"));
      }
    }
    if (req.method == "POST" && generation_route(p)) return std::nullopt;
    return error_response(api_for_path(p), ApiError(404, "no route for " + req.method + " " + p));
  }

  void blocking(const HttpRequest& req, ResponseSink& sink) override { generate(*generation_route(req.path), req, sink); }

  HttpResponse transport_error(const std::string& path, int status, const std::string& message) override {
    return error_response(api_for_path(path), ApiError(status, message));
  }

  void responded(const std::string& path, int status) override { metrics.count_request(endpoint_label(path), status); }

  void finish_abandoned(const std::shared_ptr<Job>& job) {
    job->cancel = true;
    worker.withdraw(job);
    job->wait_finished();
  }

  void generate(ApiKind api, const HttpRequest& req, ResponseSink& sink) {
    auto job = std::make_shared<Job>();
    try {
      prepare_job(api, req.body, pctx, model, *job);
    } catch (const std::exception& e) {
      sink.send(error_response(api, bad_request_from(e)));
      return;
    }
    // The worker polls this before each token; the job ends before this function returns.
    job->client_gone = [&sink] { return sink.peer_closed(); };
    if (!worker.submit(job)) {
      sink.send(error_response(api, ApiError(503, "the request queue is full; retry later")));
      return;
    }
    std::shared_ptr<ApiWriter> writer = make_writer(job->req, new_response_id(api), std::time(nullptr));
    if (job->req.stream) {
      stream(job, *writer, sink);
    } else {
      collect(api, job, *writer, sink);
    }
    if (!job->finished()) finish_abandoned(job);
  }

  void stream(const std::shared_ptr<Job>& job, ApiWriter& writer, ResponseSink& sink) {
    auto write = [&](const std::string& s) { return s.empty() || sink.write(s); };
    if (!sink.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}}) ||
        !write(writer.begin())) {
      return finish_abandoned(job);
    }
    std::vector<GenEvent> events;
    for (;;) {
      events.clear();
      if (!job->wait_events(events, std::chrono::milliseconds(opts.keepalive_ms))) {
        if (sink.peer_closed() || !write(writer.keepalive())) return finish_abandoned(job);
        continue;
      }
      bool last = false;
      for (const auto& e : events) {
        last = last || e.kind == GenEvent::Kind::Done || e.kind == GenEvent::Kind::Failed;
        if (!write(writer.on_event(e))) return finish_abandoned(job);
      }
      if (last) {
        job->wait_finished();
        sink.end_stream();
        return;
      }
    }
  }

  void collect(ApiKind api, const std::shared_ptr<Job>& job, ApiWriter& writer, ResponseSink& sink) {
    std::vector<GenEvent> events;
    for (;;) {
      events.clear();
      if (!job->wait_events(events, std::chrono::milliseconds(50))) {
        if (sink.peer_closed()) {
          finish_abandoned(job);
          sink.send(json_response(499, json::object()));  // nginx's "client closed request"; nobody reads it
          return;
        }
        continue;
      }
      for (const auto& e : events) {
        if (e.kind == GenEvent::Kind::Failed) {
          job->wait_finished();
          sink.send(error_response(api, ApiError(e.status, e.text)));
          return;
        }
        writer.on_event(e);
        if (e.kind == GenEvent::Kind::Done) {
          job->wait_finished();
          if (e.finish == Finish::Cancelled) {
            sink.send(json_response(499, json::object()));
            return;
          }
          sink.send(json_response(200, writer.final_body()));
          return;
        }
      }
    }
  }
};

HttpServer::HttpServer(InferenceModel& model, Worker& worker, Metrics& metrics, SharedToolCache& tools,
                       ServerOptions opts)
    : impl_(std::make_unique<Impl>(model, worker, metrics, tools, std::move(opts))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() { return impl_->opts.port = impl_->transport.bind(); }
void HttpServer::listen() { impl_->transport.listen(); }
void HttpServer::stop() { impl_->transport.stop(); }

}  // namespace ds4::server
