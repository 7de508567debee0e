// CPU backend ops against naive double-precision references written out here from the spec's
// formulas (§5.1 RoPE, §6.3 hc_post, §6.5 pooling, §6.7 sink attention). Quantized matmuls are
// checked against dequantized weights times the activations with a tolerance that covers the
// activation quantization (Q8_0: 1/127 of each 32-block's max), and for batch invariance.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <random>
#include <vector>

#include "compute/backend.h"
#include "compute/numerics.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

using namespace ds4;
using namespace ds4::compute;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

struct Fixture : ::testing::Test {
  ThreadPool pool{2};
  std::unique_ptr<Backend> be = make_cpu_backend(&pool);
};

using CpuBackend = Fixture;

}  // namespace

TEST_F(CpuBackend, MatmulF32AndF16MatchNaive) {
  const int64_t n_in = 96, n_out = 37, rows = 5;
  auto w = randn(n_in * n_out, 1);
  auto x = randn(n_in * rows, 2);
  std::vector<uint16_t> w16(w.size());
  for (size_t i = 0; i < w.size(); ++i) w16[i] = fp32_to_fp16(w[i]);
  Matrix m32{GgmlType::F32, reinterpret_cast<const uint8_t*>(w.data()), n_in, n_out, n_in * sizeof(float)};
  Matrix m16{GgmlType::F16, reinterpret_cast<const uint8_t*>(w16.data()), n_in, n_out, n_in * sizeof(uint16_t)};
  std::vector<float> y32(rows * n_out), y16(rows * n_out);
  be->matmul(m32, x.data(), rows, y32.data());
  be->matmul(m16, x.data(), rows, y16.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < n_out; ++o) {
      double a = 0, b = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        a += static_cast<double>(w[o * n_in + i]) * x[r * n_in + i];
        b += static_cast<double>(fp16_to_fp32(w16[o * n_in + i])) * x[r * n_in + i];
      }
      EXPECT_NEAR(y32[r * n_out + o], a, 1e-4);
      EXPECT_NEAR(y16[r * n_out + o], b, 1e-4);
    }
}

// A batch takes the blocked rows x tokens kernel where the CPU has one (AVX-512 VNNI: Q8_0,
// Q2_K, IQ2_XXS, F16), one token the per-row kernel: both must agree bit for bit. n_out = 40 leaves
// a partial 16-row panel.
TEST_F(CpuBackend, MatmulQuantizedIsBatchInvariantAndClose) {
  const int64_t n_in = 512, n_out = 40, rows = 5;
  auto w = randn(n_in * n_out, 3);
  auto x = randn(n_in * rows, 4);
  const std::vector<float> imatrix(n_in, 1.0f);  // IQ2_XXS needs one; the others use the reference writer
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q2_K, GgmlType::IQ2_XXS, GgmlType::F16}) {
    const size_t rb = row_bytes(traits(t), n_in);
    std::vector<uint8_t> q(rb * n_out);
    quant::quantize_rows(t, w.data(), q.data(), n_out, n_in, t == GgmlType::IQ2_XXS ? imatrix.data() : nullptr);
    Matrix m{t, q.data(), n_in, n_out, rb};
    std::vector<float> y(rows * n_out), y1(n_out), wd(n_in);
    be->matmul(m, x.data(), rows, y.data());
    for (int64_t r = 0; r < rows; ++r) {
      be->matmul(m, x.data() + r * n_in, 1, y1.data());
      for (int64_t o = 0; o < n_out; ++o) EXPECT_EQ(y[r * n_out + o], y1[o]) << traits(t).name;
    }
    for (int64_t o = 0; o < n_out; ++o) {
      quant::dequantize_row(t, q.data() + o * rb, wd.data(), n_in);
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n_in; ++i) ref += static_cast<double>(wd[i]) * x[i], mag += std::fabs(wd[i] * x[i]);
      // Activation quantization error <= sum |w||x| / 127 (8-bit symmetric rounding, half a step).
      EXPECT_NEAR(y[o], ref, mag / 127.0 + 1e-4) << traits(t).name << " row " << o;
    }
  }
}

TEST_F(CpuBackend, RmsNormWithAndWithoutWeight) {
  auto x = randn(40, 5);
  auto w = randn(20, 6);
  std::vector<float> y(40), y2(40);
  be->rms_norm(x.data(), w.data(), 20, 2, 1e-6f, y.data());
  be->rms_norm(x.data(), nullptr, 20, 2, 1e-6f, y2.data());
  for (int r = 0; r < 2; ++r) {
    double ss = 0;
    for (int i = 0; i < 20; ++i) ss += x[r * 20 + i] * x[r * 20 + i];
    double inv = 1 / std::sqrt(ss / 20 + 1e-6);
    for (int i = 0; i < 20; ++i) {
      EXPECT_NEAR(y[r * 20 + i], x[r * 20 + i] * inv * w[i], 1e-5);
      EXPECT_NEAR(y2[r * 20 + i], x[r * 20 + i] * inv, 1e-5);
    }
  }
}

