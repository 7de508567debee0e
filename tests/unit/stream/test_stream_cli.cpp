// The command-line tools end to end on a copy of the demo model: `ds4-gguf pack-experts`
// (free, refuse without the packed file, --restore byte-identical), `ds4 --ssd-streaming` logits
// equal to resident ones, `replay-routing` on the trace `ds4 --trace-routing` wrote.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "stream_fixture.h"

namespace fs = std::filesystem;

namespace {

struct Out {
  int rc;
  std::string text;
};

Out sh(const std::string& cmd) {
  std::string text;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  while (p && fgets(buf.data(), buf.size(), p)) text += buf.data();
  int st = p ? pclose(p) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, text};
}

}  // namespace

TEST(StreamCli, PackStreamRestoreReplay) {
  const std::string m = ds4::test::tmp_file("cli_demo.gguf");
  fs::copy_file(DS4_SOURCE_DIR "/models/ds4-demo.gguf", m, fs::copy_options::overwrite_existing);
  fs::remove(m + ".experts");
  const auto original = ds4::test::read_file(m);
  const std::string toks = "--tokens 1,200,300,17,4000,99,5,6,7,8,9,10 -t 2";
  const std::string ds4 = DS4_BIN, gg = DS4_GGUF_BIN;
  const std::string r = ds4::test::tmp_file("cli_r.f32"), s = ds4::test::tmp_file("cli_s.f32");
  ASSERT_EQ(sh(ds4 + " -m " + m + " " + toks + " --dump-logits " + r).rc, 0);

  Out p = sh(gg + " pack-experts " + m);
  ASSERT_EQ(p.rc, 0) << p.text;
  EXPECT_NE(p.text.find("every record verified"), std::string::npos) << p.text;
  EXPECT_NE(p.text.find("freed the expert ranges"), std::string::npos) << p.text;

  // The freed GGUF streams from the packed file found next to it, with a small cache.
  Out st = sh(ds4 + " -m " + m + " " + toks + " --dump-logits " + s + " --ssd-streaming --expert-cache-host 12 --stats");
  ASSERT_EQ(st.rc, 0) << st.text;
  EXPECT_NE(st.text.find("packed"), std::string::npos) << st.text;
  EXPECT_NE(st.text.find("misses"), std::string::npos) << st.text;
  EXPECT_EQ(ds4::test::read_file(r), ds4::test::read_file(s));
  // One read per expert (the packed record): the same logits.
  fs::remove(s);
  Out rec = sh(ds4 + " -m " + m + " " + toks + " --dump-logits " + s +
               " --ssd-streaming --expert-cache-host 12 --expert-record-reads --stats");
  ASSERT_EQ(rec.rc, 0) << rec.text;
  EXPECT_NE(rec.text.find("one read per expert"), std::string::npos) << rec.text;
  EXPECT_EQ(ds4::test::read_file(r), ds4::test::read_file(s));

  fs::rename(m + ".experts", m + ".aside");
  Out no = sh(ds4 + " -m " + m + " " + toks + " --dump-logits " + s);
  EXPECT_EQ(no.rc, 1) << no.text;
  EXPECT_NE(no.text.find("packed expert file"), std::string::npos) << no.text;
  fs::rename(m + ".aside", m + ".experts");

  Out re = sh(gg + " pack-experts " + m + " --restore");
  ASSERT_EQ(re.rc, 0) << re.text;
  EXPECT_EQ(ds4::test::read_file(m), original);

  const std::string tr = ds4::test::tmp_file("cli.trace");
  ASSERT_EQ(sh(ds4 + " -m " + m + " " + toks + " --dump-logits " + s + " --incremental --trace-routing " + tr).rc, 0);
  Out rp = sh(gg + " replay-routing --trace " + tr + " --cache 12 --policy lru,hot,belady --prefetch none,all");
  ASSERT_EQ(rp.rc, 0) << rp.text;
  EXPECT_NE(rp.text.find("belady"), std::string::npos) << rp.text;
  EXPECT_EQ(sh(gg + " replay-routing --trace /nonexistent").rc, 1);
  EXPECT_EQ(sh(gg + " pack-experts").rc, 2);
}

// `ds4-gguf stream-bench --gpu-cache`: a gpu tier emulated in host memory above the host cache,
// with the hot policy's admission, or without it (DS4_EXPERT_GPU_ADMIT=0: every miss admitted,
// nothing transient).
TEST(StreamCli, StreamBenchEmulatesAGpuTier) {
  const std::string m = ds4::test::tmp_file("cli_bench.gguf");
  fs::copy_file(DS4_SOURCE_DIR "/models/ds4-demo.gguf", m, fs::copy_options::overwrite_existing);
  fs::remove(m + ".experts");
  const std::string gg = DS4_GGUF_BIN;
  const std::string args = " stream-bench " + m + " --packed - --io pread --no-direct --cache 40% --gpu-cache 8 --tokens 48 --warmup 8";
  Out on = sh(gg + args);
  ASSERT_EQ(on.rc, 0) << on.text;
  EXPECT_NE(on.text.find("gpu tier (emulated in host memory): 8 slots"), std::string::npos) << on.text;
  EXPECT_EQ(on.text.find("admission off"), std::string::npos) << on.text;
  Out off = sh("DS4_EXPERT_GPU_ADMIT=0 " + gg + args);
  ASSERT_EQ(off.rc, 0) << off.text;
  EXPECT_NE(off.text.find("0 copied in as transient (admission off"), std::string::npos) << off.text;
  EXPECT_EQ(sh(gg + " stream-bench " + m + " --gpu-cache 0").rc, 1);
}
