#include "agent/agent.h"

#include <fmt/format.h>

#include "chat/dsml.h"
#include "chat/chatml_parser.h"
#include "chat/dsml_parser.h"
#include "chat/markers.h"
#include "chat/prompt_tokens.h"
#include "chat/renderer.h"
#include "core/error.h"
#include "ds4/session.h"

namespace ds4::agent {

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::Answered: return "answered";
    case Outcome::TurnLimit: return "turn_limit";
    case Outcome::Cancelled: return "cancelled";
    case Outcome::ContextFull: return "context_full";
    case Outcome::Error: return "error";
  }
  return "?";
}

std::string default_system_prompt(const std::string& workdir) {
  return fmt::format(
      "You are ds4-agent, a coding assistant working in a terminal on the user's machine. Your working "
      "directory is {}; file paths are relative to it and the file tools cannot leave it. Inspect before you "
      "change: read files, search, list directories. Make changes with edit (exact text replacement) or "
      "write_file, and check them by running commands (build, tests). The user confirms writes and "
      "commands and may decline; a declined action is not an error in your work, so adapt. When the task is "
      "done, answer briefly without a tool call.",
      workdir);
}

Agent::Agent(ModelSide& model, Tools& tools, EventSink& sink, ToolHost& host, AgentOptions opts)
    : model_(model), tools_(tools), sink_(sink), host_(host), opts_(opts) {}

void Agent::reset(const std::string& system_prompt) {
  conv_ = {};
  chat::Message sys;
  sys.role = chat::Role::System;
  sys.content = system_prompt;
  sys.tools = Tools::schemas();
  conv_.messages.push_back(std::move(sys));
  synced_msgs_ = 0;
}

void Agent::restore(chat::Conversation conv) {
  conv_ = std::move(conv);
  synced_msgs_ = conv_.messages.size();
}

std::string Agent::render(const chat::Conversation& c) const {
  chat::RenderOptions ro;
  ro.thinking = opts_.thinking;
  ro.context_size = static_cast<uint64_t>(model_.n_ctx());
  ro.drop_thinking = false;  // keep every turn as written: the history only grows
  ro.add_bos = true;
  ro.format = opts_.format;
  ro.chatml_template = opts_.chatml_template;
  ro.preserve_thinking = true;  // ChatML (Qwen3.6) counterpart of drop_thinking = false
  return chat::render_prompt(c, ro);
}

std::string Agent::render() const { return render(conv_); }

chat::MarkedText Agent::render_marked(const chat::Conversation& c) const {
  chat::RenderOptions ro;
  ro.thinking = opts_.thinking;
  ro.context_size = static_cast<uint64_t>(model_.n_ctx());
  ro.drop_thinking = false;
  ro.add_bos = true;
  ro.format = opts_.format;
  ro.chatml_template = opts_.chatml_template;
  ro.preserve_thinking = true;  // ChatML (Qwen3.6) counterpart of drop_thinking = false
  return chat::render_prompt_marked(c, ro);
}

