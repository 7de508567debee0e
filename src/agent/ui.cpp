#include "agent/ui.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <iostream>

namespace ds4::agent {

using chat::Json;

namespace {
std::atomic<bool> g_interrupt{false};
extern "C" void on_sigint(int) { g_interrupt.store(true); }

constexpr const char* kDim = "\033[2m";
constexpr const char* kBold = "\033[1m";
constexpr const char* kCyan = "\033[36m";
constexpr const char* kRed = "\033[31m";
constexpr const char* kGreen = "\033[32m";
constexpr const char* kYellow = "\033[33m";
constexpr const char* kReset = "\033[0m";

// Model and tool output is untrusted: control bytes (but tab and newline) could be escape
// sequences on a terminal; show them as '?'.
std::string sanitize(std::string_view s) {
  std::string o(s);
  for (char& ch : o)
    if ((static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f) ch = '?';
  return o;
}

std::string shorten(std::string s, size_t n) {
  if (s.size() <= n) return s;
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1; }

// Length of the prefix of `s` that ends on a character boundary.
size_t complete_prefix(std::string_view s) {
  size_t i = s.size();
  size_t back = 0;
  while (i > 0 && back < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i, ++back;
  if (i == 0) return s.size();
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  if (lead >= 0xC0 && utf8_len(lead) > back + 1) return i - 1;  // incomplete sequence at the end
  return s.size();
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

std::atomic<bool>& interrupt_flag() { return g_interrupt; }

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

void restore_default_interrupt() { std::signal(SIGINT, SIG_DFL); }

bool read_stdin_line(bool tty, std::string& out) {
  out.clear();
  if (!tty) return static_cast<bool>(std::getline(std::cin, out));
  for (;;) {
    char c;
    const ssize_t n = ::read(0, &c, 1);
    if (n == 1) {
      if (c == '\n') return true;
      out += c;
      continue;
    }
    if (n < 0 && errno == EINTR && !g_interrupt.load()) continue;
    return false;
  }
}

// ---- terminal ----

TerminalUi::TerminalUi(std::FILE* out, std::FILE* err, bool color, bool progress)
    : out_(out), err_(err), color_(color), progress_(progress) {}

void TerminalUi::put(std::string_view s, const char* style) {
  if (s.empty()) return;
  const std::string clean = sanitize(s);
  if (color_ && style) std::fputs(style, out_);
  std::fwrite(clean.data(), 1, clean.size(), out_);
  if (color_ && style) std::fputs(kReset, out_);
  at_line_start_ = clean.back() == '\n';
  std::fflush(out_);
}

void TerminalUi::newline_if_needed() {
  if (!at_line_start_) put("\n");
}

void TerminalUi::prefill_progress(int64_t done, int64_t total) {
  if (!progress_ || total < 256) return;
  const int w = 30;
  const int fill = static_cast<int>(static_cast<double>(done) / static_cast<double>(total) * w);
  fmt::print(err_, "\r\033[Kprefill [{}{}] {}/{}", std::string(static_cast<size_t>(fill), '='),
             std::string(static_cast<size_t>(w - fill), ' '), done, total);
  std::fflush(err_);
  progress_shown_ = true;
}

void TerminalUi::prefill(const PrefillStats& s, bool resynced) {
  if (progress_shown_) {
    fmt::print(err_, "\r\033[K");
    progress_shown_ = false;
  }
  if (resynced) notice(fmt::format("history re-tokenized: {} tokens kept, {} evaluated", s.reused, s.evaluated));
}

void TerminalUi::reasoning(std::string_view t) {
  reasoning_open_ = true;
  put(t, kDim);
}

void TerminalUi::text(std::string_view t) {
  if (reasoning_open_) {
    newline_if_needed();
    reasoning_open_ = false;
  }
  put(t);
}

void TerminalUi::tool_call(const chat::ToolCall& c) {
  reasoning_open_ = false;
  newline_if_needed();
  std::string args;
  if (c.name == "run_command" && c.arguments.contains("command") && c.arguments["command"].is_string()) {
    args = "$ " + c.arguments["command"].get<std::string>();
  } else if (c.arguments.is_object()) {
    for (const auto& [k, v] : c.arguments.items()) {
      std::string val = v.is_string() ? v.get<std::string>() : dump(v);
      const size_t lines = static_cast<size_t>(std::count(val.begin(), val.end(), '\n'));
      if (lines > 1 || (lines == 1 && val.back() != '\n')) val = fmt::format("<{} lines>", lines + (val.back() != '\n'));
      for (char& ch : val)
        if (ch == '\n') ch = ' ';
      args += fmt::format("{}{}={}", args.empty() ? "" : " ", k, shorten(val, 120));
    }
  } else {
    args = shorten(c.arguments_text, 200);
  }
  put("● ", kCyan);
  put(c.name, kBold);
  put(" " + args + "\n");
}

void TerminalUi::diff(std::string_view d) {
  size_t at = 0;
  while (at < d.size()) {
    size_t nl = d.find('\n', at);
    const size_t e = nl == std::string_view::npos ? d.size() : nl + 1;
    const std::string_view line = d.substr(at, e - at);
    const char* style = line.rfind("+++", 0) == 0 || line.rfind("---", 0) == 0 ? kBold
                        : line[0] == '+'                                       ? kGreen
                        : line[0] == '-'                                       ? kRed
                        : line[0] == '@'                                       ? kCyan
                                                                               : nullptr;
    put(line, style);
    at = e;
  }
  newline_if_needed();
}

void TerminalUi::command_started(std::string_view cmd) { put("  running... (Ctrl+C stops it)\n", kDim); }

void TerminalUi::tool_result(const chat::ToolCall& c, const ToolOutcome& r) {
  std::string_view t = r.text;
  size_t lines = 0, at = 0, shown_end = 0;
  while (at < t.size()) {
    size_t nl = t.find('\n', at);
    const size_t e = nl == std::string_view::npos ? t.size() : nl + 1;
    if (++lines <= 8) shown_end = e;
    at = e;
  }
  std::string shown(t.substr(0, shown_end));
  if (!shown.empty() && shown.back() != '\n') shown += '\n';
  std::string body;
  for (size_t i = 0, s = 0; i <= shown.size(); ++i) {
    if (i == shown.size() || shown[i] == '\n') {
      if (i > s) body += "  │ " + shorten(shown.substr(s, i - s), 200) + "\n";
      s = i + 1;
    }
  }
  if (lines > 8) body += fmt::format("  │ ... ({} more lines)\n", lines - 8);
  put(body, r.ok ? kDim : kYellow);
}

void TerminalUi::turn_end(const TurnReport& t) {
  if (!t.parse_error.empty()) notice("malformed tool call: " + t.parse_error);
}

void TerminalUi::run_end(const RunReport& r) {
  newline_if_needed();
  const double gps = r.generate_s > 0 ? static_cast<double>(r.generated) / r.generate_s : 0.0;
  const double pps = r.prefill_s > 0 ? static_cast<double>(r.evaluated + r.replayed) / r.prefill_s : 0.0;
  std::string line = fmt::format("[{} turn{} | prompt {} new tokens ({} reused), {:.1f} t/s | generated {}, {:.1f} t/s | {}",
                                 r.turns, r.turns == 1 ? "" : "s", r.evaluated, r.reused, pps, r.generated, gps,
                                 to_string(r.outcome));
  if (!r.error.empty()) line += ": " + r.error;
  line += "]\n";
  std::fflush(out_);
  if (color_) fmt::print(err_, "{}{}{}", kDim, line, kReset);
  else fmt::print(err_, "{}", line);
  std::fflush(err_);
}

void TerminalUi::notice(std::string_view t) {
  newline_if_needed();
  put(fmt::format("[{}]\n", t), kYellow);
}

// ---- JSON lines ----

void JsonLines::emit(const Json& j) {
  flush_stream();
  const std::string s = dump(j);
  std::fputs(s.c_str(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

void JsonLines::stream(const char* kind, std::string_view text) {
  if (kind_ != kind) flush_stream();
  kind_ = kind;
  pending_.append(text);
  const size_t n = complete_prefix(pending_);
  if (n == 0) return;
  Json j = Json::object();
  j["event"] = kind_;
  j["text"] = pending_.substr(0, n);
  pending_.erase(0, n);
  const std::string s = dump(j);
  std::fputs(s.c_str(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

void JsonLines::flush_stream() {
  if (pending_.empty()) return;
  Json j = Json::object();
  j["event"] = kind_;
  j["text"] = pending_;
  pending_.clear();
  const std::string s = dump(j);
  std::fputs(s.c_str(), out_);
  std::fputc('\n', out_);
}

void JsonLines::prefill(const PrefillStats& s, bool resynced) {
  emit(Json{{"event", "prefill"},     {"reused", s.reused},       {"replayed", s.replayed},
            {"evaluated", s.evaluated}, {"cancelled", s.cancelled}, {"resynced", resynced},
            {"seconds", s.seconds}});
}
void JsonLines::reasoning(std::string_view t) { stream("reasoning", t); }
void JsonLines::text(std::string_view t) { stream("text", t); }
void JsonLines::tool_call(const chat::ToolCall& c) {
  Json j = Json::object();
  j["event"] = "tool_call";
  j["id"] = c.id;
  j["name"] = c.name;
  j["arguments"] = c.arguments;
  emit(j);
}
void JsonLines::diff(std::string_view d) { emit(Json{{"event", "diff"}, {"text", d}}); }
void JsonLines::confirm_asked(std::string_view q) { emit(Json{{"event", "confirm"}, {"question", q}}); }
void JsonLines::confirm_answer(Answer a) {
  emit(Json{{"event", "confirm_answer"}, {"answer", a == Answer::Yes ? "yes" : a == Answer::No ? "no" : "always"}});
}
void JsonLines::command_started(std::string_view c) { emit(Json{{"event", "command_started"}, {"command", c}}); }
void JsonLines::tool_result(const chat::ToolCall& c, const ToolOutcome& r) {
  emit(Json{{"event", "tool_result"}, {"id", c.id},           {"name", c.name},
            {"ok", r.ok},             {"declined", r.declined}, {"interrupted", r.interrupted},
            {"output", r.text}});
}
void JsonLines::turn_end(const TurnReport& t) {
  Json j{{"event", "turn_end"},   {"turn", t.turn},           {"generated", t.gen.generated},
         {"reason", to_string(t.gen.reason)}, {"n_past", t.n_past}, {"tool_calls", t.tool_calls}};
  if (!t.parse_error.empty()) j["parse_error"] = t.parse_error;
  emit(j);
}
void JsonLines::run_end(const RunReport& r) {
  Json j{{"event", "done"},       {"outcome", to_string(r.outcome)}, {"turns", r.turns},
         {"evaluated", r.evaluated}, {"reused", r.reused},           {"generated", r.generated},
         {"prefill_seconds", r.prefill_s}, {"generate_seconds", r.generate_s}};
  if (!r.error.empty()) j["error"] = r.error;
  emit(j);
}
void JsonLines::notice(std::string_view t) { emit(Json{{"event", "notice"}, {"text", t}}); }

// ---- confirmation ----

Answer StdinHost::confirm(const std::string& question) {
  sink_.confirm_asked(question);
  for (;;) {
    fmt::print(stderr, "{} [y/n/a] ", question);
    std::fflush(stderr);
    std::string line;
    if (!read_stdin_line(tty_, line)) {
      fmt::print(stderr, "\n");
      sink_.confirm_answer(Answer::No);
      return Answer::No;
    }
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    Answer a;
    if (line == "y" || line == "yes" || line == "Y") a = Answer::Yes;
    else if (line == "n" || line == "no" || line == "N") a = Answer::No;
    else if (line == "a" || line == "always" || line == "A") a = Answer::Always;
    else continue;
    sink_.confirm_answer(a);
    return a;
  }
}

}  // namespace ds4::agent
