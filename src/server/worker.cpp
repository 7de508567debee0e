#include "server/worker.h"

#include <fmt/format.h>

#include <cstdio>
#include <iterator>
#include <optional>
#include <random>

#include "chat/chatml_parser.h"
#include "chat/dsml_parser.h"
#include "chat/markers.h"
#include "chat/py_json.h"
#include "ds4/session.h"
#include "chat/dsml_gate.h"
#include "server/text_stream.h"

namespace ds4::server {

using Clock = std::chrono::steady_clock;

// ---- Job channel ----

void Job::push(GenEvent e) {
  {
    std::lock_guard lk(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

bool Job::wait_events(std::vector<GenEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !events_.empty(); });
  if (events_.empty()) return false;
  while (!events_.empty()) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

void Job::mark_finished() {
  {
    std::lock_guard lk(mu_);
    finished_ = true;
  }
  cv_.notify_all();
}

bool Job::finished() const {
  std::lock_guard lk(mu_);
  return finished_;
}

void Job::wait_finished() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return finished_; });
}

// ---- Worker ----

Worker::Worker(InferenceModel& model, WorkerOptions opts, Metrics& metrics, SharedToolCache& tools)
    : model_(model), opts_(opts), metrics_(metrics), tools_(tools) {
  thread_ = std::thread([this] { loop(); });
}

Worker::~Worker() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& j : queue_) {
    GenEvent e;
    e.kind = GenEvent::Kind::Failed;
    e.status = 503;
    e.text = "server is shutting down";
    j->push(std::move(e));
    j->mark_finished();
  }
}

bool Worker::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lk(mu_);
    if (stop_ || queue_.size() >= opts_.max_queue) return false;
    queue_.push_back(std::move(job));
  }
  update_gauges();
  cv_.notify_all();
  return true;
}

bool Worker::withdraw(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lk(mu_);
    auto it = std::find(queue_.begin(), queue_.end(), job);
    if (it == queue_.end()) return false;
    queue_.erase(it);
  }
  update_gauges();
  GenEvent e;
  e.kind = GenEvent::Kind::Done;
  e.finish = Finish::Cancelled;
  job->push(std::move(e));
  job->mark_finished();
  return true;
}

size_t Worker::queue_length() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

void Worker::update_gauges() {
  std::lock_guard lk(mu_);
  metrics_.set_queue(static_cast<int64_t>(queue_.size()), active_ ? 1 : 0);
}

void Worker::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = queue_.front();
      queue_.pop_front();
      active_ = true;
    }
    update_gauges();
    try {
      run(*job);
    } catch (const std::exception& e) {
      // Model failures are not caused by valid input; report and keep serving.
      std::fprintf(stderr, "ds4-server: generation failed: %s\n", e.what());
      GenEvent ev;
      ev.kind = GenEvent::Kind::Failed;
      ev.status = dynamic_cast<const ContextOverflow*>(&e) ? 400 : 500;
      ev.text = e.what();
      job->push(std::move(ev));
    }
    job->mark_finished();
    {
      std::lock_guard lk(mu_);
      active_ = false;
    }
    update_gauges();
  }
}

namespace {

std::string random_id(const char* prefix, size_t n) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s = prefix;
  for (size_t i = 0; i < n; ++i) s += alphabet[rng() % 62];
  return s;
}

const char* tool_id_prefix(ApiKind api) { return api == ApiKind::Messages ? "toolu_" : "call_"; }

bool gone(Job& job) {
  if (job.cancel.load()) return true;
  if (job.client_gone && job.client_gone()) {
    job.cancel = true;
    return true;
  }
  return false;
}

// Turns parser events into GenEvents: stop sequences on visible text, argument deltas for
// tool calls (whose concatenation is exactly the final arguments JSON), tool ids.
class EventMapper {
 public:
  EventMapper(Job& job, SharedToolCache& tools, bool record)
      : job_(job), tools_(tools), record_(record), stops_(job.req.stop) {}

