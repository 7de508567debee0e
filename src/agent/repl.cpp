// The interactive agent: libedit line editing and history on a terminal, plain line reading
// otherwise (tests pipe a conversation in). Ctrl+C stops generation or a running command and
// returns to the prompt; Ctrl+D or /quit leaves (saving the session when it holds anything).
#include <editline/readline.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#include "agent/app_impl.h"
#include "core/error.h"

namespace ds4::agent {

namespace {

constexpr const char* kHelp =
    "Commands:\n"
    "  /help          this list\n"
    "  /think         reason before answering (thinking mode high)\n"
    "  /nothink       answer directly\n"
    "  /save          save this session (model state, text, tool calls) under ~/.ds4/agent/\n"
    "  /list          saved sessions (* marks this one)\n"
    "  /switch ID     save this session and continue the saved session ID (an id prefix is enough)\n"
    "  /del ID        delete a saved session\n"
    "  /strip ID      drop a saved session's KV payload, keep its text (resuming re-evaluates it)\n"
    "  /new           save this session and start an empty one\n"
    "  /ctx           context usage\n"
    "  /quit, /exit   save and leave\n"
    "Anything else is a request for the agent. Ctrl+C stops generation or a running command;\n"
    "Ctrl+D at the prompt leaves.\n";

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool is_cmd(const std::string& line, const char* cmd) {
  const std::string c(cmd);
  return line.rfind(c, 0) == 0 && (line.size() == c.size() || line[c.size()] == ' ' || line[c.size()] == '\t');
}

std::string arg_of(const std::string& line, const char* cmd) { return trim(line.substr(std::string(cmd).size())); }

}  // namespace

int App::run_repl() {
  std::string hist;
  if (stdin_tty_) {
    if (const char* home = std::getenv("HOME")) hist = std::string(home) + "/.ds4_agent_history";
    using_history();
    if (!hist.empty()) read_history(hist.c_str());
    fmt::print(stderr, "ds4-agent in {} ({}): /help for commands, Ctrl+D to quit.\n", wd_->root().string(),
               model_->model_name());
  }
  auto read_line = [&](std::string& out) {
    if (!stdin_tty_) return read_stdin_line(false, out);
    char* l = readline("> ");
    if (!l) return false;
    out = l;
    std::free(l);
    return true;
  };
  auto needs_id = [](const std::string& a, const char* cmd) {
    if (a.empty()) fail("{} needs a session id (/list shows them)", cmd);
    return a;
  };
  std::string line;
  bool dirty = false;  // anything to save at exit
  while (read_line(line)) {
    line = trim(line);
    if (line.empty()) continue;
    if (stdin_tty_) {
      add_history(line.c_str());
      if (!hist.empty()) write_history(hist.c_str());
    }
    try {
      if (line == "/help") {
        say(kHelp);
      } else if (line == "/think") {
        agent_->set_thinking(chat::ThinkingMode::High);
        say("Thinking mode: high.");
      } else if (line == "/nothink") {
        agent_->set_thinking(chat::ThinkingMode::None);
        say("Thinking mode: none.");
      } else if (line == "/save") {
        save();
        dirty = false;
      } else if (line == "/list") {
        list_sessions();
      } else if (is_cmd(line, "/switch")) {
        const std::string id = needs_id(arg_of(line, "/switch"), "/switch");
        const std::string target = store_->resolve(id);
        if (dirty) save();
        resume(target);
        dirty = false;
      } else if (is_cmd(line, "/del")) {
        del(needs_id(arg_of(line, "/del"), "/del"));
      } else if (is_cmd(line, "/strip")) {
        strip(needs_id(arg_of(line, "/strip"), "/strip"));
      } else if (line == "/new") {
        if (dirty) save();
        new_session();
        // The model keeps its state until the next request re-syncs it to the new conversation.
        dirty = false;
        say(fmt::format("New session {}.", id_));
      } else if (line == "/ctx") {
        print_ctx();
      } else if (line == "/quit" || line == "/exit") {
        break;
      } else if (line[0] == '/') {
        fmt::print(stderr, "ds4-agent: unknown command {} (/help lists them)\n", line);
      } else {
        run_request(line);
        dirty = true;
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "ds4-agent: error: {}\n", e.what());
    }
  }
  if (dirty) {
    try {
      save();
    } catch (const std::exception& e) {
      fmt::print(stderr, "ds4-agent: error: {}\n", e.what());
      return 1;
    }
  }
  return 0;
}

}  // namespace ds4::agent
