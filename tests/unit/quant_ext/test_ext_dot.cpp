// Dot products of the further formats. The AVX2 kernel must return the scalar kernel's float
// bit for bit (random blocks, random activation bytes including -128, every block-count
// remainder mod 8), and the scalar result must lie within a stated bound of the exact dot of
// ggml's own decoded weights and activations.
#include <gtest/gtest.h>

#include <cmath>

#include "ext_formats.h"

namespace ds4::test {
namespace {

constexpr double kU = 1.0 / (1 << 24);

// Activation blocks in the format's vec_dot_type: random quants (all 256 byte values) with a
// random finite scale.
std::vector<uint8_t> random_activation(std::mt19937& rng, GgmlType act, int nb_weight_blocks, int weight_block_elems) {
  const int64_t n = static_cast<int64_t>(nb_weight_blocks) * weight_block_elems;
  const auto& t = traits(act);
  auto a = random_bytes(rng, row_bytes(t, n));
  const int64_t nb = n / t.block_elems;
  for (int64_t b = 0; b < nb; ++b) {
    if (act == GgmlType::Q8_K) {
      const float d = std::ldexp(static_cast<float>(rng() % 4096), -static_cast<int>(rng() % 40));
      std::memcpy(&a[t.block_bytes * b], &d, 4);
    } else {
      const uint16_t h = static_cast<uint16_t>(0x0400 + rng() % 0x7400);
      std::memcpy(&a[t.block_bytes * b], &h, 2);
      if (act == GgmlType::Q8_1) {
        const uint16_t s = static_cast<uint16_t>(0x0400 + rng() % 0x7400) | static_cast<uint16_t>((rng() & 1) << 15);
        std::memcpy(&a[t.block_bytes * b + 2], &s, 2);
      }
    }
  }
  return a;
}

TEST(DotExt, Avx2EqualsScalarOnRandomBlocks) {
  if (!quant::have_avx2()) GTEST_SKIP() << "CPU without AVX2/FMA/F16C";
  std::mt19937 rng(2024);
  int checked = 0;
  for (const auto& f : ext_formats()) {
    ASSERT_NE(f.avx2_dot, nullptr) << f.ggml_name;
    const int be = static_cast<int>(traits(f.type).block_elems);
    const GgmlType act = quant::vec_dot_type(f.type);
    for (int nb = 1; nb <= (be == 32 ? 70 : 25); ++nb)
      for (int rep = 0; rep < 3; ++rep) {
        const auto w = rep == 0 ? random_blocks(rng, f, nb, edge_or_random_half) : random_blocks(rng, f, nb, normal_half);
        const auto a = random_activation(rng, act, nb, be);
        const int64_t n = static_cast<int64_t>(nb) * be;
        const float s = f.scalar_dot(w.data(), a.data(), n), v = f.avx2_dot(w.data(), a.data(), n);
        ++checked;
        if (std::isnan(s) && std::isnan(v)) continue;  // NaN sign/payload may differ (operand order)
        ASSERT_EQ(bits(s), bits(v)) << f.ggml_name << " blocks=" << nb << " rep=" << rep << " scalar=" << s << " avx2=" << v;
      }
  }
  EXPECT_GT(checked, 1000);
}

// Quantized activations from ggml's reference quantizer, and their decoded values.
struct Act {
  std::vector<uint8_t> q;
  std::vector<float> x;
};

Act real_activation(std::mt19937& rng, GgmlType act, int64_t n) {
  const auto x = gaussian_row(rng, static_cast<size_t>(n), 1.f);
  Act r{std::vector<uint8_t>(row_bytes(traits(act), n), 0), std::vector<float>(n)};
  if (act == GgmlType::Q8_K) {
    GgmlQuant::get().quantize_row_q8_K_ref(x.data(), r.q.data(), n);
    GgmlQuant::get().dequantize_q8_K(r.q.data(), r.x.data(), n);
  } else if (act == GgmlType::Q8_0) {
    GgmlQuant::get().quantize_row_q8_0_ref(x.data(), r.q.data(), n);
    GgmlQuant::get().dequantize_q8_0(r.q.data(), r.x.data(), n);
  } else {
    ggml_fn<GgmlQuant::RowQuant>("quantize_row_q8_1_ref")(x.data(), r.q.data(), n);
    quant::dequantize_row(GgmlType::Q8_1, r.q.data(), r.x.data(), n);
  }
  return r;
}

// |scalar - exact| <= (blocks/8 + 16) * 2^-24 * M. exact = sum_i w_i*a_i in double over ggml's
// decoded weights and activations. M bounds the magnitude of every float term the kernel
// rounds: the per-block products d*isum are sums of w_i*a_i over the block, so
// M = sum |w_i*a_i| where weights are a scale times a code; where a block also has an offset
// (Q5_K's mins, Q5_1's m) the scale and offset parts are bounded separately (decoded by ggml
// from copies with the other part zeroed); IQ1's codes grid+-1/8 satisfy |grid|+1/8 <= 1.3*|grid+-1/8|,
// so M = 1.3 * sum |w_i*a_i| there. Q5_1's offset term uses ggml's stored activation sum s
// (fp16), so exact adds m_b * s_b per block instead of m_b * sum(a).
TEST(DotExt, ScalarWithinBoundOfExactDot) {
  std::mt19937 rng(31);
  for (const auto& f : ext_formats()) {
    const int be = static_cast<int>(traits(f.type).block_elems);
    const size_t bb = traits(f.type).block_bytes;
    const GgmlType act = quant::vec_dot_type(f.type);
    for (int64_t n : {256, 4096, 7168}) {
      const int nb = static_cast<int>(n / be);
      auto w = random_blocks(rng, f, nb, moderate_half);
      if (f.e8m0_offset != SIZE_MAX)  // exponents of model-like size: the dot stays finite
        for (int b = 0; b < nb; ++b) w[b * bb + f.e8m0_offset] = static_cast<uint8_t>(110 + rng() % 20);
      const auto a = real_activation(rng, act, n);
      std::vector<float> wf(n);
      ggml_dequant(f)(w.data(), wf.data(), n);
      double exact = 0, mag = 0;
      if (f.type == GgmlType::Q5_K || f.type == GgmlType::Q5_1) {
        auto only_d = w, only_m = w;
        for (int b = 0; b < nb; ++b) {
          std::memset(&only_d[b * bb + 2], 0, 2);  // dmin / m
          std::memset(&only_m[b * bb], 0, 2);      // d
        }
        std::vector<float> wd(n), wm(n);
        ggml_dequant(f)(only_d.data(), wd.data(), n);
        ggml_dequant(f)(only_m.data(), wm.data(), n);
        for (int64_t i = 0; i < n; ++i) mag += (std::fabs(double(wd[i])) + std::fabs(double(wm[i]))) * std::fabs(a.x[i]);
        if (f.type == GgmlType::Q5_K) {
          for (int64_t i = 0; i < n; ++i) exact += double(wf[i]) * a.x[i];
        } else {
          for (int64_t i = 0; i < n; ++i) exact += double(wd[i]) * a.x[i];
          for (int b = 0; b < nb; ++b) {
            uint16_t s;
            std::memcpy(&s, &a.q[36 * b + 2], 2);
            float sf;
            GgmlQuant::get().fp16_to_fp32_row(&s, &sf, 1);
            exact += double(wm[32 * b]) * sf;
          }
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          exact += double(wf[i]) * a.x[i];
          mag += std::fabs(double(wf[i]) * a.x[i]);
        }
        if (f.type == GgmlType::IQ1_S || f.type == GgmlType::IQ1_M) mag *= 1.3;
      }
      const double tol = (static_cast<double>(nb) / 8 + 16) * kU * mag;
      const float got = quant::vec_dot_scalar(f.type, w.data(), a.q.data(), n);
      EXPECT_LE(std::fabs(got - exact), tol) << f.ggml_name << " n=" << n << " exact=" << exact << " got=" << got;
      EXPECT_GT(std::fabs(exact), 10 * tol) << f.ggml_name << " bound too loose to mean anything";
      EXPECT_EQ(bits(got), bits(quant::vec_dot(f.type, w.data(), a.q.data(), n))) << f.ggml_name << " dispatched";
    }
  }
}

TEST(DotExt, VecDotTypesAreGgmls) {
  EXPECT_EQ(quant::vec_dot_type(GgmlType::Q4_0), GgmlType::Q8_0);
  EXPECT_EQ(quant::vec_dot_type(GgmlType::MXFP4), GgmlType::Q8_0);
  EXPECT_EQ(quant::vec_dot_type(GgmlType::IQ4_NL), GgmlType::Q8_0);
  EXPECT_EQ(quant::vec_dot_type(GgmlType::Q5_1), GgmlType::Q8_1);
  EXPECT_EQ(quant::vec_dot_type(GgmlType::Q6_K), GgmlType::Q8_K);
  EXPECT_EQ(quant::vec_dot_type(GgmlType::IQ1_M), GgmlType::Q8_K);
}

}  // namespace
}  // namespace ds4::test