  void text(std::string_view t) {
    std::string safe = stops_.push(t);
    emit_text(std::move(safe));
  }
  void reasoning(std::string_view t) {
    if (t.empty()) return;
    GenEvent e;
    e.kind = GenEvent::Kind::Reasoning;
    e.text = t;
    emit(std::move(e));
  }
  void add_logprob(LogprobEntry e) { pending_lp_.push_back(std::move(e)); }

  // Returns true when generation should stop (stop sequence, tool block complete, parse error).
  bool dsml(const chat::DsmlEvent& ev) {
    using K = chat::DsmlEventKind;
    switch (ev.kind) {
      case K::Text: text(ev.text); return stops_.matched();
      case K::Reasoning: reasoning(ev.text); return false;
      case K::ReasoningEnd: in_reasoning_ = false; return false;
      case K::ToolCallsBegin: flush_text(); return false;
      case K::ToolCallStart: {
        GenEvent e;
        e.kind = GenEvent::Kind::ToolStart;
        e.tool_index = n_tools_;
        e.tool_id = random_id(tool_id_prefix(job_.req.api), 24);
        e.tool_name = ev.name;
        cur_id_ = e.tool_id;
        block_ids_.push_back(cur_id_);
        args_.clear();
        in_invoke_ = true;
        emit(std::move(e));
        return false;
      }
      case K::Parameter: {
        // The value was streamed as it was generated (value_char); close it here.
        if (!value_open_) {  // not seen by value_char (cannot happen with lockstep feeding)
          open_value(ev.name, ev.is_string);
          emit_value(ev.text);
          value_done_ = true;
        }
        flush_held_value();
        if (value_raw_ != ev.text) {
          std::fprintf(stderr, "ds4-server: streamed parameter value differs from the parsed one\n");
        }
        std::string delta = ev.is_string ? "\"" : "";
        value_open_ = false;
        args_ += delta;
        if (!delta.empty()) push_args(std::move(delta));
        return false;
      }
      case K::ToolCallEnd: {
        in_invoke_ = false;
        std::string delta = args_.empty() ? "{}" : "}";
        args_ += delta;
        push_args(std::move(delta));
        if (args_ != ev.text) {
          std::fprintf(stderr, "ds4-server: tool-call argument deltas differ from the parsed arguments\n");
        }
        GenEvent e;
        e.kind = GenEvent::Kind::ToolEnd;
        e.tool_index = n_tools_++;
        e.tool_id = cur_id_;
        e.tool_name = ev.name;
        e.text = ev.text;
        emit(std::move(e));
        return false;
      }
      case K::ToolCallsEnd:
        if (record_ && !block_ids_.empty()) tools_.put(block_ids_, ev.text);
        block_ids_.clear();
        return true;
      case K::Eos: return true;
      case K::Error:
        std::fprintf(stderr, "ds4-server: generated DSML is malformed: %s\n", ev.text.c_str());
        parse_error_ = true;
        return true;
    }
    return false;
  }

  void finish_text() {
    emit_text(stops_.flush());
    flush_text();
    end_token();
  }
  // The events of one token are merged (consecutive text, reasoning or argument pieces become
  // one event) and sent here, once the token's text has been fed. Without it a client would
  // get one SSE delta per character wherever the DSML parser is fed character by character.
  void end_token() {
    if (pending_) job_.push(std::move(*pending_));
    pending_.reset();
  }

