// Dot products. Integer formats: the AVX2 kernel must return the scalar kernel's float bit
// for bit (random garbage blocks and real quantized rows, every block-count remainder), and
// the scalar result must be within the stated bound of a double-precision dot of ggml's own
// dequantized weights and activations. Float formats: both kernels within the bound in quant.h.
#include <gtest/gtest.h>

#include <cmath>

#include "ggml_quant.h"
#include "quant/kernels.h"
#include "quant/quant.h"

namespace ds4::test {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of float

struct IntFormat {
  GgmlType type;
  size_t block_bytes;
  int block_elems;
  std::vector<size_t> half_offsets;
  quant::DotFn scalar, avx2;
};

std::vector<IntFormat> int_formats() {
#if DS4_HAVE_AVX2_BUILD
  return {{GgmlType::Q8_0, 34, 32, {0}, quant::vec_dot_q8_0_q8_0_scalar, quant::vec_dot_q8_0_q8_0_avx2},
          {GgmlType::Q2_K, 84, 256, {80, 82}, quant::vec_dot_q2_K_q8_K_scalar, quant::vec_dot_q2_K_q8_K_avx2},
          {GgmlType::Q4_K, 144, 256, {0, 2}, quant::vec_dot_q4_K_q8_K_scalar, quant::vec_dot_q4_K_q8_K_avx2}};
#else
  return {};
#endif
}

// Activation blocks with random quants/bsums and a random finite scale.
std::vector<uint8_t> random_activation(std::mt19937& rng, GgmlType wtype, int nb) {
  if (wtype == GgmlType::Q8_0) {
    auto a = random_bytes(rng, 34 * static_cast<size_t>(nb));
    for (int b = 0; b < nb; ++b) {
      const uint16_t h = static_cast<uint16_t>(0x0400 + rng() % 0x7400);
      std::memcpy(&a[34 * b], &h, 2);
    }
    return a;
  }
  auto a = random_bytes(rng, 292 * static_cast<size_t>(nb));
  for (int b = 0; b < nb; ++b) {
    const float d = std::ldexp(static_cast<float>(rng() % 4096), -static_cast<int>(rng() % 40));
    std::memcpy(&a[292 * b], &d, 4);
  }
  return a;
}

TEST(DotExact, Avx2EqualsScalarOnRandomBlocks) {
  if (!quant::have_avx2()) GTEST_SKIP() << "CPU without AVX2/FMA/F16C";
  std::mt19937 rng(71);
  for (const auto& f : int_formats())
    for (int nb = 1; nb <= 41; ++nb)
      for (int rep = 0; rep < 4; ++rep) {
        auto w = random_bytes(rng, f.block_bytes * nb);
        for (int b = 0; b < nb; ++b)
          for (size_t off : f.half_offsets) {
            // rep 0 also draws NaN/inf/denormal scales: the bit patterns must still agree
            const uint16_t h = rep == 0 ? edge_or_random_half(rng) : static_cast<uint16_t>(0x0400 + rng() % 0x7400);
            std::memcpy(&w[b * f.block_bytes + off], &h, 2);
          }
        const auto a = random_activation(rng, f.type, nb);
        const int64_t n = static_cast<int64_t>(nb) * f.block_elems;
        const float s = f.scalar(w.data(), a.data(), n), v = f.avx2(w.data(), a.data(), n);
        // A NaN result may differ in sign/payload: the compiler may swap the operands of a
        // commutative add, and x86 keeps the first operand's NaN. Any other bit must agree.
        if (std::isnan(s) && std::isnan(v)) continue;
        ASSERT_EQ(bits(s), bits(v)) << traits(f.type).name << " blocks=" << nb << " rep=" << rep << " scalar=" << s
                                    << " avx2=" << v;
      }
}

// Weight rows from ggml's writer, activations from ggml's _ref quantizer.
struct RealRows {
  std::vector<uint8_t> w, a;
  int64_t n;
};

RealRows real_rows(GgmlType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto& g = GgmlQuant::get();
  auto x = gaussian_row(rng, n, 0.02f);
  for (int k = 0; k < 8; ++k) x[rng() % n] *= 30.f;
  const auto act = gaussian_row(rng, n, 1.f);
  RealRows r{std::vector<uint8_t>(row_bytes(traits(type), n)), {}, n};
  if (type == GgmlType::Q8_0) {
    g.quantize_q8_0(x.data(), r.w.data(), 1, n, nullptr);
    r.a.resize(34 * n / 32);
    g.quantize_row_q8_0_ref(act.data(), r.a.data(), n);
  } else {
    (type == GgmlType::Q2_K ? g.quantize_q2_K : g.quantize_q4_K)(x.data(), r.w.data(), 1, n, nullptr);
    r.a.assign(292 * n / 256, 0);
    g.quantize_row_q8_K_ref(act.data(), r.a.data(), n);
  }
  return r;
}

TEST(DotExact, Avx2EqualsScalarOnQuantizedRows) {
  if (!quant::have_avx2()) GTEST_SKIP() << "CPU without AVX2/FMA/F16C";
  for (const auto& f : int_formats())
    for (int64_t n : {256, 2048, 4096 + 256, 7168}) {
      const auto r = real_rows(f.type, n, 81 + static_cast<uint32_t>(n));
      const float s = f.scalar(r.w.data(), r.a.data(), n), v = f.avx2(r.w.data(), r.a.data(), n);
      ASSERT_EQ(bits(s), bits(v)) << traits(f.type).name << " n=" << n;
    }
}

// |scalar - sum_i w_i*a_i| <= (blocks/8 + 16) * 2^-24 * M, with w, a decoded by ggml and
// M = sum_i (|d*sc*q| + |dmin*m|)_i * |a_i|: every term's roundings (scale products, the
// f16/int->float conversions, the dequantizer's own mul/sub, then blocks/8 + 3 additions per
// lane chain) are bounded by u times that term's magnitude. The |d*sc*q| and |dmin*m| parts
// are themselves decoded by ggml from copies of the block with dmin or d zeroed.
TEST(DotBound, ScalarMatchesDoubleDotOfDequantizedRows) {
  const auto& g = GgmlQuant::get();
  struct Case {
    GgmlType type;
    GgmlQuant::Dequant deq;
    size_t bb;
    size_t d_off, dmin_off;  // dmin_off == 0: no min term
  };
  for (const Case& c : {Case{GgmlType::Q8_0, g.dequantize_q8_0, 34, 0, 0}, Case{GgmlType::Q2_K, g.dequantize_q2_K, 84, 80, 82},
                        Case{GgmlType::Q4_K, g.dequantize_q4_K, 144, 0, 2}})
    for (int64_t n : {256, 4096, 7168}) {
      const auto r = real_rows(c.type, n, 91 + static_cast<uint32_t>(n));
      std::vector<float> w(n), a(n), wd(n), wm(n, 0.f);
      c.deq(r.w.data(), w.data(), n);
      if (c.type == GgmlType::Q8_0)
        g.dequantize_q8_0(r.a.data(), a.data(), n);
      else
        g.dequantize_q8_K(r.a.data(), a.data(), n);
      auto only_d = r.w, only_min = r.w;
      for (size_t b = 0; b < r.w.size() / c.bb; ++b) {
        if (c.dmin_off) {
          std::memset(&only_d[b * c.bb + c.dmin_off], 0, 2);
          std::memset(&only_min[b * c.bb + c.d_off], 0, 2);
        }
      }
      c.deq(only_d.data(), wd.data(), n);
      if (c.dmin_off) c.deq(only_min.data(), wm.data(), n);
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += static_cast<double>(w[i]) * a[i];
        mag += (std::fabs(static_cast<double>(wd[i])) + std::fabs(static_cast<double>(wm[i]))) * std::fabs(a[i]);
      }
      const int64_t blocks = n / traits(c.type).block_elems;
      const double tol = (static_cast<double>(blocks) / 8 + 16) * kU * mag;
      const float got = quant::vec_dot_scalar(c.type, r.w.data(), r.a.data(), n);
      EXPECT_LE(std::fabs(got - exact), tol) << traits(c.type).name << " n=" << n << " exact=" << exact;
      // The bound must leave the answer meaningful (min terms cancel a lot in Q2_K/Q4_K).
      EXPECT_GT(std::fabs(exact), 10 * tol) << "bound too loose to mean anything";
    }
}

