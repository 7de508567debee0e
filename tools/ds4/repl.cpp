// Interactive chat: libedit line editing and history on a terminal, plain line reading
// otherwise (scripts can pipe a conversation in). Ctrl+C during an answer stops it and
// returns to the prompt.
#include <editline/readline.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "chat_runner.h"
#include "core/error.h"

namespace ds4::tools {

std::string read_text_file(const std::string& path, const char* what);

namespace {

constexpr const char* kHelp =
    "Commands:\n"
    "  /help          this list\n"
    "  /think         reason before answering (thinking mode high)\n"
    "  /think-max     maximum reasoning effort (needs a context of at least 393216)\n"
    "  /nothink       answer directly\n"
    "  /ctx N         change the context size to N tokens (keeps the conversation if it fits)\n"
    "  /read FILE     send the contents of FILE as your message\n"
    "  /save FILE     save the session (tokens and model state) to FILE\n"
    "  /load FILE     continue a session saved with /save\n"
    "  /steer A [B]   directional steering scales (attn A, ffn B; one number sets both) for the\n"
    "                 following tokens; the cached state is kept (needs --dir-steering-file)\n"
    "  /new           start a new conversation\n"
    "  /quit, /exit   leave\n"
    "Ctrl+C stops an answer; Ctrl+D at the prompt leaves.\n";

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool read_line(bool tty, std::string& out) {
  if (tty) {
    char* l = readline("> ");
    if (!l) return false;
    out = l;
    std::free(l);
    return true;
  }
  return static_cast<bool>(std::getline(std::cin, out));
}

// "/cmd arg": the argument after the command word, or empty.
std::string arg_of(const std::string& line, size_t cmd_len) { return trim(line.substr(cmd_len)); }

bool is_cmd(const std::string& line, const char* cmd) {
  const std::string c(cmd);
  return line.rfind(c, 0) == 0 && (line.size() == c.size() || line[c.size()] == ' ' || line[c.size()] == '\t');
}

}  // namespace

int run_repl(ChatRunner& runner, const ChatCliOptions& o) {
  const bool tty = isatty(STDIN_FILENO);
  std::string hist;
  if (tty) {
    if (const char* home = std::getenv("HOME")) hist = std::string(home) + "/.ds4_history";
    using_history();
    if (!hist.empty()) read_history(hist.c_str());
    fmt::print(stderr, "ds4 chat: /help for commands, Ctrl+D to quit.\n");
  }
  if (runner.has_disk_cache()) {
    if (const int64_t n = runner.resume_from_disk())
      fmt::print(stderr, "ds4: resumed the last conversation ({} tokens) from {} (/new starts over)\n", n, o.kv_disk_dir);
  }
  auto run_turn = [&](const std::string& text) {
    install_interrupt_handler();
    try {
      const TurnStats st = runner.turn(text, stdout);
      restore_default_interrupt();
      std::fputc('\n', stdout);
      std::fflush(stdout);
      runner.print_stats(st);
    } catch (...) {
      restore_default_interrupt();
      throw;
    }
  };
  std::string line;
  while (read_line(tty, line)) {
    line = trim(line);
    if (line.empty()) continue;
    if (tty) {
      add_history(line.c_str());
      if (!hist.empty()) write_history(hist.c_str());
    }
    try {
      if (line == "/help") {
        fmt::print("{}", kHelp);
      } else if (line == "/think") {
        runner.set_thinking(chat::ThinkingMode::High);
        fmt::print("Thinking mode: high.\n");
      } else if (line == "/think-max") {
        runner.set_thinking(chat::ThinkingMode::Max);
        fmt::print("Thinking mode: max{}.\n",
                   runner.session().n_ctx() >= 393216 ? "" : " (context below 393216: behaves as high)");
      } else if (line == "/nothink") {
        runner.set_thinking(chat::ThinkingMode::None);
        fmt::print("Thinking mode: none.\n");
      } else if (is_cmd(line, "/ctx")) {
        const std::string a = arg_of(line, 4);
        char* end = nullptr;
        const long long n = std::strtoll(a.c_str(), &end, 10);
        if (a.empty() || *end != '\0' || n <= 0) fail("/ctx needs a positive integer");
        runner.set_ctx(n);
        fmt::print("Context: {} tokens.\n", runner.session().n_ctx());
      } else if (is_cmd(line, "/read")) {
        const std::string path = arg_of(line, 5);
        if (path.empty()) fail("/read needs a file path");
        run_turn(read_text_file(path, "/read"));
      } else if (is_cmd(line, "/save")) {
        const std::string path = arg_of(line, 5);
        if (path.empty()) fail("/save needs a file path");
        runner.save(path);
        fmt::print("Saved {} tokens to {}.\n", runner.session().n_past(), path);
      } else if (is_cmd(line, "/load")) {
        const std::string path = arg_of(line, 5);
        if (path.empty()) fail("/load needs a file path");
        runner.load(path);
        fmt::print("Loaded {} tokens from {}.\n", runner.session().n_past(), path);
      } else if (is_cmd(line, "/steer")) {
        const std::string a = arg_of(line, 6);
        float v[2] = {0, 0};
        int n = 0;
        size_t at = 0;
        while (n < 3) {
          const size_t b = a.find_first_not_of(" \t", at);
          if (b == std::string::npos) break;
          const size_t e = a.find_first_of(" \t", b);
          const std::string w = a.substr(b, e == std::string::npos ? std::string::npos : e - b);
          char* end = nullptr;
          const float x = std::strtof(w.c_str(), &end);
          if (*end != '\0' || n == 2) fail("/steer needs one or two numbers (attn [ffn]), got '{}'", a);
          v[n++] = x;
          at = e == std::string::npos ? a.size() : e;
        }
        if (n == 0) {
          fmt::print("Steering: attn {}, ffn {}.\n", runner.session().steering_attn(), runner.session().steering_ffn());
        } else {
          runner.set_steering(v[0], n == 2 ? v[1] : v[0]);
          fmt::print("Steering: attn {}, ffn {} from the next token on.\n", runner.session().steering_attn(),
                     runner.session().steering_ffn());
        }
      } else if (line == "/new") {
        runner.start_over();
        fmt::print("New conversation.\n");
      } else if (line == "/quit" || line == "/exit") {
        break;
      } else if (line[0] == '/') {
        fmt::print(stderr, "ds4: unknown command {} (/help lists them)\n", line);
      } else {
        run_turn(line);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "ds4: error: {}\n", e.what());
    }
  }
  runner.save_on_exit();
  return 0;
}

}  // namespace ds4::tools