  // Called with each generated UTF-8 character before the parser sees it: streams parameter
  // values of the open invoke as argument deltas while they are generated. Characters that
  // could begin the closing tag are held until it is certain they do not.
  void value_char(std::string_view ch) {
    if (!in_invoke_) return;
    if (value_open_) {
      held_.append(ch);
      if (held_ == chat::mark::kParamClose) {
        held_.clear();  // the tag: the value is complete (the parser reports it next)
        value_done_ = true;
        return;
      }
      while (!held_.empty() && chat::mark::kParamClose.substr(0, held_.size()) != held_) {
        size_t n = utf8_len(static_cast<unsigned char>(held_[0]));
        emit_value(held_.substr(0, n));
        held_.erase(0, n);
      }
      return;
    }
    header_tail_.append(ch);
    if (header_tail_.size() > 4096) header_tail_.erase(0, header_tail_.size() - 4096);
    size_t open = header_tail_.rfind(chat::mark::kParamOpen);
    if (open == std::string::npos || ch != ">") return;
    std::string_view h = std::string_view(header_tail_).substr(open + chat::mark::kParamOpen.size());
    size_t a = h.find("name=\"");
    if (a == std::string_view::npos) return;
    size_t b = h.find('"', a + 6);
    if (b == std::string_view::npos) return;
    open_value(std::string(h.substr(a + 6, b - a - 6)), h.find("string=\"true\"") != std::string_view::npos);
    header_tail_.clear();
  }
  bool stopped_by_sequence() const { return stops_.matched(); }
  const std::string& stop_sequence() const { return stops_.matched_sequence(); }
  int n_tools() const { return n_tools_; }
  bool in_reasoning() const { return in_reasoning_; }
  void set_in_reasoning(bool v) { in_reasoning_ = v; }

 private:
  static size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1; }
  void open_value(const std::string& name, bool is_string) {
    std::string delta = args_.empty() ? "{" : ", ";
    chat::py_json_quote(name, delta);
    delta += ": ";
    if (is_string) delta += '"';
    args_ += delta;
    push_args(std::move(delta));
    value_open_ = true;
    value_done_ = false;
    value_is_string_ = is_string;
    value_raw_.clear();
    held_.clear();
  }
  void emit_value(const std::string& raw) {
    if (raw.empty()) return;
    value_raw_ += raw;
    std::string delta;
    if (value_is_string_) {
      chat::py_json_quote(raw, delta);  // JSON escaping is per character: strip the quotes
      delta = delta.substr(1, delta.size() - 2);
    } else {
      delta = raw;
    }
    args_ += delta;
    push_args(std::move(delta));
  }
  void flush_held_value() {
    if (!value_done_) emit_value(held_);  // parser finished without our seeing the tag
    held_.clear();
  }

  void emit_text(std::string t) {
    if (t.empty()) return;
    GenEvent e;
    e.kind = GenEvent::Kind::Text;
    e.text = std::move(t);
    e.logprobs = std::move(pending_lp_);
    pending_lp_.clear();
    emit(std::move(e));
  }
  void flush_text() {
    if (pending_lp_.empty()) return;
    GenEvent e;
    e.kind = GenEvent::Kind::Text;
    e.logprobs = std::move(pending_lp_);
    pending_lp_.clear();
    emit(std::move(e));
  }
  void push_args(std::string delta) {
    GenEvent e;
    e.kind = GenEvent::Kind::ToolArgs;
    e.tool_index = n_tools_;
    e.tool_id = cur_id_;
    e.text = std::move(delta);
    emit(std::move(e));
  }
  static bool mergeable(GenEvent::Kind k) {
    return k == GenEvent::Kind::Text || k == GenEvent::Kind::Reasoning || k == GenEvent::Kind::ToolArgs;
  }
  // Appends to the pending event when it is of the same kind (and tool), else sends the
  // pending one first; events that are not pieces of a stream go out at once, in order.
  void emit(GenEvent e) {
    if (pending_ && pending_->kind == e.kind && mergeable(e.kind) && pending_->tool_index == e.tool_index) {
      pending_->text += e.text;
      pending_->logprobs.insert(pending_->logprobs.end(), std::make_move_iterator(e.logprobs.begin()),
                                std::make_move_iterator(e.logprobs.end()));
      return;
    }
    end_token();
    if (mergeable(e.kind)) {
      pending_ = std::move(e);
    } else {
      job_.push(std::move(e));
    }
  }

  Job& job_;
  SharedToolCache& tools_;
  bool record_;
  StopMatcher stops_;
  std::vector<LogprobEntry> pending_lp_;
  int n_tools_ = 0;
  std::string cur_id_;
  std::string args_;
  std::vector<std::string> block_ids_;
  bool in_invoke_ = false;
  std::string header_tail_;
  bool value_open_ = false, value_done_ = false, value_is_string_ = true;
  std::string value_raw_, held_;
  bool in_reasoning_ = false;
  bool parse_error_ = false;
  std::optional<GenEvent> pending_;
};

}  // namespace

