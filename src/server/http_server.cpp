#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "chat/renderer.h"
#include "core/error.h"
#include "server/api_error.h"
#include "server/conn_probe.h"
#include "server/prepare.h"
#include "server/request_parse.h"
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
  return "other";
}

ApiKind api_for_path(const std::string& path) {
  if (path.rfind("/v1/messages", 0) == 0) return ApiKind::Messages;
  if (path.rfind("/v1/responses", 0) == 0) return ApiKind::Responses;
  if (path.rfind("/v1/completions", 0) == 0) return ApiKind::Completions;
  return ApiKind::Chat;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, ApiKind api, const ApiError& e) {
  res.status = e.status();
  res.set_content(dump(error_body(api, e)), "application/json");
}

}  // namespace

struct HttpServer::Impl {
  InferenceModel& model;
  Worker& worker;
  Metrics& metrics;
  SharedToolCache& tools;
  ServerOptions opts;
  httplib::Server http;
  ParseContext pctx;

  Impl(InferenceModel& m, Worker& w, Metrics& mt, SharedToolCache& t, ServerOptions o)
      : model(m), worker(w), metrics(mt), tools(t), opts(std::move(o)) {
    pctx.model_ids = opts.model_ids;
    pctx.n_ctx = model.n_ctx();
    pctx.default_max_tokens = opts.default_max_tokens;
    pctx.lookup_tool_block = [this](const std::vector<std::string>& ids) { return tools.get_all(ids); };
    setup();
  }

  json model_json(const std::string& id) const {
    return json{{"id", id},
                {"object", "model"},
                {"created", 1767225600},
                {"owned_by", "ds4"},
                {"context_length", model.n_ctx()},
                {"max_completion_tokens", std::min<int64_t>(opts.default_max_tokens, model.n_ctx())}};
  }

