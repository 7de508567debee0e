// The interactive chat: through a pipe (plain line reading) and through tmux (a real
// pseudo-terminal: libedit, Ctrl+C). Counts come from the --trace file, which records every
// prefill (reused / evaluated tokens) and every generated token.
#include <chrono>
#include <cstring>
#include <thread>

#include "chat/renderer.h"
#include "cli_harness.h"
#include "ds4/tokenizer.h"

namespace ds4::test {
namespace {

using namespace std::chrono_literals;

// Byte-level vocabulary: a later user turn "T" in --nothink mode appends
// EOS <｜User｜> T <｜Assistant｜> </think> = 4 + |T| tokens.
constexpr int64_t kFirstTurnHello = 9;  // BOS <｜User｜> hello <｜Assistant｜> </think>

std::vector<std::vector<int>> turn_tokens(const std::vector<nlohmann::json>& trace) {
  std::vector<std::vector<int>> turns(1);
  for (const auto& e : trace) {
    if (e["event"] == "token") turns.back().push_back(e["id"]);
    if (e["event"] == "turn_end") turns.emplace_back();
  }
  turns.pop_back();
  return turns;
}

TEST(CliRepl, PipedTurnsPrefillOnlyNewTokensAndSaveLoadRestoresTheSession) {
  const std::string tr = scratch().path("pipe.trace"), sv = scratch().path("pipe.ds4s");
  const std::string input = "hello\n/save " + sv + "\nagain\n/load " + sv + "\nagain\n/ctx 100\n/quit\n";
  const auto r = run_ds4("-m " + scratch().model + " -t 2 --nothink --temp 0 -n 8 --ignore-eos --trace " + tr, &input);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto t = read_trace(tr);
  const auto pre = events(t, "prefill");
  ASSERT_EQ(pre.size(), 3u);
  EXPECT_EQ(pre[0]["reused"], 0);
  EXPECT_EQ(pre[0]["evaluated"], kFirstTurnHello);
  const int64_t after1 = kFirstTurnHello + 8;
  EXPECT_EQ(pre[1]["reused"], after1);
  EXPECT_EQ(pre[1]["replayed"], 0);
  EXPECT_EQ(pre[1]["evaluated"], 4 + 5);
  // After /load the session is back at the end of turn 1: the same turn again reuses it all
  // and, greedy on an identical state, answers identically.
  EXPECT_EQ(pre[2]["reused"], after1);
  EXPECT_EQ(pre[2]["evaluated"], 4 + 5);
  const auto turns = turn_tokens(t);
  ASSERT_EQ(turns.size(), 3u);
  EXPECT_EQ(turns[1], turns[2]);
  EXPECT_NE(r.out.find("Saved 17 tokens to " + sv), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Loaded 17 tokens from " + sv), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Context: 100 tokens."), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[prompt 9 tokens (17 reused)"), std::string::npos) << r.err;
}

TEST(CliRepl, CommandErrorsKeepTheChatGoing) {
  const std::string input = "/load /nonexistent/x.ds4s\n/ctx zero\n/bogus\n/help\n/quit\n";
  const auto r = run_ds4("-m " + scratch().model + " -t 2 --nothink", &input);
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.err.find("/nonexistent/x.ds4s: cannot open session payload"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/ctx needs a positive integer"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown command /bogus"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("/save FILE"), std::string::npos) << r.out;
}

// tmux on a private socket; the pane runs ds4 and stays open after it exits.
class Tmux {
 public:
  explicit Tmux(const std::string& command) : sock_("ds4test" + std::to_string(::getpid()) + "_" + std::to_string(n_++)) {
    ok_ = sh("new-session -d -x 160 -y 50 " + quote("env HOME=" + scratch().dir.string() + " " + command +
                                                    "; echo EXITED $?; sleep 60")) == 0;
  }
  ~Tmux() { sh("kill-server"); }
  bool ok() const { return ok_; }
  void type(const std::string& text) { sh("send-keys -t 0 -l " + quote(text)); sh("send-keys -t 0 Enter"); }
  void key(const std::string& k) { sh("send-keys -t 0 " + k); }
  std::string screen() {
    const std::string f = scratch().path(sock_ + ".pane");
    sh("capture-pane -p -J -S -5000 -t 0 > " + f);
    return read_file(f);
  }
  // Waits (up to 20 s) until pred() holds.
  template <class P>
  static bool wait_for(P pred) {
    for (int i = 0; i < 400; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

 private:
  static std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  }
  int sh(const std::string& args) {
    return std::system(("tmux -f /dev/null -L " + sock_ + " " + args + " 2>/dev/null").c_str());
  }
  static inline int n_ = 0;
  std::string sock_;
  bool ok_ = false;
};

TEST(CliRepl, TerminalTurnsSaveLoadAndStats) {
  if (std::system("command -v tmux >/dev/null") != 0) GTEST_SKIP() << "tmux not installed (scripts/setup.sh)";
  const std::string tr = scratch().path("tty.trace"), sv = scratch().path("tty.ds4s");
  Tmux t(std::string(DS4_BIN) + " -m " + scratch().model + " -t 2 --nothink --temp 0 -n 8 --ignore-eos --trace " + tr);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("/help for commands") != std::string::npos; }))
      << t.screen();
  auto turns_done = [&](size_t n) { return events(read_trace(tr), "turn_end").size() >= n; };
  t.type("hello");
  ASSERT_TRUE(Tmux::wait_for([&] { return turns_done(1); })) << t.screen();
  t.type("/save " + sv);
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("Saved 17 tokens") != std::string::npos; })) << t.screen();
  t.type("again");
  ASSERT_TRUE(Tmux::wait_for([&] { return turns_done(2); })) << t.screen();
  t.type("/load " + sv);
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("Loaded 17 tokens") != std::string::npos; })) << t.screen();
  t.type("again");
  ASSERT_TRUE(Tmux::wait_for([&] { return turns_done(3); })) << t.screen();
  ASSERT_TRUE(Tmux::wait_for([&] {
    const auto s = t.screen();
    size_t n = 0;
    for (size_t at = 0; (at = s.find("[prompt 9 tokens (17 reused)", at)) != std::string::npos; ++at) ++n;
    return n == 2;  // turn 2 and turn 3 (after /load)
  })) << t.screen();
  t.type("/quit");
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("EXITED 0") != std::string::npos; })) << t.screen();
  const auto pre = events(read_trace(tr), "prefill");
  ASSERT_EQ(pre.size(), 3u);
  EXPECT_EQ(pre[0]["evaluated"], kFirstTurnHello);
  EXPECT_EQ(pre[1]["evaluated"], 9);
  EXPECT_EQ(pre[1]["reused"], 17);
  const auto turns = turn_tokens(read_trace(tr));
  EXPECT_EQ(turns[1], turns[2]);
}

