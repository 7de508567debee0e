// ds4-server: flags → Engine + one live Session → HTTP server. Flag names follow antirez/ds4's
// ds4-server where it has them (-m, -c/--ctx, -n/--tokens, -t, --host, --port, --cors,
// --disable-exact-dsml-tool-replay, --tool-memory-max-ids, --backend, and the disk KV cache's
// --kv-disk-dir / --kv-disk-space-mb / --kv-cache-* flags).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <mutex>
#include <cstdio>
#include <fstream>
#include <optional>
#include <pthread.h>
#include <thread>
#include <unistd.h>

#include "chat/chatml.h"
#include "common/batch_flag.h"
#include "common/expert_flags.h"
#include "core/error.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "kvdisk/pool.h"
#include "server/debug_script.h"
#include "server/http_server.h"
#include "server/inference_model.h"
#include "server/metrics.h"
#include "server/worker.h"

int main(int argc, char** argv) {
  CLI::App app{"ds4-server: OpenAI- and Anthropic-compatible HTTP API for DeepSeek V4"};
  ds4::EngineOptions eo;
  ds4::server::ServerOptions so;
  int64_t ctx = 32768, tokens = 393216, prefill_delay_ms = 0, tool_ids = 100000;
  size_t max_queue = 64;
  bool no_replay = false;
  std::string debug_script_path, port_file;
  ds4::server::SessionModelOptions mo;
  int max_sessions = 0;
  app.add_option("-m,--model", eo.model_path, "GGUF model file")->capture_default_str();
  app.add_option("-c,--ctx", ctx, "context size in tokens")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-n,--tokens", tokens, "default completion limit when a request sets none (capped by --ctx)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", eo.threads, "compute threads (0: all cores)")->check(CLI::NonNegativeNumber);
  ds4::tools::add_batch_flag(app, eo.max_batch);
  app.add_option("--backend", eo.backend, "compute backend")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dir-steering-file", eo.dir_steering_file, "directional steering file (ds4-gguf steer-build)");
  app.add_option("--dir-steering-attn", eo.dir_steering_attn, "steering scale after attention sublayers (default 0)");
  app.add_option("--dir-steering-ffn", eo.dir_steering_ffn, "steering scale after FFN sublayers (default 0)");
  std::string imatrix_out, profile_out;
  int64_t flush_s = 60;
  app.add_option("--imatrix-out", imatrix_out,
                 "collect an importance matrix from the traffic (llama.cpp GGUF imatrix format) into this file");
  app.add_option("--expert-profile-out", profile_out, "collect the expert profile from the traffic into this file");
  app.add_option("--imatrix-flush-s", flush_s, "write the collected files every N seconds (and at shutdown)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--prune-mask", eo.prune_mask, "remove the experts of this mask (ds4-gguf prune) from routing");
  app.add_option("--host", so.host, "address to bind (loopback by default)")->capture_default_str();
  app.add_option("--port", so.port, "TCP port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  app.add_option("--port-file", port_file, "write the bound port to this file once listening");
  app.add_flag("--cors", so.cors, "send Access-Control-Allow-* headers for browser clients");
  bool no_webui = false;
  app.add_flag("--no-webui", no_webui, "do not serve the chat page at / (docs/SERVER.md)");
  app.add_option("--api-key", so.api_key, "require this key (Authorization: Bearer KEY, or x-api-key: KEY) on /v1/*");
  app.add_option("--max-body-bytes", so.max_body_bytes, "largest accepted request body (413 beyond)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-queue", max_queue, "queued requests beyond which new ones get 503")->capture_default_str();
  app.add_option("--http-threads", so.http_threads, "generation requests handled at once (503 beyond)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-header-bytes", so.max_header_bytes, "largest accepted request head (431 beyond)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--header-timeout-ms", so.header_timeout_ms,
                 "time allowed for a whole request head, and for a kept-alive connection's next request")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--body-timeout-ms", so.body_timeout_ms, "time allowed for a whole request body")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--write-timeout-ms", so.write_timeout_ms, "drop a client that takes no data for this long")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-connections", so.max_connections, "open connections beyond which new ones get 503")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--sse-keepalive-ms", so.keepalive_ms, "SSE keepalive interval while nothing else is sent")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--disable-exact-dsml-tool-replay", no_replay,
               "do not replay sampled DSML for known tool-call ids (render JSON canonically)");
  app.add_option("--tool-memory-max-ids", tool_ids, "tool-call ids kept for exact replay")->capture_default_str();
  app.add_option("--max-sessions", max_sessions,
                 "conversations kept live in RAM (default 3, fewer when the memory plan says they do not fit)")
      ->check(CLI::PositiveNumber);
  ds4::tools::ExpertFlags experts;
  ds4::tools::add_expert_flags(app, experts);
  auto* kv = app.add_option_group("Disk KV cache");
  kv->add_option("--kv-disk-dir,--kv-cache-dir", mo.kv_disk_dir,
                 "save and reuse conversation states in DIR (survives restarts; one server per DIR)");
  kv->add_option("--kv-disk-space-mb,--kv-cache-budget", mo.kv_disk_space_mb, "disk budget in MB")
      ->capture_default_str()->check(CLI::PositiveNumber);
  kv->add_option("--kv-cache-min-tokens", mo.min_tokens, "do not save or load prefixes shorter than N tokens")
      ->capture_default_str()->check(CLI::PositiveNumber);
  kv->add_option("--kv-cache-cold-max-tokens", mo.cold_max_tokens, "save a new conversation's first prompt up to N tokens (0: never)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  kv->add_option("--kv-cache-continued-interval-tokens", mo.continued_interval,
                 "save each time a session reaches a multiple of N tokens (0: never)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  kv->add_option("--kv-cache-boundary-trim-tokens", mo.boundary_trim,
                 "cold / evict / shutdown saves stop this many tokens before the prompt's end")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  kv->add_option("--kv-cache-boundary-align-tokens", mo.boundary_align,
                 "align cold saves down to a multiple of N tokens (0: no alignment)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--debug-prefill-delay-ms", prefill_delay_ms,
                 "TEST SCAFFOLDING: sleep this long per prefilled token (exercises keepalives)");
  app.add_option("--debug-script", debug_script_path,
                 "TEST SCAFFOLDING: JSON rules forcing the generated text (see src/server/debug_script.h)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  so.webui = !no_webui;

  // Writes to closed sockets must fail with EPIPE, not kill the process; SIGINT / SIGTERM
  // are taken by a thread that stops the server.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit makes a cache write fail, not the server die
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR1);  // internal: wakes the signal thread at shutdown
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    eo.ctx_size = ctx;
    // The residency plan counts every session the server may keep live: --max-sessions, or the
    // default's 3 (the server may keep fewer, never more, when they do not fit: see below).
    eo.planned_sessions = max_sessions > 0 ? max_sessions : 3;
    eo.collect_imatrix = !imatrix_out.empty();
    eo.collect_expert_profile = !profile_out.empty();
    experts.apply(eo);
    auto engine = ds4::Engine::open(eo);
    for (const std::string* line : {&engine->memory_plan().residency, &engine->memory_plan().expert_streaming})
      if (!line->empty()) fmt::print(stderr, "ds4-server: {}\n", *line);
    if (auto d = engine->prune_description(); !d.empty()) fmt::print(stderr, "ds4-server: {}\n", d);
    // Live analysis: a thread writes the files every --imatrix-flush-s seconds when new tokens
    // were evaluated, and once more at shutdown (each write is atomic: temporary file + rename).
    std::mutex flush_mu;
    std::condition_variable flush_cv;
    bool flush_stop = false;
    uint64_t flushed_tokens = 0;
    auto flush = [&] {
      const uint64_t n = engine->analysis_tokens();
      if (n == flushed_tokens) return;
      try {
        if (!imatrix_out.empty())
          engine->write_imatrix(imatrix_out, {"ds4-server traffic"}, static_cast<uint32_t>((n + 511) / 512), 512);
        if (!profile_out.empty()) engine->write_expert_profile(profile_out);
        flushed_tokens = n;
      } catch (const std::exception& e) {
        fmt::print(stderr, "ds4-server: analysis flush failed: {}\n", e.what());
      }
    };
    std::thread flusher;
    if (eo.collect_imatrix || eo.collect_expert_profile)
      flusher = std::thread([&] {
        std::unique_lock<std::mutex> lk(flush_mu);
        while (!flush_cv.wait_for(lk, std::chrono::seconds(flush_s), [&] { return flush_stop; })) flush();
      });
    struct StopFlusher {
      std::thread& t;
      std::mutex& mu;
      std::condition_variable& cv;
      bool& stop;
      std::function<void()> last;
      ~StopFlusher() {
        if (!t.joinable()) return;
        {
          std::lock_guard<std::mutex> lk(mu);
          stop = true;
        }
        cv.notify_all();
        t.join();
        last();
      }
    } stop_flusher{flusher, flush_mu, flush_cv, flush_stop, flush};
    if (!engine->info().has_tokenizer) ds4::fail("{}: the model has no tokenizer", eo.model_path);
    std::optional<ds4::server::DebugScript> script;
    if (!debug_script_path.empty()) script = ds4::server::DebugScript::load(debug_script_path);

    ds4::server::Metrics metrics;
    ds4::server::SharedToolCache tools(static_cast<size_t>(std::max<int64_t>(tool_ids, 1)));
    mo.n_ctx = ctx;
    mo.tools = no_replay ? nullptr : &tools;
    if (max_sessions > 0) {
      mo.max_sessions = max_sessions;
    } else {
      // Default: 3, fewer when their state at the full context would take over half the RAM
      // available now (the memory plan's figures, not a measurement).
      const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
      const uint64_t avail = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
      mo.max_sessions = avail ? ds4::kvdisk::sessions_that_fit(engine->memory_plan(), ds4::SessionOptions{}.max_checkpoints, avail, 3) : 1;
    }
    auto model = ds4::server::make_session_model(engine, mo);
    const auto& info = engine->info();
    so.steering_file = info.steering_file;
    so.steering_id = info.steering_id;
    so.steering_first_layer = info.steering_first_layer;
    so.steering_layers = info.steering_layers;
    so.steering_attn = eo.dir_steering_attn;
    so.steering_ffn = eo.dir_steering_ffn;
    const std::string steering_lines = fmt::format(
        "# HELP ds4_steering_attn_scale Directional steering scale after attention sublayers (0: none).\n"
        "# TYPE ds4_steering_attn_scale gauge\nds4_steering_attn_scale {}\n"
        "# HELP ds4_steering_ffn_scale Directional steering scale after FFN sublayers (0: none).\n"
        "# TYPE ds4_steering_ffn_scale gauge\nds4_steering_ffn_scale {}\n"
        "# HELP ds4_steering_layers Layers the steering file covers (0: no file).\n"
        "# TYPE ds4_steering_layers gauge\nds4_steering_layers {}\n",
        eo.dir_steering_attn, eo.dir_steering_ffn, info.steering_layers);
    const bool analysing = eo.collect_imatrix || eo.collect_expert_profile;
    metrics.set_extra([&model, steering_lines, analysing, &engine] {
      std::string s = model->prometheus() + steering_lines;
      if (analysing)
        s += fmt::format("# HELP ds4_analysis_tokens Tokens counted by the live imatrix / expert profile.\n"
                         "# TYPE ds4_analysis_tokens counter\nds4_analysis_tokens {}\n", engine->analysis_tokens());
      if (const auto c = engine->expert_counters()) s += ds4::server::expert_prometheus(*c);
      return s;
    });
    ds4::server::WorkerOptions wo;
    wo.max_queue = max_queue;
    wo.debug_prefill_delay_ms = prefill_delay_ms;
    wo.debug_script = script ? &*script : nullptr;
    wo.record_tool_blocks = !no_replay;
    {
    ds4::server::Worker worker(*model, wo, metrics, tools);
    so.default_max_tokens = std::min(tokens, model->n_ctx());
    so.chat_format = ds4::chat::chat_format_for_architecture(engine->info().architecture);
    so.chatml_template = ds4::chat::chatml_template_for(engine->info().chat_template);
    // Also answer to the model's own name (what a client may pick from /v1/models).
    const std::string own = engine->info().model_name;
    if (!own.empty() && std::find(so.model_ids.begin(), so.model_ids.end(), own) == so.model_ids.end()) {
      so.model_ids.push_back(own);
    }
    ds4::server::HttpServer server(*model, worker, metrics, tools, so);
    int port = server.bind();
    std::atomic<bool> signalled{false};
    std::thread signal_thread([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      if (sig == SIGUSR1) return;
      signalled = true;
      server.stop();
    });
    fmt::print(stderr, "ds4-server: {} ({} tokens of context, up to {} live sessions) on http://{}:{}\n",
               engine->info().model_name, model->n_ctx(), mo.max_sessions, so.host, port);
    if (!port_file.empty()) {
      std::ofstream(port_file + ".tmp") << port << "\n";
      std::rename((port_file + ".tmp").c_str(), port_file.c_str());
    }
    server.listen();
    // listen() returned: stopped by a signal, or the listening socket failed. In the second
    // case the signal thread still waits; SIGUSR1 aimed at it ends the wait.
    if (!signalled) pthread_kill(signal_thread.native_handle(), SIGUSR1);
    signal_thread.join();
    }  // HTTP server, then the worker, stopped: the sessions are ours again
    model->shutdown();
    metrics.set_extra(nullptr);
    fmt::print(stderr, "ds4-server: stopped\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-server: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