TEST_F(CpuBackend, RopeTailRotatesAdjacentPairsAndInverts) {
  const int64_t heads = 2, hd = 16;
  std::vector<double> freqs = {1.0, 0.1, 0.01};  // rotates the last 6 dims
  auto x = randn(heads * hd, 7);
  auto y = x;
  const int64_t pos = 12345;
  be->rope_tail(y.data(), 1, heads, hd, freqs, pos, 0, false);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < hd - 6; ++i) EXPECT_EQ(y[h * hd + i], x[h * hd + i]);
    for (int k = 0; k < 3; ++k) {
      std::complex<double> z(x[h * hd + 10 + 2 * k], x[h * hd + 11 + 2 * k]);
      z *= std::polar(1.0, pos * freqs[k]);
      EXPECT_NEAR(y[h * hd + 10 + 2 * k], z.real(), 1e-5);
      EXPECT_NEAR(y[h * hd + 11 + 2 * k], z.imag(), 1e-5);
    }
  }
  be->rope_tail(y.data(), 1, heads, hd, freqs, pos, 0, true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
}

TEST_F(CpuBackend, SinkAttentionMatchesFormula) {
  const int64_t heads = 3, hd = 8, n = 5;
  auto q = randn(heads * hd, 8);
  auto kv = randn(n * hd, 9);
  // All n rows as compressed rows (empty window: window 1 at position 0 would add one row, so
  // the ring is one of the n rows itself: row 0 at position 0, the other n-1 compressed).
  float sinks[3] = {0.5f, -2.0f, 3.0f};
  std::vector<float> out(heads * hd);
  const float scale = 0.3f;
  AttnKv kvs{kv.data(), 1, 0, kv.data() + hd, n - 1};
  be->attention(q.data(), heads, hd, kvs, sinks, scale, out.data());
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> e(n);
    double den = std::exp(static_cast<double>(sinks[h]));  // sink: denominator only, unscaled
    for (int64_t k = 0; k < n; ++k) {
      double s = 0;
      for (int64_t i = 0; i < hd; ++i) s += q[h * hd + i] * kv[k * hd + i];
      den += e[k] = std::exp(s * scale);
    }
    for (int64_t i = 0; i < hd; ++i) {
      double o = 0;
      for (int64_t k = 0; k < n; ++k) o += e[k] * kv[k * hd + i];
      EXPECT_NEAR(out[h * hd + i], o / den, 1e-5);
    }
  }
}

TEST_F(CpuBackend, HcPostUsesTransposedComb) {
  const int hc = 3;
  const int64_t n = 4;
  auto X = randn(hc * n, 10);
  auto y = randn(n, 11);
  float post[3] = {0.5f, 1.5f, 1.0f};
  float comb[9] = {0.1f, 0.2f, 0.7f, 0.3f, 0.3f, 0.4f, 0.6f, 0.5f, -0.1f};
  std::vector<float> out(hc * n);
  be->hc_post(y.data(), X.data(), post, comb, 1, hc, n, out.data());
  for (int j = 0; j < hc; ++j)
    for (int64_t d = 0; d < n; ++d) {
      double want = post[j] * y[d];
      for (int i = 0; i < hc; ++i) want += comb[i * hc + j] * X[i * n + d];  // X'[j] = sum_i M[i][j] X[i]
      EXPECT_NEAR(out[j * n + d], want, 1e-6);
    }
}

TEST_F(CpuBackend, SwigluClampsGateAboveAndUpBothSides) {
  float g[4] = {12.0f, -30.0f, 1.0f, 5.0f}, u[4] = {11.0f, -12.0f, 2.0f, -3.0f}, h[4];
  const float two = 2.0f;
  be->swiglu(g, u, 1, 4, 10.0f, &two, h);
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  EXPECT_NEAR(h[0], silu(10) * 10 * 2, 1e-4);
  EXPECT_NEAR(h[1], silu(-30) * -10 * 2, 1e-6);  // gate is not clamped from below
  EXPECT_NEAR(h[2], silu(1) * 2 * 2, 1e-5);
  EXPECT_NEAR(h[3], silu(5) * -3 * 2, 1e-5);
}

