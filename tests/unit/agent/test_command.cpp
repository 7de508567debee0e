// run_command: exit codes, signals, timeouts, output truncation, Ctrl+C (the cancel flag).
#include "agent/command.h"

#include <signal.h>

#include <thread>

#include "agent_test_util.h"

namespace ds4::agent::test {
namespace {

TEST(AgentCommand, ExitCodeAndMergedOutputInTheWorkdir) {
  TempDir t;
  const auto r = run_command("pwd; echo out; echo err >&2; exit 3", t.dir, {});
  EXPECT_EQ(r.end, CommandResult::End::Exited);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.output, fs::canonical(t.dir).string() + "\nout\nerr\n");
  EXPECT_EQ(describe(r, 120), "exit code 3\n" + r.output);
  EXPECT_EQ(describe(run_command("true", t.dir, {}), 120), "exit code 0\n(no output)");
}

TEST(AgentCommand, StdinIsEmpty) {
  TempDir t;
  const auto r = run_command("cat; echo done", t.dir, {});
  EXPECT_EQ(r.output, "done\n");
}

TEST(AgentCommand, SignalAndTimeout) {
  TempDir t;
  auto r = run_command("kill -9 $$", t.dir, {});
  EXPECT_EQ(r.end, CommandResult::End::Signaled);
  EXPECT_EQ(r.signal, 9);
  CommandOptions o;
  o.timeout_s = 0.5;
  r = run_command("echo start; sleep 30; echo never", t.dir, o);
  EXPECT_EQ(r.end, CommandResult::End::TimedOut);
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_EQ(describe(r, 0.5), "timed out after 0.5 s; the command was killed\nstart\n");
}

TEST(AgentCommand, LongOutputKeepsHeadAndTail) {
  TempDir t;
  CommandOptions o;
  o.max_output = 100;
  // 1000 lines "0".."999": 3890 bytes.
  const auto r = run_command("seq 0 999", t.dir, o);
  EXPECT_EQ(r.total_bytes, 3890u);
  EXPECT_EQ(r.omitted_bytes, 3790u);
  EXPECT_EQ(r.output.substr(0, 10), "0\n1\n2\n3\n4\n");
  EXPECT_EQ(r.output.substr(r.output.size() - 8), "998\n999\n");
  EXPECT_NE(r.output.find("[... 3790 bytes of output omitted ...]"), std::string::npos);
  EXPECT_NE(describe(r, 1).find("[output truncated: 100 of 3890 bytes shown]"), std::string::npos);
}

TEST(AgentCommand, CancelKillsTheWholeGroup) {
  TempDir t;
  std::atomic<bool> stop{false};
  CommandOptions o;
  o.cancel = &stop;
  std::thread th([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
  });
  // A child of the shell that would outlive it: the group kill reaches it.
  const auto r = run_command("(sleep 30; echo child) & echo $! > child.pid; wait", t.dir, o);
  th.join();
  EXPECT_EQ(r.end, CommandResult::End::Cancelled);
  EXPECT_LT(r.seconds, 5.0);
  const int child = std::stoi(slurp(t / "child.pid"));
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    // Gone, or a zombie waiting for whoever adopted it.
    const std::string st = slurp("/proc/" + std::to_string(child) + "/stat");
    const size_t paren = st.rfind(')');
    gone = kill(child, 0) != 0 || (paren != std::string::npos && paren + 2 < st.size() && st[paren + 2] == 'Z');
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "pid " << child;
  EXPECT_EQ(describe(r, 1), "interrupted by the user (Ctrl+C); the command was killed\n(no output)");
}

}  // namespace
}  // namespace ds4::agent::test
