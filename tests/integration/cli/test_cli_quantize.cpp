// Quantization and model-analysis tools end to end on the demo model: ds4-gguf quantize
// (--print, recipe files, --reuse with its count, bad recipes and imatrix files), ds4
// --imatrix-data / --expert-profile-out / --prune-mask, ds4-gguf prune, and ds4-eval.
#include <fstream>

#include "cli_harness.h"

namespace ds4::test {
namespace {

const std::string kDemo = std::string(DS4_SOURCE_DIR) + "/models/ds4-demo.gguf";
const std::string kRecipes = std::string(DS4_SOURCE_DIR) + "/bench/quant/";

RunResult run_bin(const std::string& bin, const std::string& args) {
  static int n = 0;
  const std::string base = scratch().path("q" + std::to_string(n++));
  const std::string cmd = bin + " " + args + " >" + base + ".out 2>" + base + ".err </dev/null";
  const int st = std::system(cmd.c_str());
  RunResult r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_file(base + ".out");
  r.err = read_file(base + ".err");
  return r;
}
RunResult gguf(const std::string& args) { return run_bin(DS4_GGUF_BIN, args); }
RunResult eval(const std::string& args) { return run_bin(std::string(DS4_BUILD_DIR) + "/bin/ds4-eval", args); }

const std::string& text_file() {
  static std::string p = [] {
    std::string t = scratch().path("genesis.txt");
    std::ofstream(t) << "Genesis 1\n\nIn the beginning God created the heaven and the earth.\nAnd the earth was "
                        "without form, and void; and darkness was upon the face of the deep. And the Spirit of God "
                        "moved upon the face of the waters.\nAnd God said, Let there be light: and there was light.\n"
                        "And God saw the light, that it was good: and God divided the light from the darkness.\n";
    return t;
  }();
  return p;
}

}  // namespace

TEST(CliQuantize, PrintPlanQuantizeReuseAndRun) {
  auto p = gguf("quantize --recipe flash-q2 --print");
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_NE(p.out.find("blk.*.ffn_down_exps.weight      q2_K"), std::string::npos) << p.out;

  const std::string q2 = scratch().path("q2.gguf"), boost = scratch().path("boost.gguf"),
                    reused = scratch().path("boost-reused.gguf");
  auto a = gguf("quantize " + kDemo + " " + q2 + " --recipe " + kRecipes + "demo-q2.recipe -t 2");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_NE(a.out.find("178 tensors (18 quantized"), std::string::npos) << a.out;
  EXPECT_NE(a.err.find("[ 178/178]"), std::string::npos) << a.err;  // progress lines
  auto b = gguf("quantize " + kDemo + " " + boost + " --recipe " + kRecipes + "demo-q2-boost.recipe -t 2 --quiet");
  ASSERT_EQ(b.rc, 0) << b.err;
  // Boosting layers 0 and 5 changes their 3 expert tensors each: gate/up re-quantized to Q4_K,
  // down copied (Q8_0 like the source), the other 172 tensors reused from the old file.
  auto c = gguf("quantize " + kDemo + " " + reused + " --recipe " + kRecipes + "demo-q2-boost.recipe -t 2 --quiet --reuse " + q2);
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_NE(c.out.find("(4 quantized, 0 with imatrix weights, 2 copied, 172 reused from " + q2 + ")"), std::string::npos)
      << c.out;
  EXPECT_EQ(read_file(boost), read_file(reused));

  // The engine runs the mixed-precision files unchanged.
  auto g = run_ds4("-m " + q2 + " -t 2 --raw --temp 0 -n 8 --ignore-eos --no-stats -p 'In the beginning'");
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_FALSE(g.out.empty());
}

TEST(CliQuantize, BadRecipesAndImatrixFiles) {
  const std::string out = scratch().path("bad.gguf");
  EXPECT_EQ(gguf("quantize").rc, 2);
  EXPECT_EQ(gguf("quantize " + kDemo + " " + out).rc, 2);  // no recipe
  const std::string r = scratch().path("bad.recipe");
  std::ofstream(r) << "* keep\nblk.*.ffn_up_exps.weight q7_K\n";
  auto e1 = gguf("quantize " + kDemo + " " + out + " --recipe " + r);
  EXPECT_EQ(e1.rc, 1);
  EXPECT_NE(e1.err.find("line 2: unknown tensor type 'q7_K'"), std::string::npos) << e1.err;
  std::ofstream(r) << "* keep\nblk.9.ffn_up_exps.weight q4_K\n";
  auto e2 = gguf("quantize " + kDemo + " " + out + " --recipe " + r);
  EXPECT_EQ(e2.rc, 1);
  EXPECT_NE(e2.err.find("unknown tensor 'blk.9.ffn_up_exps.weight'"), std::string::npos) << e2.err;
  auto e3 = gguf("quantize " + kDemo + " " + out + " --recipe flash-q9");
  EXPECT_EQ(e3.rc, 1);
  EXPECT_NE(e3.err.find("neither a built-in recipe"), std::string::npos) << e3.err;
  // A truncated imatrix: the error names the file.
  const std::string imx = scratch().path("trunc.imatrix.gguf");
  {
    std::ifstream in(kDemo, std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), 4096);
    std::ofstream(imx, std::ios::binary) << head;
  }
  auto e4 = gguf("quantize " + kDemo + " " + out + " --recipe " + kRecipes + "demo-q2.recipe --imatrix " + imx);
  EXPECT_EQ(e4.rc, 1);
  EXPECT_NE(e4.err.find(imx), std::string::npos) << e4.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST(CliQuantize, CollectPruneAndEvaluate) {
  const std::string imx = scratch().path("g.imatrix.gguf"), prof = scratch().path("g.profile.json"),
                    mask = scratch().path("g.mask.json"), q2 = scratch().path("g-q2.gguf");
  auto c = run_ds4("-m " + kDemo + " -t 2 --imatrix-data " + text_file() + " --imatrix-chunk 32 --imatrix-checkpoint 1" +
                   " --imatrix-out " + imx + " --expert-profile-out " + prof);
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_NE(c.out.find("wrote " + imx + " (3 chunks of <= 32 tokens"), std::string::npos) << c.out;
  EXPECT_NE(c.err.find("(checkpoint written)"), std::string::npos) << c.err;
  auto q = gguf("quantize " + kDemo + " " + q2 + " --recipe " + kRecipes + "demo-q2.recipe -t 2 --quiet --imatrix " + imx);
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_NE(q.out.find("(18 quantized, 18 with imatrix weights"), std::string::npos) << q.out;

  auto p = gguf("prune --profile " + prof + " --keep-fraction 0.5 --out " + mask);
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_NE(p.out.find("12 of 48 experts pruned"), std::string::npos) << p.out;
  EXPECT_EQ(gguf("prune --profile " + prof + " --out " + mask).rc, 2);
  auto g = run_ds4("-m " + kDemo + " -t 2 --raw --temp 0 -n 4 --no-stats -p 'And God said' --prune-mask " + mask);
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_NE(g.err.find("12 experts removed from routing"), std::string::npos) << g.err;

  // ds4-eval: a model against itself has KL 0 and full agreement; the 2-bit file does not.
  auto self = eval("-m " + kDemo + " --kl-base " + kDemo + " --ppl " + text_file() + " --ctx 32 -t 2");
  ASSERT_EQ(self.rc, 0) << self.err;
  EXPECT_NE(self.out.find("KL(base || model) mean 0.000000, p99 0.000000, max 0.000000; top-1 agreement 1.0000"),
            std::string::npos) << self.out;
  const std::string js = scratch().path("eval.json");
  auto q2e = eval("-m " + q2 + " --kl-base " + kDemo + " --ppl " + text_file() + " --ctx 32 -t 2 --json " + js);
  ASSERT_EQ(q2e.rc, 0) << q2e.err;
  const auto j = nlohmann::json::parse(read_file(js));
  EXPECT_GT(j["kl_mean"].get<double>(), 0.0);
  auto pe = eval("-m " + kDemo + " --ppl " + text_file() + " --ctx 32 -t 2 --prune-mask " + mask);
  ASSERT_EQ(pe.rc, 0) << pe.err;

  // quantize --prune: the experts leave the file (saving printed); the small file against the
  // masked original: KL exactly 0, full agreement; the same greedy text as ds4 --prune-mask.
  const std::string small = scratch().path("g-pruned.gguf");
  auto qp = gguf("quantize " + kDemo + " " + small + " --recipe keep --prune " + mask + " --quiet");
  ASSERT_EQ(qp.rc, 0) << qp.err;
  EXPECT_NE(qp.out.find("pruned 12 routed experts"), std::string::npos) << qp.out;
  EXPECT_NE(qp.out.find("MB less than the same recipe without --prune"), std::string::npos) << qp.out;
  auto same = eval("-m " + small + " --kl-base " + kDemo + " --base-prune-mask " + mask + " --ppl " + text_file() +
                   " --ctx 32 -t 2");
  ASSERT_EQ(same.rc, 0) << same.err;
  EXPECT_NE(same.out.find("KL(base || model) mean 0.000000, p99 0.000000, max 0.000000; top-1 agreement 1.0000"),
            std::string::npos) << same.out;
  auto gs = run_ds4("-m " + small + " -t 2 --raw --temp 0 -n 4 --no-stats -p 'And God said'");
  ASSERT_EQ(gs.rc, 0) << gs.err;
  EXPECT_EQ(gs.out, g.out);
  EXPECT_NE(run_ds4("-m " + small + " -t 2 --raw -n 1 -p 'And' --prune-mask " + mask).err.find("experts were dropped"),
            std::string::npos);
  const std::string hash_mask = scratch().path("hash.mask.json");
  {
    std::string m = read_file(mask);
    const size_t at = m.find("\"pruned\"");
    const size_t open = m.find('[', m.find('[', at) + 1);  // layer 0's list
    m.insert(open + 1, "1");
    std::ofstream(hash_mask) << m;
  }
  auto bad = gguf("quantize " + kDemo + " " + scratch().path("bad.gguf") + " --recipe keep --prune " + hash_mask);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("layer 0 is hash-routed"), std::string::npos) << bad.err;
  EXPECT_NE(eval("-m " + kDemo + " --ppl /nonexistent.txt").err.find("cannot open"), std::string::npos);
}

}  // namespace ds4::test