  void setup() {
    int n_threads = std::max(4, opts.http_threads);
    http.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
    http.set_payload_max_length(opts.max_body_bytes);
    http.set_keep_alive_timeout(2);
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);
    if (opts.cors) {
      http.set_default_headers({{"Access-Control-Allow-Origin", "*"},
                                {"Access-Control-Allow-Headers",
                                 "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, OpenAI-Beta"},
                                {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"}});
      http.Options(R"(/.*)", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });
    }
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (opts.api_key.empty() || req.method == "OPTIONS" || req.path.rfind("/v1/", 0) != 0) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      std::string bearer = req.get_header_value("Authorization");
      std::string xkey = req.get_header_value("x-api-key");
      if (bearer == "Bearer " + opts.api_key || xkey == opts.api_key) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, api_for_path(req.path), ApiError(401, "invalid or missing API key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty() || res.content_length_ > 0) return;
      ApiKind api = api_for_path(req.path);
      std::string msg;
      switch (res.status) {
        case 404: msg = "no route for " + req.method + " " + req.path; break;
        case 413: msg = "request body is larger than the limit of " + std::to_string(opts.max_body_bytes) + " bytes"; break;
        case 400:
          // cpp-httplib 0.11 answers 400 (not 413) when a chunked body passes the limit.
          msg = req.get_header_value("Transfer-Encoding") == "chunked"
                    ? "malformed chunked body, or larger than the limit of " + std::to_string(opts.max_body_bytes) + " bytes"
                    : "malformed HTTP request";
          break;
        default: msg = "HTTP error " + std::to_string(res.status); break;
      }
      res.set_content(dump(error_body(api, res.status, msg)), "application/json");
    });
    http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
      std::string msg = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        msg = e.what();
      } catch (...) {
      }
      std::fprintf(stderr, "ds4-server: %s %s: %s\n", req.method.c_str(), req.path.c_str(), msg.c_str());
      res.status = 500;
      res.set_content(dump(error_body(api_for_path(req.path), 500, msg)), "application/json");
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.count_request(endpoint_label(req.path), res.status);
    });

    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump(json{{"status", "ok"}, {"queue_length", worker.queue_length()}}), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.prometheus(), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json data = json::array();
      for (const auto& id : opts.model_ids) data.push_back(model_json(id));
      res.set_content(dump(json{{"object", "list"}, {"data", data}}), "application/json");
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      std::string id = req.matches[1];
      for (const auto& m : opts.model_ids) {
        if (m == id) {
          res.set_content(dump(model_json(id)), "application/json");
          return;
        }
      }
      send_error(res, ApiKind::Chat, ApiError(404, "model '" + id + "' not found", "model", "model_not_found"));
    });
    auto route = [this](const char* path, ApiKind api) {
      http.Post(path, [this, api](const httplib::Request& req, httplib::Response& res) { generate(api, req, res); });
    };
    route("/v1/chat/completions", ApiKind::Chat);
    route("/v1/completions", ApiKind::Completions);
    route("/v1/responses", ApiKind::Responses);
    route("/v1/messages", ApiKind::Messages);
  }

  std::shared_ptr<Job> prepare(ApiKind api, const httplib::Request& req) {
    auto job = std::make_shared<Job>();
    prepare_job(api, req.body, pctx, model, *job);
    return job;
  }

  void finish_abandoned(const std::shared_ptr<Job>& job) {
    job->cancel = true;
    worker.withdraw(job);
    job->wait_finished();
  }

  void generate(ApiKind api, const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Job> job;
    try {
      job = prepare(api, req);
    } catch (const ApiError& e) {
      send_error(res, api, e);
      return;
    } catch (const std::exception& e) {
      send_error(res, api, bad_request_from(e));
      return;
    }
    auto probe = std::make_shared<ConnProbe>(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    job->client_gone = [probe] { return probe->peer_closed(); };
    if (!worker.submit(job)) {
      send_error(res, api, ApiError(503, "the request queue is full; retry later"));
      return;
    }
    std::shared_ptr<ApiWriter> writer = make_writer(job->req, new_response_id(api), std::time(nullptr));
    if (!job->req.stream) {
      collect(api, job, writer, *probe, res);
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto started = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, writer, probe, started](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
          if (!*started) {
            *started = true;
            if (!write(writer->begin())) {
              finish_abandoned(job);
              return false;
            }
          }
          std::vector<GenEvent> events;
          for (;;) {
            events.clear();
            if (!job->wait_events(events, std::chrono::milliseconds(opts.keepalive_ms))) {
              if (probe->peer_closed() || !write(writer->keepalive())) {
                finish_abandoned(job);
                return false;
              }
              continue;
            }
            bool last = false;
            for (const auto& e : events) {
              last = last || e.kind == GenEvent::Kind::Done || e.kind == GenEvent::Kind::Failed;
              if (!write(writer->on_event(e))) {
                finish_abandoned(job);
                return false;
              }
            }
            if (last) {
              job->wait_finished();
              sink.done();
              return true;
            }
          }
        },
        [this, job](bool) {
          if (!job->finished()) finish_abandoned(job);
        });
  }

  void collect(ApiKind api, const std::shared_ptr<Job>& job, const std::shared_ptr<ApiWriter>& writer,
               const ConnProbe& probe, httplib::Response& res) {
    std::vector<GenEvent> events;
    for (;;) {
      events.clear();
      if (!job->wait_events(events, std::chrono::milliseconds(50))) {
        if (probe.peer_closed()) {
          finish_abandoned(job);
          res.status = 499;  // nginx's "client closed request"; nobody reads it
          return;
        }
        continue;
      }
      for (const auto& e : events) {
        if (e.kind == GenEvent::Kind::Failed) {
          job->wait_finished();
          send_error(res, api, ApiError(e.status, e.text));
          return;
        }
        writer->on_event(e);
        if (e.kind == GenEvent::Kind::Done) {
          job->wait_finished();
          if (e.finish == Finish::Cancelled) {
            res.status = 499;
            return;
          }
          res.set_content(dump(writer->final_body()), "application/json");
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

int HttpServer::bind() {
  auto& o = impl_->opts;
  if (o.port == 0) {
    int p = impl_->http.bind_to_any_port(o.host);
    if (p <= 0) fail("cannot bind {}:any", o.host);
    o.port = p;
    return p;
  }
  if (!impl_->http.bind_to_port(o.host, o.port)) fail("cannot bind {}:{}", o.host, o.port);
  return o.port;
}

void HttpServer::listen() { impl_->http.listen_after_bind(); }
void HttpServer::stop() { impl_->http.stop(); }

}  // namespace ds4::server
