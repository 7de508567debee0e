// ds4 --kv-disk-dir: a REPL conversation resumes after a restart and continues exactly as an
// uninterrupted one would (greedy), and a repeated one-shot prompt loads its prefill from disk.
#include "cli_harness.h"

namespace ds4::test {
namespace {

std::vector<std::vector<int>> answers(const std::vector<nlohmann::json>& trace) {
  std::vector<std::vector<int>> turns(1);
  for (const auto& e : trace) {
    if (e["event"] == "token") turns.back().push_back(e["id"]);
    if (e["event"] == "turn_end") turns.emplace_back();
  }
  turns.pop_back();
  return turns;
}

const std::string kLong(300, 'x');  // 300 byte tokens in the chat test model

TEST(CliKvDisk, ReplConversationResumesAfterARestartAsIfUninterrupted) {
  const std::string dir = scratch().path("kv_repl");
  const std::string flags = "-m " + scratch().model + " -t 2 --nothink --temp 0 -n 8 --ignore-eos --kv-cache-min-tokens 64 ";
  // Control: both turns in one process.
  const std::string both = kLong + "\nand then\n/quit\n";
  const std::string trc = scratch().path("kv_control.trace");
  ASSERT_EQ(run_ds4(flags + "--trace " + trc, &both).rc, 0);
  const auto control = answers(read_trace(trc));
  ASSERT_EQ(control.size(), 2u);

  const std::string first = kLong + "\n/quit\n", second = "and then\n/quit\n";
  const std::string tr1 = scratch().path("kv_1.trace"), tr2 = scratch().path("kv_2.trace");
  const auto r1 = run_ds4(flags + "--kv-disk-dir " + dir + " --trace " + tr1, &first);
  ASSERT_EQ(r1.rc, 0) << r1.err;
  const auto r2 = run_ds4(flags + "--kv-disk-dir " + dir + " --trace " + tr2, &second);
  ASSERT_EQ(r2.rc, 0) << r2.err;
  // BOS <｜User｜> x*300 <｜Assistant｜> </think> + 8 answer tokens.
  const int64_t after1 = 4 + 300 + 8;
  EXPECT_NE(r2.err.find("resumed the last conversation (" + std::to_string(after1) + " tokens)"), std::string::npos)
      << r2.err;
  const auto t2 = read_trace(tr2);
  const auto pre = events(t2, "prefill");
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0]["reused"], after1);
  EXPECT_EQ(pre[0]["evaluated"], 4 + 8);  // EOS <｜User｜> "and then" <｜Assistant｜> </think>
  const auto resumed = answers(t2);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0], control[1]);
  // /new starts over: nothing reused.
  const std::string fresh = "/new\nhi\n/quit\n", tr3 = scratch().path("kv_3.trace");
  ASSERT_EQ(run_ds4(flags + "--kv-disk-dir " + dir + " --trace " + tr3, &fresh).rc, 0);
  const auto pre3 = events(read_trace(tr3), "prefill");
  ASSERT_EQ(pre3.size(), 1u);
  EXPECT_EQ(pre3[0]["reused"], 0);
}

TEST(CliKvDisk, RepeatedOneShotPromptLoadsItsPrefillFromDisk) {
  const std::string dir = scratch().path("kv_oneshot");
  const std::string flags = "-m " + scratch().model + " -t 2 --nothink --temp 0 -n 6 --ignore-eos --kv-cache-min-tokens 64 " +
                            "--kv-disk-dir " + dir + " -p " + kLong + " --trace ";
  const std::string tr1 = scratch().path("kv_os1.trace"), tr2 = scratch().path("kv_os2.trace");
  const auto r1 = run_ds4(flags + tr1);
  ASSERT_EQ(r1.rc, 0) << r1.err;
  const auto r2 = run_ds4(flags + tr2);
  ASSERT_EQ(r2.rc, 0) << r2.err;
  EXPECT_EQ(r1.out, r2.out);
  const auto t2 = read_trace(tr2);
  const auto load = events(t2, "disk_load");
  ASSERT_EQ(load.size(), 1u);
  EXPECT_EQ(load[0]["tokens"], 4 + 300);
  const auto pre = events(t2, "prefill");
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0]["reused"], 4 + 300);
  EXPECT_EQ(pre[0]["evaluated"], 0);
  EXPECT_NE(r2.err.find("304 from disk"), std::string::npos) << r2.err;
}

}  // namespace
}  // namespace ds4::test
