#include "chat/chatml.h"
#include "agent/app.h"

#include <fmt/format.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <random>

#include "agent/app_impl.h"
#include "core/error.h"

namespace ds4::agent {

namespace fs = std::filesystem;
using chat::Json;

App::App(const AgentCliOptions& o) : o_(o) {
  if (o.max_turns < 1) fail("--max-turns must be at least 1");
  wd_ = std::make_unique<Workdir>(o.workdir.empty() ? fs::current_path() : fs::path(o.workdir));
  EngineOptions eo;
  eo.model_path = o.model_path;
  eo.backend = o.backend;
  eo.threads = o.threads;
  eo.max_batch = o.batch;
  eo.ctx_size = o.ctx;
  eo.dir_steering_file = o.dir_steering_file;
  eo.dir_steering_attn = o.dir_steering_attn;
  eo.dir_steering_ffn = o.dir_steering_ffn;
  if (o.configure_engine) o.configure_engine(eo);
  engine_ = Engine::open(eo);
  SamplerConfig sc;
  sc.temperature = o.temperature;
  sc.top_k = o.top_k;
  sc.top_p = o.top_p;
  sc.min_p = o.min_p;
  sc.seed = o.seed ? *o.seed : std::random_device{}();
  engine_model_ = std::make_unique<EngineModel>(engine_, o.ctx, sc);
  model_ = engine_model_.get();
  if (!o.debug_script.empty()) {
    script_model_ = std::make_unique<ScriptModel>(*engine_model_, load_script(o.debug_script));
    model_ = script_model_.get();
  }
  tools_ = std::make_unique<Tools>(*wd_, o.yes);

  stdin_tty_ = isatty(STDIN_FILENO);
  std::vector<EventSink*> sinks;
  if (o.json) {
    auto j = std::make_unique<JsonLines>(stdout);
    json_out_ = j.get();
    ui_ = std::move(j);
  } else {
    const bool color = !o.no_color && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
    ui_ = std::make_unique<TerminalUi>(stdout, stderr, color, isatty(STDERR_FILENO));
  }
  sinks.push_back(ui_.get());
  if (!o.trace.empty()) {
    trace_file_ = std::fopen(o.trace.c_str(), "a");
    if (!trace_file_) fail("--trace {}: cannot open for appending", o.trace);
    trace_sink_ = std::make_unique<JsonLines>(trace_file_);
    sinks.push_back(trace_sink_.get());
  }
  tee_ = std::make_unique<Tee>(sinks);
  sink_ = tee_.get();
  host_ = std::make_unique<StdinHost>(*sink_, stdin_tty_);
  AgentOptions ao;
  ao.thinking = thinking_from_name(o.think);
  ao.max_turns = o.max_turns;
  ao.max_tokens = o.n_predict;
  ao.format = chat::chat_format_for_architecture(engine_->info().architecture);
  ao.chatml_template = chat::chatml_template_for(engine_->info().chat_template);
  agent_ = std::make_unique<Agent>(*model_, *tools_, *sink_, *host_, ao);
  store_ = std::make_unique<SessionStore>(o.sessions_dir.empty() ? SessionStore::default_dir() : fs::path(o.sessions_dir));
  new_session();
  if (o.resume) resume(*o.resume);
}

App::~App() {
  if (trace_file_) std::fclose(trace_file_);
}

void App::event(const Json& j) {
  if (json_out_) json_out_->emit(j);
  if (trace_sink_) trace_sink_->emit(j);
}

void App::say(const std::string& line) {
  if (json_out_) {
    json_out_->notice(line);
  } else {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }
}

void App::new_session() {
  agent_->reset(default_system_prompt(wd_->root().string()));
  id_ = store_->new_id();
}

int App::exit_code(Outcome o) {
  switch (o) {
    case Outcome::Answered: return 0;
    case Outcome::TurnLimit: return 2;
    case Outcome::Cancelled: return 130;
    case Outcome::ContextFull:
    case Outcome::Error: return 1;
  }
  return 1;
}

RunReport App::run_request(const std::string& text) {
  auto& stop = interrupt_flag();
  stop = false;
  install_interrupt_handler();
  RunReport r;
  try {
    r = agent_->run(text, &stop);
  } catch (...) {
    restore_default_interrupt();
    throw;
  }
  restore_default_interrupt();
  return r;
}

int App::run_once() {
  const RunReport r = run_request(o_.prompt);
  if (o_.save) save();
  if (r.outcome == Outcome::Error || r.outcome == Outcome::ContextFull)
    fmt::print(stderr, "ds4-agent: error: {}\n", r.error);
  if (r.outcome == Outcome::TurnLimit)
    fmt::print(stderr, "ds4-agent: stopped at the turn limit ({} model turns)\n", o_.max_turns);
  return exit_code(r.outcome);
}

void App::save() {
  SessionInfo info;
  info.id = id_;
  info.title = agent_->title();
  info.workdir = wd_->root().string();
  info.thinking = thinking_name(agent_->thinking());
  store_->save(info, agent_->conversation(), *model_);
  event(Json{{"event", "saved"}, {"id", id_}, {"n_tokens", model_->n_past()}, {"dir", (store_->dir() / id_).string()}});
  if (!json_out_) say(fmt::format("Saved session {} ({} tokens).", id_, model_->n_past()));
}

void App::resume(const std::string& q) {
  const std::string id = store_->resolve(q);
  SavedSession s = store_->load(id);
  bool payload_loaded = false;
  std::string why;
  if (!s.payload.empty()) {
    if (s.info.model_id != model_->model_id()) {
      why = fmt::format("it was saved with model {} ({})", s.info.model_name, s.info.model_id);
    } else {
      try {
        model_->load_state(s.payload.string());
        payload_loaded = true;
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
  } else {
    why = "its payload was stripped";
  }
  if (payload_loaded && model_->text() != s.history) {
    fail("session {}: payload.ds4s and history.txt disagree; the session is damaged", id);
  }
  agent_->set_thinking(thinking_from_name(s.info.thinking));
  agent_->restore(std::move(s.conv));
  id_ = id;
  if (!payload_loaded) {
    // Re-evaluate the text once (the next request would do it anyway; doing it here makes the
    // cost visible where it happens).
    auto& stop = interrupt_flag();
    stop = false;
    install_interrupt_handler();
    PrefillStats st;
    try {
      st = agent_->sync(&stop);
    } catch (...) {
      restore_default_interrupt();
      throw;
    }
    restore_default_interrupt();
    if (st.cancelled) fail("session {}: re-evaluation interrupted", id);
  }
  if (!s.info.workdir.empty() && s.info.workdir != wd_->root().string())
    sink_->notice(fmt::format("session {} was started in {}; the tools now work in {}", id, s.info.workdir,
                              wd_->root().string()));
  event(Json{{"event", "resumed"}, {"id", id}, {"n_tokens", model_->n_past()}, {"payload", payload_loaded}});
  if (!json_out_)
    say(payload_loaded ? fmt::format("Resumed session {} ({} tokens restored, none evaluated).", id, model_->n_past())
                       : fmt::format("Resumed session {} ({} tokens re-evaluated: {}).", id, model_->n_past(), why));
}

void App::list_sessions() {
  const auto all = store_->list();
  if (all.empty()) {
    say(fmt::format("No saved sessions in {}.", store_->dir().string()));
    return;
  }
  for (const auto& s : all) {
    char when[32] = "?";
    const std::time_t t = static_cast<std::time_t>(s.updated);
    std::tm tm{};
    if (localtime_r(&t, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
    say(fmt::format("{} {}  {}  {:>7} tokens  {}  {}", s.id == id_ ? '*' : ' ', s.id, when, s.n_tokens,
                    s.has_payload ? "kv      " : "stripped", s.title));
  }
}

void App::del(const std::string& q) {
  const std::string id = store_->resolve(q);
  if (id == id_) fail("{} is the current session; /switch to another one first", id);
  store_->remove(id);
  say(fmt::format("Deleted session {}.", id));
}

void App::strip(const std::string& q) {
  const std::string id = store_->resolve(q);
  store_->strip(id);
  say(fmt::format("Stripped session {}: its KV payload is gone, its text stays (resuming re-evaluates it).", id));
}

void App::print_ctx() {
  const int64_t n = model_->n_past(), c = model_->n_ctx();
  say(fmt::format("Context: {} of {} tokens used ({:.1f}%), {} free; {} messages; session {}.", n, c,
                  c ? 100.0 * static_cast<double>(n) / static_cast<double>(c) : 0.0, c - n,
                  agent_->conversation().messages.size(), id_));
}

int run_agent_cli(const AgentCliOptions& o) {
  App app(o);
  if (o.prompt_given) return app.run_once();
  return app.run_repl();
}

}  // namespace ds4::agent
