// The analysis decorator: outputs equal the wrapped backend's bit for bit; the statistics it
// collects equal sums computed here from the op inputs (matmul, matmul_grouped, moe_experts
// including the recomputed down input), the profile counts moe_route's choices, and a prune
// mask keeps pruned experts out of routing without changing the weights of the others.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <algorithm>

#include "compute/analysis_backend.h"
#include "compute/backend.h"
#include "core/error.h"

using namespace ds4;
using namespace ds4::compute;

namespace {

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Matrix f32_matrix(const std::vector<float>& w, int64_t n_in, int64_t n_out) {
  return {GgmlType::F32, reinterpret_cast<const uint8_t*>(w.data()), n_in, n_out, static_cast<size_t>(n_in) * 4};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST(AnalysisBackend, MatmulSumsAndTransparentOutputs) {
  auto cpu = make_cpu_backend(nullptr);
  const int64_t n_in = 16, n_out = 6, rows = 5;
  const auto w = randv(static_cast<size_t>(n_in * n_out), 1), x = randv(static_cast<size_t>(n_in * rows), 2);
  auto cfg = std::make_shared<AnalysisConfig>();
  cfg->imatrix = true;
  cfg->weights.push_back({reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4, "blk.0.attn_q_a.weight", n_in, 1, -1});
  auto stats = std::make_shared<AnalysisStats>();
  AnalysisBackend an(*cpu, stats, cfg);
  std::vector<float> y1(static_cast<size_t>(rows * n_out)), y2(y1.size());
  cpu->matmul(f32_matrix(w, n_in, n_out), x.data(), rows, y1.data());
  an.matmul(f32_matrix(w, n_in, n_out), x.data(), rows, y2.data(), 0, 0);
  EXPECT_TRUE(same_bits(y1, y2));
  an.matmul(f32_matrix(w, n_in, n_out), x.data(), 2, y2.data(), 0, 0);  // the first 2 rows again
  const auto& e = stats->entries[0];
  ASSERT_EQ(e.counts.size(), 1u);
  EXPECT_EQ(e.counts[0], rows + 2);
  for (int64_t j = 0; j < n_in; ++j) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += double(x[r * n_in + j]) * x[r * n_in + j];
    for (int64_t r = 0; r < 2; ++r) s += double(x[r * n_in + j]) * x[r * n_in + j];
    EXPECT_DOUBLE_EQ(e.sums[j], s) << j;
  }

  // A weight whose product the model scales by the row's inverse RMS counts normalized rows.
  {
    auto c2 = std::make_shared<AnalysisConfig>(*cfg);
    c2->weights[0].rms_normalized_input = true;
    c2->weights[0].rms_eps = 1e-6f;
    auto st2 = std::make_shared<AnalysisStats>();
    AnalysisBackend an2(*cpu, st2, c2);
    an2.matmul(f32_matrix(w, n_in, n_out), x.data(), rows, y2.data(), 0, 0);
    EXPECT_TRUE(same_bits(y1, y2));  // the product itself is untouched
    std::vector<double> want(n_in, 0);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < n_in; ++j) ss += double(x[r * n_in + j]) * x[r * n_in + j];
      const double inv = 1 / std::sqrt(ss / n_in + 1e-6);
      for (int64_t j = 0; j < n_in; ++j) want[j] += x[r * n_in + j] * inv * x[r * n_in + j] * inv;
    }
    for (int64_t j = 0; j < n_in; ++j) EXPECT_NEAR(st2->entries[0].sums[j], want[j], 1e-5 * want[j]) << j;
  }

  // Grouped: each group's slice counts as one more input row of the same columns.
  const int64_t groups = 2;
  const auto xg = randv(static_cast<size_t>(groups * n_in * rows), 3);
  std::vector<float> g1(static_cast<size_t>(rows * n_out)), g2(g1.size());
  cpu->matmul_grouped(f32_matrix(w, n_in, n_out), groups, xg.data(), rows, g1.data());
  stats->entries[0].sums.clear();
  an.matmul_grouped(f32_matrix(w, n_in, n_out), groups, xg.data(), rows, g2.data(), 0, 0);
  EXPECT_TRUE(same_bits(g1, g2));
  EXPECT_EQ(stats->entries[0].counts[0], rows * groups);
  double s0 = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) s0 += double(xg[r * groups * n_in + g * n_in]) * xg[r * groups * n_in + g * n_in];
  EXPECT_DOUBLE_EQ(stats->entries[0].sums[0], s0);
}