TEST(CliRepl, CtrlCStopsAnAnswerAndReturnsToThePrompt) {
  if (std::system("command -v tmux >/dev/null") != 0) GTEST_SKIP() << "tmux not installed (scripts/setup.sh)";
  const std::string tr = scratch().path("ctrlc.trace"), sv = scratch().path("ctrlc.ds4s");
  // An answer that would run for minutes: no token limit, no EOS, a context of 2M tokens.
  Tmux t(std::string(DS4_BIN) + " -m " + scratch().model + " -t 2 --nothink --temp 0 --ignore-eos --ctx 2000000 --trace " + tr);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("/help for commands") != std::string::npos; }));
  t.type("hello");
  ASSERT_TRUE(Tmux::wait_for([&] { return events(read_trace(tr), "token").size() >= 200; })) << t.screen();
  t.key("C-c");
  ASSERT_TRUE(Tmux::wait_for([&] { return !events(read_trace(tr), "turn_end").empty(); })) << t.screen();
  const auto end = events(read_trace(tr), "turn_end")[0];
  EXPECT_EQ(end["reason"], "cancelled");
  const int64_t n_past = end["n_past"];
  EXPECT_EQ(n_past, kFirstTurnHello + static_cast<int64_t>(events(read_trace(tr), "token").size()));
  // Back at the prompt: a command runs, and the session holds what was generated.
  t.type("/save " + sv);
  ASSERT_TRUE(Tmux::wait_for([&] {
    return t.screen().find("Saved " + std::to_string(n_past) + " tokens") != std::string::npos;
  })) << t.screen();
  t.type("/quit");
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("EXITED 0") != std::string::npos; })) << t.screen();
}

}  // namespace
}  // namespace ds4::test

// Oracle for the append-only turns: the session's tokens (read from a /save payload, whose
// layout docs/FORMATS.md fixes) must equal chat::render_prompt of the whole conversation,
// tokenized, plus the last answer. Checked in both thinking modes; -n 8 cuts each answer off
// (in thinking mode mid-reasoning, which the renderer closes with </think>).
namespace ds4::test {
namespace {

std::vector<int32_t> payload_tokens(const std::string& path) {
  const std::string p = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, p.data() + 48, 8);
  std::vector<int32_t> t(n);
  std::memcpy(t.data(), p.data() + 80, n * 4);
  return t;
}

void check_turns_match_renderer(chat::ThinkingMode mode) {
  const bool think = mode != chat::ThinkingMode::None;
  const std::string tag = think ? "think" : "nothink";
  const std::string tr = scratch().path("render_" + tag + ".trace"), sv = scratch().path("render_" + tag + ".ds4s");
  const std::string input = "hello\nagain\n/save " + sv + "\n/quit\n";
  const auto r = run_ds4("-m " + scratch().model + " -t 2 --" + tag + " --temp 0 -n 8 --ignore-eos --trace " + tr,
                         &input);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto turns = turn_tokens(read_trace(tr));
  ASSERT_EQ(turns.size(), 2u);

  const Tokenizer tok = Tokenizer::load(scratch().model);
  const std::vector<int32_t> gen1(turns[0].begin(), turns[0].end());
  const std::string answer = tok.decode(gen1);
  chat::Conversation conv;
  chat::Message m;
  m.role = chat::Role::User;
  m.content = "hello";
  conv.messages.push_back(m);
  chat::Message a;
  a.role = chat::Role::Assistant;
  const size_t close = answer.find("</think>");
  if (think && close == std::string::npos) {
    a.reasoning_content = answer;
    a.content = "";
  } else if (think) {
    a.reasoning_content = answer.substr(0, close);
    a.content = answer.substr(close + 8);
  } else {
    a.content = answer;
  }
  conv.messages.push_back(a);
  m.content = "again";
  conv.messages.push_back(m);
  chat::RenderOptions ro;
  ro.thinking = mode;
  ro.context_size = 4096;
  ro.drop_thinking = false;
  auto want = tok.encode(chat::render_prompt(conv, ro), /*parse_special=*/true);
  want.insert(want.end(), turns[1].begin(), turns[1].end());
  EXPECT_EQ(payload_tokens(sv), want) << "answer 1: " << answer;
}

TEST(CliRepl, LaterTurnsAppendExactlyWhatTheRendererWrites) {
  check_turns_match_renderer(chat::ThinkingMode::None);
  check_turns_match_renderer(chat::ThinkingMode::High);
}

}  // namespace
}  // namespace ds4::test
