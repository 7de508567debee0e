// The engine at the published Flash shapes (spec §1, §3), on files from
// `ds4-gguf synth` (the convert helper's independent writer of the Flash table):
//  * the full 43-layer q2 table (every tensor a file hole) validates and binds;
//  * a 4-layer file with random non-expert weights (experts are holes) decodes, with the
//    prefill and token-by-token paths agreeing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/thread_pool.h"
#include "model/deepseek4/model.h"
#include "common/test_paths.h"

namespace fs = std::filesystem;
using namespace ds4;
using namespace ds4::model::deepseek4;

namespace {
int run(const std::string& cmd) { return std::system((cmd + " > /dev/null 2>&1").c_str()); }
}  // namespace

TEST(FlashShape, Full43LayerTableValidates) {
  const fs::path p = ds4::test::test_tmp_dir() / "ds4_flash43_q2.gguf";
  ASSERT_EQ(run(std::string(DS4_GGUF_BIN) + " synth --preset flash-q2 --sparse-all --out " + p.string()), 0);
  auto m = Model::load(p.string());
  const HParams& h = m->hparams();
  EXPECT_EQ(h.n_layer, 43);
  EXPECT_EQ(h.n_vocab, 129280);
  EXPECT_EQ(h.head_dim, 512);
  EXPECT_EQ(h.n_hash_layers, 3);
  int csa = 0, hca = 0, swa = 0;
  for (int64_t il = 0; il < 43; ++il) {
    int64_t r = h.ratio(il);
    EXPECT_EQ(r, il < 2 ? 0 : (il % 2 == 0 ? 4 : 128)) << il;
    csa += r == 4, hca += r == 128, swa += r == 0;
  }
  EXPECT_EQ(csa, 21);
  EXPECT_EQ(hca, 20);
  EXPECT_EQ(swa, 2);
  // State sizes of spec §8 at this shape.
  auto cpu = compute::make_cpu_backend(nullptr);
  State st = m->new_state(*cpu, 4096);
  EXPECT_EQ(st.layers[2].attn.kv.size(), 8u * 1024);
  EXPECT_EQ(st.layers[3].attn.kv.size(), 128u * 512);
  EXPECT_EQ(st.layers[2].index.kv.size(), 8u * 256);
  fs::remove(p);
}

TEST(FlashShape, Q4TableWithOtherExpertTypesValidates) {
  const fs::path p = ds4::test::test_tmp_dir() / "ds4_flash43_q4.gguf";
  ASSERT_EQ(run(std::string(DS4_GGUF_BIN) + " synth --preset flash-q4 --sparse-all --out " + p.string()), 0);
  EXPECT_NO_THROW(Model::load(p.string()));
  fs::remove(p);
}

TEST(FlashShape, ReducedLayerFileDecodes) {
  const fs::path p = ds4::test::test_tmp_dir() / "ds4_flash4_q2.gguf";
  ASSERT_EQ(run(std::string(DS4_GGUF_BIN) + " synth --preset flash-q2 --layers 4 --sparse --out " + p.string()), 0);
  auto m = Model::load(p.string());
  ThreadPool pool(0);
  auto be = compute::make_cpu_backend(&pool);
  const std::vector<int32_t> toks = {0, 4242, 129279};
  const size_t V = 129280;
  std::vector<float> prefill(toks.size() * V), serial(toks.size() * V);
  State a = m->new_state(*be, 8), b = m->new_state(*be, 8);
  m->eval(*be, a, toks, prefill.data());
  for (size_t i = 0; i < toks.size(); ++i) m->eval(*be, b, std::span(toks).subspan(i, 1), serial.data() + i * V);
  double max_d = 0, sum_abs = 0;
  for (size_t i = 0; i < prefill.size(); ++i) {
    ASSERT_TRUE(std::isfinite(prefill[i]));
    max_d = std::max(max_d, static_cast<double>(std::fabs(prefill[i] - serial[i])));
    sum_abs += std::fabs(prefill[i]);
  }
  EXPECT_LE(max_d, 1e-4);
  EXPECT_GT(sum_abs / prefill.size(), 1e-3);  // not a degenerate all-zero output
  fs::remove(p);
}