TEST(AnalysisBackend, ExpertsProfileAndPruning) {
  auto cpu = make_cpu_backend(nullptr);
  const int64_t d = 32, ff = 8, E = 4, K = 2, rows = 7;
  const float limit = 3.0f;
  const auto gw = randv(static_cast<size_t>(E * ff * d), 10, 0.3f), uw = randv(gw.size(), 11, 0.3f),
             dw = randv(static_cast<size_t>(E * d * ff), 12, 0.3f), rw = randv(static_cast<size_t>(E * d), 13);
  auto set = [](const std::vector<float>& w, int64_t n_in, int64_t n_out, int64_t n) {
    ExpertSet s;
    s.first = {GgmlType::F32, reinterpret_cast<const uint8_t*>(w.data()), n_in, n_out, static_cast<size_t>(n_in) * 4};
    s.n_expert = n;
    s.expert_stride = static_cast<size_t>(n_in * n_out) * 4;
    return s;
  };
  const ExpertSet G = set(gw, d, ff, E), U = set(uw, d, ff, E), D = set(dw, ff, d, E);
  auto kw = [](const std::vector<float>& w, const char* name, int64_t n_in, int64_t n_mat, int router) {
    return KnownWeight{reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4, name, n_in, n_mat, router};
  };
  auto cfg = std::make_shared<AnalysisConfig>();
  cfg->imatrix = cfg->profile = true;
  cfg->n_layer = 1, cfg->n_expert = E;
  cfg->weights = {kw(gw, "blk.0.ffn_gate_exps.weight", d, E, -1), kw(uw, "blk.0.ffn_up_exps.weight", d, E, -1),
                  kw(dw, "blk.0.ffn_down_exps.weight", ff, E, -1), kw(rw, "blk.0.ffn_gate_inp.weight", d, 1, 0)};
  auto stats = std::make_shared<AnalysisStats>();
  AnalysisBackend an(*cpu, stats, cfg);

  const auto x = randv(static_cast<size_t>(rows * d), 20);
  std::vector<float> logits(static_cast<size_t>(rows * E)), l2(logits.size());
  cpu->matmul(f32_matrix(rw, d, E), x.data(), rows, logits.data());
  an.matmul(f32_matrix(rw, d, E), x.data(), rows, l2.data(), 0, 0);
  ASSERT_TRUE(same_bits(logits, l2));
  RouteParams rp{E, K, nullptr, nullptr, true, 1.5f};
  std::vector<int32_t> ex1(static_cast<size_t>(rows * K)), ex2(ex1.size());
  std::vector<float> wt1(ex1.size()), wt2(ex1.size());
  cpu->moe_route(logits.data(), nullptr, rows, rp, ex1.data(), wt1.data());
  an.moe_route(l2.data(), nullptr, rows, rp, ex2.data(), wt2.data());
  ASSERT_EQ(ex1, ex2);
  ASSERT_TRUE(same_bits(wt1, wt2));
  std::vector<float> y1(static_cast<size_t>(rows * d)), y2(y1.size());
  cpu->moe_experts(G, U, D, x.data(), ex1.data(), wt1.data(), rows, K, limit, y1.data());
  an.moe_experts(G, U, D, x.data(), ex2.data(), wt2.data(), rows, K, limit, y2.data());
  EXPECT_TRUE(same_bits(y1, y2));

  // Profile: counts and weight sums of moe_route's choices.
  for (int64_t e = 0; e < E; ++e) {
    uint64_t c = 0;
    double m = 0;
    for (size_t i = 0; i < ex1.size(); ++i)
      if (ex1[i] == e) ++c, m += wt1[i];
    EXPECT_EQ(stats->count[0][e], c) << e;
    EXPECT_DOUBLE_EQ(stats->weight[0][e], m) << e;
  }
  // imatrix per expert: gate/up see the routed tokens' rows; down sees silu(min(g, L)) * clamp(u)
  // of that expert (computed here in double; the decorator's floats differ by roundings only).
  for (int64_t e = 0; e < E; ++e) {
    std::vector<double> sx(d, 0), sh(ff, 0);
    double cnt = 0;
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t k = 0; k < K; ++k) {
        if (ex1[t * K + k] != e) continue;
        ++cnt;
        for (int64_t j = 0; j < d; ++j) sx[j] += double(x[t * d + j]) * x[t * d + j];
        for (int64_t o = 0; o < ff; ++o) {
          double g = 0, u = 0;
          for (int64_t j = 0; j < d; ++j) {
            g += double(gw[(e * ff + o) * d + j]) * x[t * d + j];
            u += double(uw[(e * ff + o) * d + j]) * x[t * d + j];
          }
          g = std::min(g, double(limit));
          u = std::clamp(u, -double(limit), double(limit));
          const double h = g / (1 + std::exp(-g)) * u;
          sh[o] += h * h;
        }
      }
    for (const char* which : {"gate", "up"}) {
      const auto& en = stats->entries[which[0] == 'g' ? 0 : 1];
      EXPECT_EQ(en.counts[e], cnt);
      for (int64_t j = 0; j < d; ++j) EXPECT_DOUBLE_EQ(en.sums[e * d + j], sx[j]) << which << " " << e << " " << j;
    }
    const auto& dn = stats->entries[2];
    EXPECT_EQ(dn.counts[e], cnt);
    for (int64_t o = 0; o < ff; ++o)  // float matmul and swiglu vs double: relative 1e-4
      EXPECT_NEAR(dn.sums[e * ff + o], sh[o], 1e-4 * std::max(1.0, sh[o])) << e << " " << o;
  }

  // Pruning: expert 1 and 2 masked out of layer 0.
  auto pcfg = std::make_shared<AnalysisConfig>(*cfg);
  pcfg->imatrix = pcfg->profile = false;
  pcfg->pruned = {{0, 1, 1, 0}};
  AnalysisBackend pr(*cpu, std::make_shared<AnalysisStats>(), pcfg);
  pr.matmul(f32_matrix(rw, d, E), x.data(), rows, l2.data(), 0, 0);
  std::vector<int32_t> ex3(ex1.size());
  std::vector<float> wt3(ex1.size());
  pr.moe_route(l2.data(), nullptr, rows, rp, ex3.data(), wt3.data());
  std::vector<float> s(E);
  for (int64_t t = 0; t < rows; ++t) {
    std::set<int32_t> chosen(ex3.begin() + t * K, ex3.begin() + (t + 1) * K);
    EXPECT_EQ(chosen, (std::set<int32_t>{0, 3})) << t;  // only two experts left, k = 2
    // Weights: the unbiased scores of the chosen experts, normalized as without the mask.
    float sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += s[k] = std::sqrt(std::log1p(std::exp(logits[t * E + ex3[t * K + k]])));
    for (int64_t k = 0; k < K; ++k) EXPECT_NEAR(wt3[t * K + k], s[k] / sum * 1.5f, 1e-5f);
  }
}