TEST_F(CpuBackend, CompressorPoolPerDimensionAndEmpty) {
  // One lane, ratio 2, dim 2: slot rows are (value, score) per dimension.
  float kv[4] = {1, 10, 3, 20}, sc[4] = {0, -INFINITY, std::log(3.0f), -INFINITY};
  float out[2];
  be->compressor_pool(kv, sc, 2, 1, 2, out);
  EXPECT_NEAR(out[0], 0.25 * 1 + 0.75 * 3, 1e-6);
  EXPECT_EQ(out[1], 0.0f);
}

TEST_F(CpuBackend, CompressorPoolTwoLanesReadsPreviousWindowThroughLaneA) {
  // Two lanes, ratio 1, dim 1: rows are [laneA, laneB]; slot 0 reads column 0 (previous
  // window), slot 1 column 1 (current window), trap 9.
  float kv[4] = {2, 100, 100, 4}, sc[4] = {0, 50, 50, 0};
  float out[1];
  be->compressor_pool(kv, sc, 1, 2, 1, out);
  EXPECT_NEAR(out[0], 3.0, 1e-6);
}

TEST_F(CpuBackend, CompressorStoreAddsApeRowToScore) {
  float ape[6] = {1, 2, 3, 10, 20, 30};  // 2 rows of width 3
  Matrix m{GgmlType::F32, reinterpret_cast<const uint8_t*>(ape), 3, 2, 3 * sizeof(float)};
  float kvp[3] = {7, 8, 9}, scp[3] = {0.5f, 0.25f, -1};
  // One lane, ratio 2: position 5 is slot 5 % 2 = 1 and uses ape row 1.
  float kv[6] = {}, sc[6] = {};
  be->compressor_store(m, 5, 2, 1, kvp, scp, 3, kv, sc);
  EXPECT_EQ(kv[0], 0.0f);
  EXPECT_EQ(kv[5], 9.0f);
  EXPECT_EQ(sc[3], 10.5f);
  EXPECT_EQ(sc[5], 29.0f);
  // Two lanes: the current window's slots follow the previous window's ratio slots.
  float kv2[12] = {}, sc2[12] = {};
  be->compressor_store(m, 4, 2, 2, kvp, scp, 3, kv2, sc2);  // slot 2 + 4 % 2 = 2, ape row 0
  EXPECT_EQ(kv2[6], 7.0f);
  EXPECT_EQ(sc2[6], 1.5f);
  EXPECT_EQ(sc2[8], 2.0f);
}

TEST_F(CpuBackend, StoreRowWritesSlotPosModRing) {
  float ring[6] = {}, src[2] = {4, 5};
  be->store_row(ring, 3, 2, 7, src);  // 7 % 3 = 1
  EXPECT_EQ(ring[2], 4.0f);
  EXPECT_EQ(ring[3], 5.0f);
  EXPECT_EQ(ring[0], 0.0f);
}

TEST_F(CpuBackend, CompressorEmitOnlyAtWindowEnds) {
  // ratio 2, one lane, dim 2: slots hold kv rows {1,2} and {3,4} with equal scores, so the
  // pooled row is their mean {2,3}; RMSNorm (weight 1) scales it; no RoPE pairs, no rounding.
  float kv[4] = {1, 2, 3, 4}, sc[4] = {0, 0, 0, 0}, rows[4] = {-1, -1, -1, -1};
  const float norm[2] = {1, 1};
  CompressorEmit e;
  e.kv = kv, e.score = sc, e.ratio = 2, e.lanes = 1, e.dim = 2, e.rows = rows, e.norm = norm, e.eps = 0;
  be->compressor_emit(e, 2);  // (2 + 1) % 2 != 0: nothing
  EXPECT_EQ(rows[0], -1.0f);
  be->compressor_emit(e, 3);  // window [2, 3] ends: row (3 + 1) / 2 - 1 = 1
  EXPECT_EQ(rows[0], -1.0f);
  const double r = std::sqrt((4.0 + 9.0) / 2.0);
  EXPECT_NEAR(rows[2], 2.0 / r, 1e-6);
  EXPECT_NEAR(rows[3], 3.0 / r, 1e-6);
}

TEST_F(CpuBackend, TopKHighestWithLowerIndexOnTiesInAscendingOrder) {
  float s[6] = {1, 5, 3, 5, -2, 3};
  int32_t idx[3];
  be->top_k(s, 6, 3, idx);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 2);  // 3.0 at index 2 beats 3.0 at index 5
  EXPECT_EQ(idx[2], 3);
}

