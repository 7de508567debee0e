// Saved sessions (save -> quit -> --resume without prefill, /strip, /list, /switch, /del) and
// the REPL on a real terminal through tmux (Ctrl+C in the middle of a command and of generation).
#include <signal.h>

#include <chrono>
#include <thread>

#include "agent_harness.h"

namespace ds4::agent::test {
namespace {

using namespace std::chrono_literals;

const std::vector<std::pair<std::string, std::string>> kRules = {
    {"first task", calls("Creating.", {invoke("write_file", {{"path", "one.txt"}, {"content", "1\n"}})})},
    {"created one.txt", "First task done."},
    {"second task", "Second answer."},
    {"third task", "Third answer."},
};

TEST(AgentSessions, SaveQuitResumeEvaluatesNoneOfTheRestoredHistory) {
  World w("resume");
  w.rules(kRules);
  // Interactive through a pipe: one request, /save, /quit.
  const auto r1 = w.run("--yes --json", "first task\n/save\n/quit\n");
  ASSERT_EQ(r1.rc, 0) << r1.err << r1.out;
  const auto saved = r1.of("saved");
  ASSERT_EQ(saved.size(), 1u) << r1.out;  // /quit after /save: nothing new to save
  const std::string id = saved[0]["id"];
  const int64_t n_saved = saved[0]["n_tokens"];
  EXPECT_EQ(n_saved, r1.of("turn_end").back()["n_past"].get<int64_t>());
  for (const char* f : {"payload.ds4s", "history.txt", "conversation.json"})
    EXPECT_TRUE(fs::exists(w.sessions / id / f)) << f;

  // --resume (the most recent session) in one-shot mode.
  const auto r2 = w.run("--yes --json --resume -p 'second task'");
  ASSERT_EQ(r2.rc, 0) << r2.err << r2.out;
  const auto res = r2.of("resumed");
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0]["id"], id);
  EXPECT_TRUE(res[0]["payload"].get<bool>());
  EXPECT_EQ(res[0]["n_tokens"], n_saved);
  const auto pre = r2.of("prefill");
  ASSERT_EQ(pre.size(), 1u);
  // Every restored token reused, none replayed or re-tokenized; only the new user turn
  // (EOS <｜User｜> "second task" <｜Assistant｜> </think>: 4 + 11 tokens, byte-level vocabulary)
  // is evaluated.
  EXPECT_EQ(pre[0]["reused"], n_saved);
  EXPECT_EQ(pre[0]["replayed"], 0);
  EXPECT_FALSE(pre[0]["resynced"].get<bool>());
  EXPECT_EQ(pre[0]["evaluated"], 4 + 11);
  std::string text;
  for (const auto& e : r2.of("text")) text += e["text"].get<std::string>();
  EXPECT_EQ(text, "Second answer.");
}

TEST(AgentSessions, StripListSwitchDelete) {
  World w("manage");
  w.rules(kRules);
  const auto a = w.run("--yes --json --save -p 'first task'");
  ASSERT_EQ(a.rc, 0) << a.err;
  const std::string id_a = a.of("saved").at(0)["id"];
  const int64_t n_a = a.of("saved").at(0)["n_tokens"];
  std::this_thread::sleep_for(1100ms);  // distinct ids / update times
  const auto b = w.run("--yes --json --save -p 'third task'");
  ASSERT_EQ(b.rc, 0) << b.err;
  const std::string id_b = b.of("saved").at(0)["id"];
  ASSERT_NE(id_a, id_b);

  // /list shows both; /strip drops A's payload; /switch to A re-evaluates its text.
  const auto r = w.run("--json", "/list\n/strip " + id_a + "\n/switch " + id_a + "\n/ctx\n/quit\n");
  ASSERT_EQ(r.rc, 0) << r.err << r.out;
  std::string notices;
  for (const auto& e : r.of("notice")) notices += e["text"].get<std::string>() + "\n";
  EXPECT_NE(notices.find(id_a), std::string::npos) << notices;
  EXPECT_NE(notices.find(id_b), std::string::npos) << notices;
  EXPECT_NE(notices.find("Stripped session " + id_a), std::string::npos) << notices;
  EXPECT_FALSE(fs::exists(w.sessions / id_a / "payload.ds4s"));
  EXPECT_TRUE(fs::exists(w.sessions / id_a / "history.txt"));
  const auto res = r.of("resumed");
  ASSERT_EQ(res.size(), 1u);
  EXPECT_FALSE(res[0]["payload"].get<bool>());
  // Re-evaluated from its text: one token per byte in this vocabulary, so as many as before,
  // plus the EOS that closes the last answer (the live session evaluates it with the next
  // request; the rendering of a finished conversation ends with it).
  EXPECT_EQ(res[0]["n_tokens"], n_a + 1);
  const auto pre = r.of("prefill");
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0]["evaluated"].get<int64_t>() + pre[0]["reused"].get<int64_t>(), n_a + 1);
  EXPECT_NE(notices.find("Context: " + std::to_string(n_a + 1) + " of 32768 tokens used"), std::string::npos) << notices;

  // /del refuses the current session, deletes another.
  const auto d = w.run("--json", "/switch " + id_b + "\n/del " + id_b + "\n/del " + id_a + "\n/list\n/quit\n");
  EXPECT_EQ(d.rc, 0);
  EXPECT_NE(d.err.find(id_b + " is the current session"), std::string::npos) << d.err;
  EXPECT_FALSE(fs::exists(w.sessions / id_a));
  EXPECT_TRUE(fs::exists(w.sessions / id_b));
}