void Worker::run(Job& job) {
  Usage usage;
  usage.prompt_tokens = static_cast<int64_t>(job.prompt.size());
  if (gone(job)) {
    metrics_.count_cancelled();
    GenEvent e;
    e.kind = GenEvent::Kind::Done;
    e.finish = Finish::Cancelled;
    e.usage = usage;
    job.push(std::move(e));
    return;
  }

  // ---- prefill ----
  auto t0 = Clock::now();
  if (opts_.debug_prefill_delay_ms > 0) {
    const auto& live = model_.tokens();
    size_t common = 0;
    while (common < live.size() && common < job.prompt.size() && live[common] == job.prompt[common]) ++common;
    auto until = t0 + std::chrono::milliseconds(opts_.debug_prefill_delay_ms * static_cast<int64_t>(job.prompt.size() - common));
    while (Clock::now() < until && !gone(job)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  SyncStats st;
  if (!gone(job)) st = model_.sync(job.prompt, &job.cancel);
  double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  usage.cached_tokens = st.reused;
  usage.prefill_evaluated = st.evaluated;
  usage.prefill_ms = prefill_s * 1e3;
  metrics_.add_prompt(usage.prompt_tokens, st.reused, st.evaluated, prefill_s);
  if (st.cancelled || gone(job)) {
    metrics_.count_cancelled();
    GenEvent e;
    e.kind = GenEvent::Kind::Done;
    e.finish = Finish::Cancelled;
    e.usage = usage;
    job.push(std::move(e));
    return;
  }

  // ---- generation ----
  auto t1 = Clock::now();
  model_.set_sampler(job.req.sampling);
  std::optional<std::vector<int32_t>> forced;
  int64_t forced_delay_ms = 0;  // TEST SCAFFOLDING: the script rule's pause after each token
  if (opts_.debug_script) {
    if (auto text = opts_.debug_script->match(job.prompt_text, job.starts_in_reasoning, job.req.tools_enabled,
                                              &forced_delay_ms)) {
      forced = model_.encode(*text, true);
    }
  }
  const bool dsml = job.req.conversation.has_value();
  // The tool-call syntax of the model family: DSML blocks (DeepSeek V4) or ChatML <tool_call>
  // XML (Qwen); both parsers emit the same events.
  const bool chatml = job.req.render.format == chat::ChatFormat::ChatML;
  std::vector<chat::Json> tool_schemas;
  if (job.req.conversation)
    for (const auto& m : job.req.conversation->messages) tool_schemas.insert(tool_schemas.end(), m.tools.begin(), m.tools.end());
  std::optional<chat::DsmlStreamParser> dsml_parser;
  std::optional<chat::ChatmlStreamParser> chatml_parser;
  if (chatml) chatml_parser.emplace(job.starts_in_reasoning, tool_schemas);
  else dsml_parser.emplace(job.starts_in_reasoning);
  struct {
    std::optional<chat::DsmlStreamParser>& d;
    std::optional<chat::ChatmlStreamParser>& q;
    void feed(std::string_view s, std::vector<chat::DsmlEvent>& e) { d ? d->feed(s, e) : q->feed(s, e); }
    void finish(std::vector<chat::DsmlEvent>& e) { d ? d->finish(e) : q->finish(e); }
    bool failed() const { return d ? d->failed() : q->failed(); }
  } parser{dsml_parser, chatml_parser};
  EventMapper mapper(job, tools_, opts_.record_tool_blocks);
  mapper.set_in_reasoning(dsml && job.starts_in_reasoning);
  chat::DsmlGate gate;
  Utf8Joiner utf8;
  std::vector<chat::DsmlEvent> evs;

  const int64_t room = model_.n_ctx() - static_cast<int64_t>(job.prompt.size());
  const int64_t limit = std::min<int64_t>(job.max_tokens, std::max<int64_t>(room, 0));
  Finish finish = Finish::Length;
  int64_t n = 0;
  int32_t pending = -1;  // sampled but not yet evaluated
  bool stop = false;
  auto feed_text = [&](std::string_view bytes) {
    std::string t = utf8.push(bytes);
    if (t.empty()) return;
    if (!dsml) {
      mapper.text(t);
      stop = stop || mapper.stopped_by_sequence();
      return;
    }
    // One character at a time so that streamed value pieces and parser events stay in order.
    for (size_t i = 0; i < t.size() && !stop;) {
      unsigned char c = static_cast<unsigned char>(t[i]);
      size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      std::string_view ch = std::string_view(t).substr(i, len);
      i += len;
      mapper.value_char(ch);
      evs.clear();
      parser.feed(ch, evs);
      for (const auto& ev : evs) {
        if (mapper.dsml(ev)) stop = true;
        if (stop) break;
      }
    }
  };

  while (n < limit && !stop) {
    if (gone(job)) {
      finish = Finish::Cancelled;
      break;
    }
    if (pending >= 0) {
      model_.append(pending);
      pending = -1;
    }
    int32_t tok;
    if (forced) {
      if (static_cast<size_t>(n) >= forced->size()) {
        finish = Finish::Stop;
        break;
      }
      tok = (*forced)[n];
      if (forced_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(forced_delay_ms));
    } else {
      SampleOptions so;
      if (!chatml && gate.structural()) so.temperature = 0.0f;
      tok = model_.sample(so);
    }
    if (!forced && model_.is_stop(tok)) {
      finish = Finish::Stop;
      break;
    }
    bool reasoning_token = mapper.in_reasoning();
    ++n;
    if (reasoning_token) ++usage.reasoning_tokens;
    std::string piece = model_.piece(tok);
    if (job.req.top_logprobs >= 0 && !reasoning_token) {
      Logprobs lp = model_.logprobs(tok, job.req.top_logprobs);
      LogprobEntry le;
      le.token = piece;
      le.logprob = lp.chosen.logprob;
      for (const auto& t : lp.top) le.top.emplace_back(model_.piece(t.id), t.logprob);
      mapper.add_logprob(std::move(le));
    }
    gate.feed(piece);
    feed_text(piece);
    mapper.end_token();
    if (dsml && !parser.failed()) {
      // ReasoningEnd may have arrived inside feed_text.
    }
    pending = tok;
    if (stop) {
      finish = mapper.stopped_by_sequence() ? Finish::StopSequence : Finish::Stop;
    }
  }
  if (finish == Finish::Length && n < limit && !stop) finish = Finish::Stop;
  // Flush what is held back (an incomplete character, text that could have begun a stop
  // sequence or a DSML tag).
  if (finish != Finish::Cancelled) {
    std::string rest = utf8.flush();
    if (dsml) {
      evs.clear();
      if (!rest.empty() && !stop) parser.feed(rest, evs);
      if (!stop) parser.finish(evs);
      for (const auto& ev : evs) {
        if (ev.kind == chat::DsmlEventKind::Error) continue;  // a block cut by max_tokens
        if (mapper.dsml(ev) && mapper.stopped_by_sequence()) {
          finish = Finish::StopSequence;
          break;
        }
      }
    } else if (!rest.empty() && !stop) {
      mapper.text(rest);
      if (mapper.stopped_by_sequence()) finish = Finish::StopSequence;
    }
    mapper.finish_text();
  } else {
    metrics_.count_cancelled();
  }
  if (mapper.n_tools() > 0 && (finish == Finish::Stop)) finish = Finish::ToolCalls;
  mapper.end_token();  // cancelled: whatever the last token produced still goes out before Done

  double gen_s = std::chrono::duration<double>(Clock::now() - t1).count();
  usage.completion_tokens = n;
  usage.generation_ms = gen_s * 1e3;
  metrics_.add_generation(n, gen_s);
  GenEvent done;
  done.kind = GenEvent::Kind::Done;
  done.finish = finish;
  done.stop_sequence = finish == Finish::StopSequence ? mapper.stop_sequence() : std::string();
  done.usage = usage;
  job.push(std::move(done));
}

}  // namespace ds4::server