TEST_F(CpuBackend, MoeRouteBiasSelectsOnlyAndHashTableRoutes) {
  // Expert 2 has the lowest logit but a bias that selects it; its weight uses the unbiased score.
  float logits[4] = {1.0f, 2.0f, -1.0f, 0.5f};
  float bias[4] = {0, 0, 5.0f, 0};
  RouteParams p{4, 2, bias, nullptr, true, 1.5f};
  int32_t ex[2];
  float w[2];
  int32_t tok = 0;
  be->moe_route(logits, &tok, 1, p, ex, w);
  auto s = [](float x) { return std::sqrt(std::log1p(std::exp(x))); };
  EXPECT_EQ(ex[0], 2);
  EXPECT_EQ(ex[1], 1);
  EXPECT_NEAR(w[0], s(-1.0f) / (s(-1.0f) + s(2.0f)) * 1.5f, 1e-6);
  const int32_t table[4] = {3, 0, 1, 2};  // two tokens x k=2
  RouteParams h{4, 2, nullptr, table, false, 1.0f};
  tok = 1;
  be->moe_route(logits, &tok, 1, h, ex, w);
  EXPECT_EQ(ex[0], 1);
  EXPECT_EQ(ex[1], 2);
  EXPECT_NEAR(w[1], s(-1.0f), 1e-6);
}

TEST_F(CpuBackend, IndexerScoresReluBeforeHeadWeights) {
  const int64_t heads = 3, hd = 8, n = 6;
  auto q = randn(heads * hd, 12);
  auto keys = randn(n * hd, 13);
  float w[3] = {0.5f, -1.0f, 2.0f};
  std::vector<float> s(n);
  be->indexer_scores(q.data(), w, 0.5f, heads, hd, keys.data(), n, s.data());
  for (int64_t c = 0; c < n; ++c) {
    double want = 0;
    for (int64_t h = 0; h < heads; ++h) {
      double d = 0;
      for (int64_t i = 0; i < hd; ++i) d += q[h * hd + i] * keys[c * hd + i];
      want += w[h] * 0.5 * std::max(0.0, d);
    }
    EXPECT_NEAR(s[c], want, 1e-5);
  }
}

TEST_F(CpuBackend, HcPreScalesMixesByStreamRmsAndSumsRawStreams) {
  const int hc = 4;
  const int64_t n = 8, rows = 2;
  auto X = randn(rows * hc * n, 14);
  auto mix0 = randn(rows * 24, 15);
  auto base = randn(24, 16);
  const float scale[3] = {0.5f, 1.5f, 0.8f};
  HcParams p{hc, n, scale, base.data(), 20, 1e-6f, 1e-6f};
  auto mix = mix0;
  std::vector<float> x_in(rows * n), post(rows * hc), comb(rows * hc * hc);
  be->hc_pre(X.data(), mix.data(), rows, p, x_in.data(), post.data(), comb.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < hc * n; ++i) ss += X[r * hc * n + i] * X[r * hc * n + i];
    const double inv = 1 / std::sqrt(ss / (hc * n) + 1e-6);
    // Expected split from the (independently tested) numerics on the RMS-scaled mixes.
    std::vector<float> m(24);
    for (int k = 0; k < 24; ++k) m[k] = static_cast<float>(mix0[r * 24 + k] * inv);
    float pre[4], post_w[4], comb_w[16];
    hc_split_mix(m.data(), scale, base.data(), hc, 20, 1e-6f, pre, post_w, comb_w);
    for (int i = 0; i < hc; ++i) EXPECT_NEAR(post[r * hc + i], post_w[i], 1e-5);
    for (int i = 0; i < 16; ++i) EXPECT_NEAR(comb[r * 16 + i], comb_w[i], 1e-5);
    for (int64_t d = 0; d < n; ++d) {
      double want = 0;  // un-normalized streams
      for (int s = 0; s < hc; ++s) want += pre[s] * X[r * hc * n + s * n + d];
      EXPECT_NEAR(x_in[r * n + d], want, 1e-5);
    }
  }
  // Head mode: n_hc mixes, pre only, sigma(m*scale0 + base) + eps.
  std::vector<float> hmix(rows * hc);
  for (size_t i = 0; i < hmix.size(); ++i) hmix[i] = mix0[i];
  auto hm = hmix;
  std::vector<float> h(rows * n);
  be->hc_pre(X.data(), hm.data(), rows, p, h.data(), nullptr, nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < hc * n; ++i) ss += X[r * hc * n + i] * X[r * hc * n + i];
    const double inv = 1 / std::sqrt(ss / (hc * n) + 1e-6);
    for (int64_t d = 0; d < n; ++d) {
      double want = 0;
      for (int s = 0; s < hc; ++s) {
        double pre = 1 / (1 + std::exp(-(hmix[r * hc + s] * inv * scale[0] + base[s]))) + 1e-6;
        want += pre * X[r * hc * n + s * n + d];
      }
      EXPECT_NEAR(h[r * n + d], want, 1e-5);
    }
  }
}