// tmux on a private socket; the pane runs ds4-agent and stays open after it exits.
class Tmux {
 public:
  explicit Tmux(const std::string& command) : sock_("ds4agent" + std::to_string(::getpid()) + "_" + std::to_string(n_++)) {
    ok_ = sh("new-session -d -x 160 -y 50 " + sh_quote(command + "; echo EXITED $?; sleep 60")) == 0;
  }
  ~Tmux() { sh("kill-server"); }
  bool ok() const { return ok_; }
  void type(const std::string& text) {
    sh("send-keys -t 0 -l " + sh_quote(text));
    sh("send-keys -t 0 Enter");
  }
  void key(const std::string& k) { sh("send-keys -t 0 " + k); }
  std::string screen() {
    const fs::path f = scratch().dir / (sock_ + ".pane");
    sh("capture-pane -p -J -S -5000 -t 0 > " + sh_quote(f.string()));
    return slurp(f);
  }
  template <class P>
  static bool wait_for(P pred, int seconds = 60) {
    for (int i = 0; i < seconds * 20; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

 private:
  int sh(const std::string& args) { return std::system(("tmux -f /dev/null -L " + sock_ + " " + args + " 2>/dev/null").c_str()); }
  static inline int n_ = 0;
  std::string sock_;
  bool ok_ = false;
};

bool process_gone(int pid) {
  if (kill(pid, 0) != 0) return true;
  const std::string st = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = st.rfind(')');
  return paren != std::string::npos && paren + 2 < st.size() && st[paren + 2] == 'Z';
}

TEST(AgentTerminal, CtrlCStopsACommandOrGenerationAndReturnsToThePrompt) {
  if (std::system("command -v tmux >/dev/null") != 0) GTEST_SKIP() << "tmux not installed (scripts/setup.sh)";
  World w("ctrl_c");
  w.rules({
      {"sleepy", calls("Starting a long command.", {invoke("run_command", {{"command", "echo $$ > pid.txt; exec sleep 120"}})})},
      {"interrupted by the user", "Stopped, as you asked."},
      // Long enough (about 100 s of forced tokens) to be interrupted while it streams.
      {"chatty", "Here goes: " + std::string(100000, 'z')},
  });
  const fs::path trace = w.root / "trace.jsonl";
  Tmux t("env HOME=" + sh_quote(w.root.string()) + " " + w.base() + " --yes --trace " + sh_quote(trace.string()));
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("/help for commands") != std::string::npos; })) << t.screen();
  t.type("sleepy");
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("running... (Ctrl+C stops it)") != std::string::npos; }))
      << t.screen();
  ASSERT_TRUE(Tmux::wait_for([&] { return !slurp(w.work / "pid.txt").empty(); })) << t.screen();
  const int pid = std::stoi(slurp(w.work / "pid.txt"));
  EXPECT_FALSE(process_gone(pid));
  const auto t0 = std::chrono::steady_clock::now();
  t.key("C-c");
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("interrupted by the user (Ctrl+C)") != std::string::npos; }, 20))
      << t.screen();
  EXPECT_TRUE(Tmux::wait_for([&] { return process_gone(pid); }, 5)) << "sleep (pid " << pid << ") survived Ctrl+C";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("| cancelled]") != std::string::npos; }, 20)) << t.screen();
  // Back at the prompt: the next request continues with the interrupted result in the history.
  t.type("go on");
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("Stopped, as you asked.") != std::string::npos; })) << t.screen();
  // Ctrl+C in the middle of generation.
  t.type("chatty");
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("Here goes: zzzzzzzzzz") != std::string::npos; })) << t.screen();
  t.key("C-c");
  auto count = [&](const std::string& s) {
    const std::string sc = t.screen();
    size_t n = 0;
    for (size_t at = 0; (at = sc.find(s, at)) != std::string::npos; at += s.size()) ++n;
    return n;
  };
  ASSERT_TRUE(Tmux::wait_for([&] { return count("| cancelled]") == 2; }, 20)) << t.screen();
  t.type("/ctx");
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("Context: ") != std::string::npos; })) << t.screen();
  t.type("/quit");
  ASSERT_TRUE(Tmux::wait_for([&] { return t.screen().find("EXITED 0") != std::string::npos; })) << t.screen();
  // The trace has the command's result as the model read it.
  const std::string tr = slurp(trace);
  EXPECT_NE(tr.find("\"interrupted\":true"), std::string::npos) << tr;
}

}  // namespace
}  // namespace ds4::agent::test
