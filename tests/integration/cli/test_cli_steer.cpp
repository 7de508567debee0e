// Directional steering end to end on the chat test model: ds4-gguf steer-build (chat template
// path), ds4 with --dir-steering-* (scale 0 prints what no steering prints; a scale changes the
// answer), bad files, and the REPL's /steer keeping the cached state.
#include <fstream>

#include "cli_harness.h"

namespace ds4::test {
namespace {

RunResult run_gguf(const std::string& args) {
  static int n = 0;
  const std::string base = scratch().path("gguf" + std::to_string(n++));
  const std::string cmd = std::string(DS4_GGUF_BIN) + " " + args + " >" + base + ".out 2>" + base + ".err </dev/null";
  const int st = std::system(cmd.c_str());
  RunResult r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_file(base + ".out");
  r.err = read_file(base + ".err");
  return r;
}

// Builds (once) a direction file from two small prompt sets.
const std::string& direction_file() {
  static std::string path = [] {
    const std::string pos = scratch().path("pos.jsonl"), neg = scratch().path("neg.jsonl");
    std::ofstream(pos) << "\"The LORD is my shepherd; I shall not want.\"\n{\"prompt\": \"Praise ye the LORD.\"}\n";
    std::ofstream(neg) << "{\"text\": \"And Abram went up out of Egypt.\"}\n\n\"And it came to pass in those days.\"\n";
    const std::string out = scratch().path("dir.f32");
    const auto r = run_gguf("steer-build -m " + scratch().model + " --threads 2 --positive " + pos + " --negative " +
                            neg + " --out " + out);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("4 layers (0..3)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("2 positive / 2 negative prompts (chat template)"), std::string::npos) << r.out;
    return out;
  }();
  return path;
}

TEST(CliSteer, ScaleZeroPrintsWhatNoSteeringPrintsAndAScaleChangesTheAnswer) {
  const std::string f = direction_file();
  const std::string base = "-m " + scratch().model + " -t 2 --nothink --temp 0 -n 12 --ignore-eos --no-stats -p hello";
  const auto plain = run_ds4(base);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  ASSERT_FALSE(plain.out.empty());
  const auto zero = run_ds4(base + " --dir-steering-file " + f);
  ASSERT_EQ(zero.rc, 0) << zero.err;
  EXPECT_EQ(zero.out, plain.out);
  const auto pushed = run_ds4(base + " --dir-steering-file " + f + " --dir-steering-attn 8 --dir-steering-ffn 8");
  ASSERT_EQ(pushed.rc, 0) << pushed.err;
  EXPECT_NE(pushed.out, plain.out);
}

TEST(CliSteer, BadFilesAndFlagsFailWithTheReason) {
  const std::string f = direction_file();
  const std::string bytes = read_file(f);
  const std::string cut = scratch().path("cut.f32");
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 9);
  auto r = run_ds4("-m " + scratch().model + " -t 2 -p hi -n 1 --dir-steering-file " + cut);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find(cut + ": steering file is"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(truncated)"), std::string::npos) << r.err;
  r = run_ds4("-m " + scratch().model + " -t 2 -p hi -n 1 --dir-steering-ffn 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("need --dir-steering-file"), std::string::npos) << r.err;
  r = run_gguf("steer-build -m " + scratch().model + " --positive " + scratch().path("pos.jsonl") +
               " --negative " + scratch().path("neg.jsonl") + " --layers 2:9 --out " + scratch().path("x.f32"));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--layers '2:9'"), std::string::npos) << r.err;
  const std::string bad = scratch().path("bad.jsonl");
  std::ofstream(bad) << "[1, 2]\n";
  r = run_gguf("steer-build -m " + scratch().model + " --positive " + bad + " --negative " + bad + " --out " +
               scratch().path("x.f32"));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find(bad + ":1: expected a JSON string"), std::string::npos) << r.err;
}

TEST(CliSteer, ReplSteerChangesTheScalesAndKeepsTheCachedState) {
  const std::string f = direction_file();
  const std::string tr = scratch().path("steer.trace");
  const std::string input = "hello\n/steer 4 2\n/steer\nagain\n/steer x\n/ctx 100\n/quit\n";
  const auto r = run_ds4("-m " + scratch().model + " -t 2 --nothink --temp 0 -n 8 --ignore-eos --trace " + tr +
                             " --dir-steering-file " + f,
                         &input);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Steering: attn 4, ffn 2 from the next token on."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Steering: attn 4, ffn 2."), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("/steer needs one or two numbers"), std::string::npos) << r.err;
  // /ctx moves the conversation, computed under changing scales, into a new session.
  EXPECT_NE(r.out.find("Context: 100 tokens."), std::string::npos) << r.out << r.err;
  const auto pre = events(read_trace(tr), "prefill");
  ASSERT_EQ(pre.size(), 2u);
  EXPECT_EQ(pre[1]["reused"], 9 + 8);  // the first turn's state is kept, not recomputed
  const std::string steer_only = "/steer 1\n/quit\n";
  const auto none = run_ds4("-m " + scratch().model + " -t 2 --nothink", &steer_only);
  EXPECT_NE(none.err.find("need a steering file"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace ds4::test