// Float weights: both kernels within (n/8 + 16) * 2^-24 * sum|w_i x_i| of the exact dot
// (the bound documented in quant.h), computed in long double from ggml-decoded weights.
TEST(DotBound, FloatKernelsWithinStatedBound) {
  std::mt19937 rng(101);
  const auto& g = GgmlQuant::get();
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
    for (int64_t n : {1, 7, 8, 31, 33, 100, 1000, 4096 + 5, 16384}) {
      const auto wf = gaussian_row(rng, n, 1.f), x = gaussian_row(rng, n, 3.f);
      std::vector<uint16_t> wh(n);
      std::vector<float> w(n);
      const void* wrow = wf.data();
      if (t == GgmlType::F32) {
        w = wf;
      } else if (t == GgmlType::F16) {
        g.fp32_to_fp16_row(wf.data(), wh.data(), n);
        g.fp16_to_fp32_row(wh.data(), w.data(), n);
        wrow = wh.data();
      } else {
        g.fp32_to_bf16_row_ref(wf.data(), wh.data(), n);
        g.bf16_to_fp32_row(wh.data(), w.data(), n);
        wrow = wh.data();
      }
      long double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += static_cast<long double>(w[i]) * x[i];
        mag += std::fabs(static_cast<long double>(w[i]) * x[i]);
      }
      const double tol = (static_cast<double>(n) / 8 + 16) * kU * static_cast<double>(mag);
      const float s = quant::vec_dot_scalar(t, wrow, x.data(), n);
      const float v = quant::vec_dot(t, wrow, x.data(), n);
      EXPECT_LE(std::fabs(s - static_cast<double>(exact)), tol) << traits(t).name << " scalar n=" << n;
      EXPECT_LE(std::fabs(v - static_cast<double>(exact)), tol) << traits(t).name << " dispatched n=" << n;
    }
}

TEST(DotApi, DispatchedKernelIsAvx2WhenAvailable) {
  const auto r = real_rows(GgmlType::Q4_K, 4096, 111);
  const float a = quant::vec_dot(GgmlType::Q4_K, r.w.data(), r.a.data(), 4096);
  EXPECT_EQ(bits(a), bits(quant::vec_dot_scalar(GgmlType::Q4_K, r.w.data(), r.a.data(), 4096)));
#if DS4_HAVE_AVX2_BUILD
  if (quant::have_avx2()) {
    EXPECT_EQ(quant::dot_kernel(GgmlType::Q4_K), &quant::vec_dot_q4_K_q8_K_avx2);
  }
#endif
  EXPECT_EQ(quant::vec_dot_type(GgmlType::Q8_0), GgmlType::Q8_0);
  EXPECT_EQ(quant::vec_dot_type(GgmlType::Q2_K), GgmlType::Q8_K);
  EXPECT_EQ(quant::vec_dot_type(GgmlType::BF16), GgmlType::F32);
}

}  // namespace
}  // namespace ds4::test