std::string Agent::title() const {
  for (const auto& m : conv_.messages) {
    if (m.role != chat::Role::User || !m.content) continue;
    std::string t = *m.content;
    for (char& ch : t)
      if (ch == '\n' || ch == '\t' || ch == '\r') ch = ' ';
    if (t.size() > 60) {
      size_t cut = 57;
      while (cut > 0 && (static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) --cut;
      t = t.substr(0, cut) + "...";
    }
    return t;
  }
  return "";
}


int Agent::next_call_number() const {
  int n = 0;
  for (const auto& m : conv_.messages) n += static_cast<int>(m.tool_calls.size());
  return n + 1;
}

PrefillStats Agent::sync(const std::atomic<bool>* cancel) {
  const chat::MarkedText full = render_marked(conv_);
  const std::string& h = model_.text();
  EvalControl ctl;
  ctl.cancel = cancel;
  ctl.progress = [this](int64_t done, int64_t total) { sink_.prefill_progress(done, total); };
  auto append_after = [&](size_t offset, PrefillStats& st) {
    const auto rest = chat::marked_suffix(full, offset);
    if (!rest) return false;
    if (!rest->text.empty()) st = model_.append(*rest, ctl);
    st.reused = model_.n_past() - st.evaluated;
    return true;
  };
  PrefillStats st;
  bool resynced = false;
  bool done = false;
  if (full.text.size() >= h.size() && full.text.compare(0, h.size(), h) == 0) {
    // The normal case: the rendering continues the history.
    done = append_after(h.size(), st);
  } else if (synced_msgs_ > 0 && synced_msgs_ <= conv_.messages.size() &&
             conv_.messages[synced_msgs_ - 1].role == chat::Role::Assistant) {
    // The rendering of earlier turns changed (a thinking-mode switch): when the conversation
    // as of the last generation, rendered now, is a prefix of the new rendering, append what
    // follows it, so earlier turns stay as they were written.
    chat::Conversation prev;
    prev.messages.assign(conv_.messages.begin(), conv_.messages.begin() + static_cast<long>(synced_msgs_));
    prev.messages.back().no_eos = true;
    const std::string old = render(prev);
    if (full.text.compare(0, old.size(), old) == 0) done = append_after(old.size(), st);
  }
  if (!done) {
    st = model_.resync(full, ctl);
    resynced = true;
    ++resyncs_;
  }
  sink_.prefill(st, resynced);
  return st;
}

namespace {

// Collects one model turn from the streamed pieces (DSML or ChatML tool calls, by format).
struct TurnParse {
  TurnParse(bool thinking, chat::ChatFormat format, const std::vector<chat::Json>& tools) : thinking(thinking) {
    if (format == chat::ChatFormat::ChatML) chatml.emplace(thinking, tools);
    else dsml.emplace(thinking);
  }
  bool thinking;
  std::optional<chat::DsmlStreamParser> dsml;
  std::optional<chat::ChatmlStreamParser> chatml;
  std::vector<chat::ToolCall> chatml_calls;  // ChatML: completed calls (DSML: dsml->calls())
  void feed(std::string_view piece) { dsml ? dsml->feed(piece, evs) : chatml->feed(piece, evs); }
  void finish() { dsml ? dsml->finish(evs) : chatml->finish(evs); }
  std::string raw, reasoning, content, block, error;
  bool in_reasoning = true;
  bool stop = false;
  std::vector<chat::DsmlEvent> evs;

  void handle(EventSink& sink) {
    using K = chat::DsmlEventKind;
    for (const auto& ev : evs) {
      switch (ev.kind) {
        case K::Reasoning: reasoning += ev.text; sink.reasoning(ev.text); break;
        case K::ReasoningEnd: in_reasoning = false; break;
        case K::Text: content += ev.text; sink.text(ev.text); break;
        case K::ToolCallEnd:
          if (chatml) {
            chat::ToolCall c;
            c.name = ev.name;
            try {
              c.arguments = chat::Json::parse(ev.text);
            } catch (const std::exception& e) {
              c.arguments_valid = false;
              c.arguments_text = e.what();
            }
            chatml_calls.push_back(std::move(c));
          }
          break;
        case K::ToolCallsEnd: block = ev.text; stop = true; break;
        case K::Eos: stop = true; break;
        case K::Error:
          if (error.empty()) error = ev.text;
          stop = true;
          break;
        default: break;
      }
      if (stop) break;
    }
    evs.clear();
  }
};

}  // namespace

RunReport Agent::run(const std::string& user_text, const std::atomic<bool>* cancel) {
  RunReport rep;
  chat::Message u;
  u.role = chat::Role::User;
  u.content = user_text;
  conv_.messages.push_back(std::move(u));
  auto finish = [&](Outcome o) {
    rep.outcome = o;
    sink_.run_end(rep);
    return rep;
  };
  try {
    for (int turn = 1;; ++turn) {
      const PrefillStats ps = sync(cancel);
      rep.evaluated += ps.evaluated;
      rep.replayed += ps.replayed;
      rep.reused += turn == 1 ? ps.reused : 0;
      rep.prefill_s += ps.seconds;
      if (ps.cancelled) return finish(Outcome::Cancelled);

      const bool thinking = opts_.thinking != chat::ThinkingMode::None;
      std::vector<chat::Json> schemas;
      for (const auto& m : conv_.messages) schemas.insert(schemas.end(), m.tools.begin(), m.tools.end());
      TurnParse tp(thinking, opts_.format, schemas);
      GenParams gp;
      gp.max_tokens = opts_.max_tokens;
      gp.cancel = cancel;
      const GenStats gs = model_.generate(gp, [&](std::string_view piece) {
        tp.raw.append(piece);
        tp.feed(piece);
        tp.handle(sink_);
        return !tp.stop;
      });
      if (gs.reason != GenStop::Cancelled && !tp.stop) {
        tp.finish();
        tp.handle(sink_);
        // Cut by the token limit or a full context: an open block or reasoning is expected.
        if (gs.reason != GenStop::StopToken) tp.error.clear();
      }
      rep.turns = turn;
      rep.generated += gs.generated;
      rep.generate_s += gs.seconds;

      // The assistant message, exactly as produced.
      chat::Message a;
      a.role = chat::Role::Assistant;
      const bool complete_block = !tp.block.empty() && tp.error.empty();
      if (complete_block) {
        if (thinking) a.reasoning_content = tp.reasoning;
        a.content = tp.content;
        a.raw_tool_block = tp.block;
        int n = next_call_number();
        for (auto& c : tp.chatml_calls) {
          c.id = fmt::format("call_{}", n++);
          a.tool_calls.push_back(std::move(c));
        }
        for (const auto& c : tp.dsml ? tp.dsml->calls() : std::vector<chat::DsmlCall>{}) {
          try {
            a.tool_calls.push_back(chat::tool_call_from_dsml(c, fmt::format("call_{}", n++)));
          } catch (const std::exception& e) {
            chat::ToolCall bad;
            bad.id = fmt::format("call_{}", n - 1);
            bad.name = c.name;
            bad.arguments_valid = false;
            bad.arguments_text = e.what();
            a.tool_calls.push_back(std::move(bad));
          }
        }
      } else {
        // An answer, or a turn cut short (Ctrl+C, token limit, malformed DSML): keep the raw
        // bytes; the renderer closes open reasoning with </think>.
        const size_t close = thinking ? tp.raw.find(chat::mark::kThinkClose) : std::string::npos;
        if (thinking && close == std::string::npos) {
          a.reasoning_content = tp.raw;
          a.content = "";
        } else if (thinking) {
          a.reasoning_content = tp.raw.substr(0, close);
          a.content = tp.raw.substr(close + chat::mark::kThinkClose.size());
        } else {
          a.content = tp.raw;
        }
      }
      conv_.messages.push_back(a);
      synced_msgs_ = conv_.messages.size();

      TurnReport tr;
      tr.turn = turn;
      tr.gen = gs;
      tr.n_past = model_.n_past();
      tr.tool_calls = static_cast<int>(a.tool_calls.size());
      tr.parse_error = tp.error;
      sink_.turn_end(tr);

      if (gs.reason == GenStop::Cancelled) return finish(Outcome::Cancelled);
      if (gs.reason == GenStop::ContextFull) {
        rep.error = fmt::format("the context ({} tokens) is full", model_.n_ctx());
        return finish(Outcome::ContextFull);
      }
      if (!tp.error.empty() && gs.reason != GenStop::MaxTokens) {
        // Tell the model and let it try again (this counts as a turn).
        chat::Message fix;
        fix.role = chat::Role::User;
        fix.content = fmt::format("[ds4-agent] Your tool-call block could not be parsed: {}. Write it again.", tp.error);
        sink_.notice(*fix.content);
        conv_.messages.push_back(std::move(fix));
        if (turn >= opts_.max_turns) return finish(Outcome::TurnLimit);
        continue;
      }
      if (a.tool_calls.empty()) return finish(Outcome::Answered);

      bool interrupted = false;
      for (const auto& call : a.tool_calls) {
        sink_.tool_call(call);
        ToolOutcome r;
        if (interrupted || (cancel && cancel->load())) {
          interrupted = true;
          r.ok = false;
          r.interrupted = true;
          r.text = "error: not run: the user interrupted (Ctrl+C)";
        } else if (!call.arguments_valid) {
          r.ok = false;
          r.text = fmt::format("error: {}: the arguments are not valid: {}", call.name, call.arguments_text);
        } else {
          r = tools_.run(call, host_, cancel);
          if (r.interrupted) interrupted = true;
        }
        sink_.tool_result(call, r);
        chat::Message t;
        t.role = chat::Role::Tool;
        t.tool_call_id = call.id;
        t.content = r.text;
        conv_.messages.push_back(std::move(t));
      }
      if (interrupted || (cancel && cancel->load())) return finish(Outcome::Cancelled);
      if (turn >= opts_.max_turns) return finish(Outcome::TurnLimit);
    }
  } catch (const ContextOverflow& e) {
    rep.error = e.what();
    return finish(Outcome::ContextFull);
  } catch (const std::exception& e) {
    rep.error = e.what();
    return finish(Outcome::Error);
  }
}

}  // namespace ds4::agent
