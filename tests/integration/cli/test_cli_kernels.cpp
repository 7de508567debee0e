// The CPU kernel paths give the same logits: on the demo model (Q8_0 weights, F16 mixes, so
// the blocked AVX-512 kernels run for the batch) a 300-token batch, the same with the AVX-512
// kernels switched off (DS4_NO_AVX512=1: the AVX2 per-row kernels), and token-by-token
// evaluation (--incremental) must dump identical bytes. On a CPU without AVX-512 the first two
// runs take the same path and the test still checks prefill against decode.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "cli_harness.h"

namespace ds4::test {
namespace {

TEST(CliKernels, Avx512Avx2AndIncrementalLogitsAreIdentical) {
  const std::filesystem::path demo = std::filesystem::path(DS4_SOURCE_DIR) / "models" / "ds4-demo.gguf";
  if (!std::filesystem::exists(demo)) GTEST_SKIP() << "no " << demo;
  std::string ids;
  for (int i = 0; i < 300; ++i) ids += (i ? "," : "") + std::to_string((i * 797) % 4000 + 3);
  const std::string base = "-m " + demo.string() + " -t 2 --tokens " + ids + " --dump-logits ";
  const std::string a = scratch().path("k_default.f32"), b = scratch().path("k_avx2.f32"),
                    c = scratch().path("k_incremental.f32");
  auto r = run_ds4(base + a);
  ASSERT_EQ(r.rc, 0) << r.err;
  ::setenv("DS4_NO_AVX512", "1", 1);
  r = run_ds4(base + b);
  ::unsetenv("DS4_NO_AVX512");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_ds4(base + c + " --incremental");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string la = read_file(a);
  ASSERT_EQ(la.size(), 300u * 4096u * sizeof(float));
  EXPECT_TRUE(la == read_file(b)) << "AVX-512 and AVX2 paths differ";
  EXPECT_TRUE(la == read_file(c)) << "batched and incremental evaluation differ";
}

}  // namespace
}  // namespace ds4::test
