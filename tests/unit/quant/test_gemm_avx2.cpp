// AVX2 row-group kernels (kernels.h gemm_*_avx2, taken by gemm_kernel on CPUs without
// AVX-512 VNNI) and the AVX2 per-row IQ2_XXS / Q2_K dots: every (row, token) output must equal
// the scalar kernel's float bit for bit, for random block bytes (any quants, -128 included in
// the activations or not), extreme weight scales (zeros, denormals, the largest halves,
// infinities, NaNs) and activation scales (0, denormal, huge, infinite, NaN), row counts that
// do not fill a group of 8, every block-count remainder and padded strides.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ggml_quant.h"
#include "quant/kernels.h"
#include "quant/quant.h"
#if DS4_HAVE_IQ2_XXS
#include "quant/iq2_xxs.h"
#endif

namespace ds4::test {
namespace {

struct Format {
  GgmlType type;
  size_t block_bytes;
  std::vector<size_t> half_offsets;  // f16 scales inside a weight block
  quant::DotFn scalar, avx2;
  quant::GemmKernel gemm;
};

std::vector<Format> formats() {
  std::vector<Format> f;
#if DS4_HAVE_AVX2_BUILD
#if DS4_HAVE_IQ2_XXS_AVX2
  f.push_back({GgmlType::IQ2_XXS, 66, {0}, quant::vec_dot_iq2_xxs_q8_K_scalar, quant::vec_dot_iq2_xxs_q8_K_avx2,
               quant::gemm_iq2_xxs_avx2});
#endif
  f.push_back({GgmlType::Q2_K, 84, {80, 82}, quant::vec_dot_q2_K_q8_K_scalar, quant::vec_dot_q2_K_q8_K_avx2,
               quant::gemm_q2_K_avx2});
#endif
  return f;
}

float act_scale(std::mt19937& rng) {
  switch (rng() % 16) {
    case 0: return 0.0f;
    case 1: return std::numeric_limits<float>::denorm_min() * static_cast<float>(1 + rng() % 1000);
    case 2: return std::numeric_limits<float>::max() / static_cast<float>(1 + rng() % 4);
    case 3: return std::numeric_limits<float>::infinity();
    case 4: return std::numeric_limits<float>::quiet_NaN();
    case 5: return -std::ldexp(static_cast<float>(rng() % 4096), -static_cast<int>(rng() % 40));
    default: return std::ldexp(static_cast<float>(rng() % 4096), -static_cast<int>(rng() % 40));
  }
}

// Q8_K activation blocks: random quants (-128 allowed unless no_min), bsums consistent with them.
std::vector<uint8_t> random_acts(std::mt19937& rng, int64_t nb, bool extreme, bool no_min) {
  auto a = random_bytes(rng, 292 * static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = &a[b * 292];
    const float d = extreme ? act_scale(rng) : std::ldexp(static_cast<float>(rng() % 4096), -static_cast<int>(rng() % 40));
    std::memcpy(blk, &d, 4);
    if (no_min)
      for (int i = 0; i < 256; ++i)
        if (blk[4 + i] == 0x80) blk[4 + i] = static_cast<uint8_t>(rng() % 2 ? 0x81 : 0x7f);
    if (rng() % 8 == 0)  // all quants at an extreme
      for (int i = 0; i < 256; ++i) blk[4 + i] = no_min ? (i % 2 ? 0x81 : 0x7f) : 0x80;
    const auto* qs = reinterpret_cast<const int8_t*>(blk + 4);
    for (int j = 0; j < 16; ++j) {
      int16_t s = 0;
      for (int k = 0; k < 16; ++k) s = static_cast<int16_t>(s + qs[16 * j + k]);
      std::memcpy(blk + 4 + 256 + 2 * j, &s, 2);
    }
  }
  return a;
}

void expect_same(float s, float v, const std::string& what) {
  if (std::isnan(s) && std::isnan(v)) return;  // NaN payloads may differ (see test_dot.cpp)
  ASSERT_EQ(bits(s), bits(v)) << what << " scalar=" << s << " avx2=" << v;
}

TEST(GemmAvx2, RowGroupKernelsEqualScalar) {
  if (!quant::have_avx2()) GTEST_SKIP() << "CPU without AVX2/FMA/F16C";
  std::mt19937 rng(1616);
  const int64_t row_counts[] = {1, 3, 7, 8, 9, 16, 23, 40};
  for (const auto& f : formats()) {
    for (int nb = 1; nb <= 19; ++nb)
      for (int64_t rows : row_counts)
        for (int64_t tokens = 1; tokens <= 4; ++tokens)
          for (int mode = 0; mode < 3; ++mode) {  // 0: plain, 1: extreme scales, 2: -128 allowed
            if ((nb + rows + tokens + mode) % 3 != 0 && nb > 2) continue;  // a spread of shapes, not all
            const size_t w_stride = f.block_bytes * nb + (rows % 2 ? 6 : 0);
            const size_t a_stride = 292 * nb + (tokens % 2 ? 10 : 0);
            auto w = random_bytes(rng, w_stride * rows);
            for (int64_t r = 0; r < rows; ++r)
              for (int b = 0; b < nb; ++b)
                for (size_t off : f.half_offsets) {
                  const uint16_t h = mode == 1 && rng() % 3 == 0 ? edge_or_random_half(rng)
                                                                : static_cast<uint16_t>(0x0400 + rng() % 0x7400);
                  std::memcpy(&w[r * w_stride + b * f.block_bytes + off], &h, 2);
                }
            std::vector<uint8_t> a(a_stride * tokens);
            for (int64_t t = 0; t < tokens; ++t) {
              auto at = random_acts(rng, nb, mode == 1, mode != 2);
              std::memcpy(&a[t * a_stride], at.data(), at.size());
            }
            const int64_t n = 256 * nb, ys = rows + 3;
            std::vector<float> y(static_cast<size_t>(tokens * ys), -7.0f);
            f.gemm(w.data(), w_stride, rows, a.data(), a_stride, tokens, y.data(), ys, n);
            const std::string shape = std::string(traits(f.type).name) + " nb=" + std::to_string(nb) +
                                      " rows=" + std::to_string(rows) + " tokens=" + std::to_string(tokens) +
                                      " mode=" + std::to_string(mode);
            for (int64_t t = 0; t < tokens; ++t) {
              for (int64_t r = 0; r < rows; ++r) {
                const float s = f.scalar(w.data() + r * w_stride, a.data() + t * a_stride, n);
                const std::string what = shape + " row " + std::to_string(r) + " token " + std::to_string(t);
                expect_same(s, y[t * ys + r], what + " (gemm)");
                expect_same(s, f.avx2(w.data() + r * w_stride, a.data() + t * a_stride, n), what + " (per-row)");
              }
              for (int64_t r = rows; r < ys; ++r) ASSERT_EQ(y[t * ys + r], -7.0f) << "wrote past the rows, " << shape;
            }
          }
  }
}

// The AVX2 Q8_0 dot multiplies |w| by a * sign(w) with maddubs, which is exact unless an
// activation byte is -128 (it then takes the widening kernel): weights with any bytes, -128
// included, activations with and without -128, extreme halves on both sides, every block
// count remainder mod 8.
TEST(GemmAvx2, Q8_0DotEqualsScalar) {
#if DS4_HAVE_AVX2_BUILD
  if (!quant::have_avx2()) GTEST_SKIP() << "CPU without AVX2/FMA/F16C";
  std::mt19937 rng(1618);
  for (int rep = 0; rep < 400; ++rep) {
    const int nb = 1 + static_cast<int>(rng() % 41);
    const int mode = rep % 3;  // 0: plain, 1: extreme scales, 2: -128 allowed in the activations
    auto w = random_bytes(rng, 34 * static_cast<size_t>(nb)), a = random_bytes(rng, 34 * static_cast<size_t>(nb));
    for (int b = 0; b < nb; ++b) {
      const uint16_t hw = mode == 1 ? edge_or_random_half(rng) : static_cast<uint16_t>(0x0400 + rng() % 0x7400);
      const uint16_t ha = mode == 1 ? edge_or_random_half(rng) : static_cast<uint16_t>(0x0400 + rng() % 0x7400);
      std::memcpy(&w[34 * b], &hw, 2);
      std::memcpy(&a[34 * b], &ha, 2);
      if (rng() % 8 == 0)
        for (int i = 0; i < 32; ++i) w[34 * b + 2 + i] = 0x80;  // all -128 weights
      for (int i = 0; i < 32; ++i) {
        uint8_t& q = a[34 * b + 2 + i];
        if (mode != 2 && q == 0x80) q = 0x81;
      }
    }
    const int64_t n = 32 * nb;
    expect_same(quant::vec_dot_q8_0_q8_0_scalar(w.data(), a.data(), n), quant::vec_dot_q8_0_q8_0_avx2(w.data(), a.data(), n),
                "q8_0 nb=" + std::to_string(nb) + " mode=" + std::to_string(mode));
  }
#else
  GTEST_SKIP() << "built without the AVX2 kernels";
#endif
}

// Real quantized rows and activations (what a model runs), through gemm_kernel's choice.
TEST(GemmAvx2, QuantizedRowsThroughGemmKernel) {
  if (!quant::have_avx2()) GTEST_SKIP() << "CPU without AVX2/FMA/F16C";
  std::mt19937 rng(1617);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 2048, rows = 45, tokens = 3;
  std::vector<float> wf(static_cast<size_t>(rows * n)), xf(static_cast<size_t>(tokens * n)), imat(static_cast<size_t>(n));
  for (auto& v : wf) v = nd(rng);
  for (auto& v : xf) v = nd(rng) * 3.0f;
  for (auto& v : imat) v = 0.5f + std::fabs(nd(rng));
  for (const auto& f : formats()) {
    const quant::GemmKernel gemm = quant::gemm_kernel(f.type);
    if (!gemm) continue;  // no blocked kernel on this CPU path
    const size_t ws = f.block_bytes * static_cast<size_t>(n / 256), as = 292 * static_cast<size_t>(n / 256);
    std::vector<uint8_t> w(ws * rows), a(as * tokens);
    quant::quantize_rows(f.type, wf.data(), w.data(), rows, n, imat.data());
    for (int64_t t = 0; t < tokens; ++t) quant::quantize_activation_row(GgmlType::Q8_K, xf.data() + t * n, a.data() + t * as, n);
    std::vector<float> y(static_cast<size_t>(tokens * rows));
    gemm(w.data(), ws, rows, a.data(), as, tokens, y.data(), rows, n);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < rows; ++r)
        expect_same(f.scalar(w.data() + r * ws, a.data() + t * as, n), y[t * rows + r],
                    std::string(traits(f.type).name) + " quantized row " + std::to_string(r));
  }
}

}  // namespace
}  // namespace ds4::test
