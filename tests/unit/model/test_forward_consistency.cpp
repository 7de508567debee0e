// Self-consistency of the forward pass on synthetic models (no external oracle needed):
// a batched prefill, token-by-token decoding and chunked prefills of the same tokens must give
// the same logits (spec §7: "the result must equal running §6 token by token"), with the
// activation rounding on and off, for every layer kind (SWA, ratio-4 with an active indexer,
// a one-lane compressor) and for quantized weights whose types differ by layer.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "compute/numerics.h"
#include "core/thread_pool.h"
#include "model/deepseek4/model.h"
#include "synthetic_model.h"
#include "common/test_paths.h"

using namespace ds4;
using namespace ds4::model::deepseek4;
using ds4::test::SynthConfig;

namespace {

std::string tmp_path(const std::string& name) {
  return (ds4::test::test_tmp_dir() / ("ds4_fwd_" + name + ".gguf")).string();
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// Logits for all positions, evaluating the tokens in chunks of the given sizes.
std::vector<float> run_chunks(const Model& m, compute::Backend& be, const std::vector<int32_t>& toks,
                              const std::vector<size_t>& chunks, State* out_state = nullptr) {
  const size_t V = static_cast<size_t>(m.hparams().n_vocab);
  std::vector<float> logits(toks.size() * V);
  State st = m.new_state(be, static_cast<int64_t>(toks.size()));
  size_t at = 0;
  for (size_t c : chunks) {
    m.eval(be, st, std::span(toks).subspan(at, c), logits.data() + at * V);
    at += c;
  }
  EXPECT_EQ(at, toks.size());
  EXPECT_EQ(st.n_pos, static_cast<int64_t>(toks.size()));
  if (out_state) *out_state = std::move(st);
  return logits;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

void expect_consistent(const SynthConfig& c, const std::string& name, int64_t n_tokens, bool sim) {
  std::string p = tmp_path(name);
  ds4::test::write_synthetic_model(p, c);
  Options o;
  o.act_quant_sim = sim;
  auto m = Model::load(p, o);
  ThreadPool pool(2);
  auto be = compute::make_cpu_backend(&pool);
  auto toks = random_tokens(n_tokens, c.n_vocab, c.seed + 7);

  auto prefill = run_chunks(*m, *be, toks, {toks.size()});
  for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
  std::vector<size_t> ones(toks.size(), 1);
  auto serial = run_chunks(*m, *be, toks, ones);
  const size_t a = toks.size() / 3 + 1;  // split inside a compressor window
  auto chunked = run_chunks(*m, *be, toks, {a, 5, toks.size() - a - 5});
  // The ops compute each row identically in any batch (see compute/backend.h), so the
  // paths agree exactly in practice; 1e-4 is the contract's tolerance.
  EXPECT_LE(max_abs_diff(prefill, serial), 1e-4) << name;
  EXPECT_LE(max_abs_diff(prefill, chunked), 1e-4) << name;
  // The model's own chunking of long evaluations (Options::max_batch).
  o.max_batch = 9;
  auto m9 = Model::load(p, o);
  EXPECT_LE(max_abs_diff(prefill, run_chunks(*m9, *be, toks, {toks.size()})), 1e-4) << name;
  std::filesystem::remove(p);
}

}  // namespace

TEST(ForwardConsistency, AllLayerKindsF32SimOnAndOff) {
  SynthConfig c;  // ratios {0, 4, 8, 4}, window 8, indexer top-k 4
  // 70 tokens: 17 ratio-4 rows (> top-k 4, so the indexer selects), 8 ratio-8 rows,
  // raw window wraps many times.
  expect_consistent(c, "f32_sim", 70, true);
  expect_consistent(c, "f32_nosim", 70, false);
}

TEST(ForwardConsistency, Ratio128LayerEmitsRows) {
  SynthConfig c;
  c.n_layer = 3;
  c.compress_ratios = {0, 128, 4};
  c.sliding_window = 16;
  expect_consistent(c, "r128", 260, true);  // two 128-windows complete
}

TEST(ForwardConsistency, QuantizedWeightsWithPerLayerExpertTypes) {
  SynthConfig c;
  c.n_embd = 256;
  c.expert_ff = 256;
  c.n_layer = 4;
  c.compress_ratios = {0, 4, 8, 4};
  c.dense_type = GgmlType::Q8_0;
  c.small_type = GgmlType::F16;
  c.expert_gate_up_type = {GgmlType::IQ2_XXS, GgmlType::Q4_K, GgmlType::Q2_K, GgmlType::Q4_K};
  c.expert_down_type = {GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::Q2_K, GgmlType::IQ2_XXS};
  expect_consistent(c, "quant", 40, true);
}

TEST(ForwardConsistency, SimulationRoundsStoredRows) {
  // With the simulation on, stored raw KV rows and compressed attention rows are already
  // FP8-exact on their non-RoPE dims (a second round trip changes nothing) and indexer rows
  // are FP4-exact; with it off they are not.
  SynthConfig c;
  std::string p = tmp_path("simrows");
  ds4::test::write_synthetic_model(p, c);
  ThreadPool pool(1);
  auto be = compute::make_cpu_backend(&pool);
  auto toks = random_tokens(24, c.n_vocab, 3);
  for (bool sim : {true, false}) {
    Options o;
    o.act_quant_sim = sim;
    auto m = Model::load(p, o);
    State st = m->new_state(*be, 64);
    m->eval(*be, st, toks, nullptr);
    int changed = 0;
    const std::vector<float> raw1 = st.layers[1].raw.to_host();
    const int64_t hd = c.head_dim, nope = hd - c.n_rot;
    for (int64_t r = 0; r < c.sliding_window; ++r) {
      std::vector<float> row(raw1.begin() + r * hd, raw1.begin() + (r + 1) * hd);
      auto again = row;
      compute::fp8_e4m3_round_trip(again.data(), nope);
      changed += again != row;
    }
    const auto& comp = st.layers[1].attn;  // ratio-4 compressed attention rows: FP8 on dims < nope
    ASSERT_EQ(comp.n_rows, 6);
    const std::vector<float> comp_rows = comp.rows.to_host(static_cast<size_t>(comp.n_rows * hd));
    for (int64_t r = 0; r < comp.n_rows; ++r) {
      std::vector<float> row(comp_rows.begin() + r * hd, comp_rows.begin() + (r + 1) * hd);
      auto again = row;
      compute::fp8_e4m3_round_trip(again.data(), nope);
      changed += again != row;
    }
    const auto& idx = st.layers[1].index;
    ASSERT_EQ(idx.n_rows, 6);
    const std::vector<float> idx_rows = idx.rows.to_host(static_cast<size_t>(idx.n_rows * idx.dim));
    for (int64_t r = 0; r < idx.n_rows; ++r) {
      std::vector<float> row(idx_rows.begin() + r * idx.dim, idx_rows.begin() + (r + 1) * idx.dim);
      auto again = row;
      compute::fp4_e2m1_round_trip(again.data(), idx.dim);
      changed += again != row;
    }
    if (sim) EXPECT_EQ(changed, 0);
    else EXPECT_GT(changed, 0);
  }
  std::filesystem::remove(p);
}

TEST(ActQuantSim, AppliedAtTheSpecifiedPlaces) {
  // Layer 0's inputs depend on the token embeddings only, so its cached rows with the
  // simulation on must equal the simulation applied to its rows with it off: FP8 on the
  // non-RoPE dims of raw KV rows (after norm and RoPE) and of compressed attention rows,
  // Hadamard then FP4 on whole indexer rows (spec §5.2-5.4, §6.4-6.5).
  SynthConfig c;
  c.compress_ratios = {4, 0, 8, 4};
  std::string p = tmp_path("simplace");
  ds4::test::write_synthetic_model(p, c);
  auto be = compute::make_cpu_backend(nullptr);
  auto toks = random_tokens(20, c.n_vocab, 9);
  State st[2];
  for (int sim = 0; sim < 2; ++sim) {
    Options o;
    o.act_quant_sim = sim == 1;
    auto m = Model::load(p, o);
    st[sim] = m->new_state(*be, 64);
    m->eval(*be, st[sim], toks, nullptr);
  }
  const LayerState& off = st[0].layers[0];
  const LayerState& on = st[1].layers[0];
  const int64_t hd = c.head_dim, nope = hd - c.n_rot;
  auto check = [&](const std::vector<float>& a_off, const std::vector<float>& a_on, int64_t width, bool fp8) {
    ASSERT_EQ(a_off.size(), a_on.size());
    ASSERT_FALSE(a_off.empty());
    for (size_t r = 0; r < a_off.size() / width; ++r) {
      std::vector<float> want(a_off.begin() + r * width, a_off.begin() + (r + 1) * width);
      if (fp8) {
        compute::fp8_e4m3_round_trip(want.data(), nope);
      } else {
        compute::hadamard_transform(want.data(), width);
        compute::fp4_e2m1_round_trip(want.data(), width);
      }
      for (int64_t i = 0; i < width; ++i)
        ASSERT_NEAR(a_on[r * width + i], want[i], 1e-6f * std::max(1.0f, std::fabs(want[i]))) << "row " << r << " dim " << i;
    }
  };
  check(off.raw.to_host(), on.raw.to_host(), hd, true);
  check(off.attn.rows.to_host(static_cast<size_t>(off.attn.n_rows * hd)),
        on.attn.rows.to_host(static_cast<size_t>(on.attn.n_rows * hd)), hd, true);
  check(off.index.rows.to_host(static_cast<size_t>(off.index.n_rows * c.indexer_head_dim)),
        on.index.rows.to_host(static_cast<size_t>(on.index.n_rows * c.indexer_head_dim)), c.indexer_head_dim, false);
  std::filesystem::remove(p);
}
