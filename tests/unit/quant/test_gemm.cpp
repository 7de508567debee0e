// Blocked rows x tokens kernels (quant::gemm_kernel, AVX-512 + VNNI): every (row, token)
// output must equal the scalar per-row kernel's float bit for bit, for random block bytes
// (any quants, -128 included, in weights and activations), rows that do not fill a 16-row
// panel, every block-count remainder mod 8, padded strides, and real quantized rows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/fp16.h"

#include "ggml_quant.h"
#include "quant/kernels.h"
#include "quant/quant.h"
#if DS4_HAVE_IQ2_XXS
#include "quant/iq2_xxs.h"
#endif

namespace ds4::test {
namespace {

struct GemmFormat {
  GgmlType type;
  size_t block_bytes;
  int block_elems;
  std::vector<size_t> half_offsets;  // f16 scales inside a weight block
  quant::DotFn scalar;
};

std::vector<GemmFormat> gemm_formats() {
  std::vector<GemmFormat> f = {{GgmlType::Q8_0, 34, 32, {0}, quant::vec_dot_q8_0_q8_0_scalar},
                               {GgmlType::Q2_K, 84, 256, {80, 82}, quant::vec_dot_q2_K_q8_K_scalar},
                               {GgmlType::Q4_K, 144, 256, {0, 2}, quant::vec_dot_q4_K_q8_K_scalar}};
#if DS4_HAVE_IQ2_XXS
  f.push_back({GgmlType::IQ2_XXS, 66, 256, {0}, quant::vec_dot_iq2_xxs_q8_K_scalar});
#endif
  return f;
}

size_t act_block_bytes(GgmlType t) { return t == GgmlType::Q8_0 ? 34 : 292; }

// Activation blocks with random quants (and bsums consistent with them, as the Q8_K layout
// promises: the Q2_K and Q4_K dots read bsums) and a random finite scale.
std::vector<uint8_t> random_acts(std::mt19937& rng, GgmlType wtype, int64_t nb) {
  const size_t bb = act_block_bytes(wtype);
  auto a = random_bytes(rng, bb * static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = &a[b * bb];
    if (wtype == GgmlType::Q8_0) {
      const uint16_t h = static_cast<uint16_t>(0x0400 + rng() % 0x7400);
      std::memcpy(blk, &h, 2);
    } else {
      const float d = std::ldexp(static_cast<float>(rng() % 4096), -static_cast<int>(rng() % 40));
      std::memcpy(blk, &d, 4);
      const auto* qs = reinterpret_cast<const int8_t*>(blk + 4);
      for (int j = 0; j < 16; ++j) {
        int16_t s = 0;
        for (int k = 0; k < 16; ++k) s = static_cast<int16_t>(s + qs[16 * j + k]);
        std::memcpy(blk + 4 + 256 + 2 * j, &s, 2);
      }
    }
  }
  return a;
}

// Runs the blocked kernel and compares every output with the scalar kernel.
void expect_equal_to_scalar(const GemmFormat& f, quant::GemmKernel gemm, const std::vector<uint8_t>& w,
                            size_t w_stride, int64_t rows, const std::vector<uint8_t>& a, size_t a_stride,
                            int64_t tokens, int64_t n, const std::string& what) {
  const int64_t ys = rows + 3;  // padded output stride: the kernel must not write the gap
  std::vector<float> y(static_cast<size_t>(tokens * ys), -7.0f);
  gemm(w.data(), w_stride, rows, a.data(), a_stride, tokens, y.data(), ys, n);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      const float s = f.scalar(w.data() + r * w_stride, a.data() + t * a_stride, n);
      const float v = y[t * ys + r];
      if (std::isnan(s) && std::isnan(v)) continue;  // NaN payloads may differ (see test_dot.cpp)
      ASSERT_EQ(bits(s), bits(v)) << traits(f.type).name << " " << what << " row " << r << " token " << t
                                  << " scalar=" << s << " gemm=" << v;
    }
    for (int64_t r = rows; r < ys; ++r) ASSERT_EQ(y[t * ys + r], -7.0f) << "wrote past the rows, token " << t;
  }
}

TEST(GemmExact, EqualsScalarOnRandomBlocks) {
  if (!quant::have_avx512_vnni()) GTEST_SKIP() << "CPU without AVX-512 VNNI (or DS4_NO_AVX512 set)";
  std::mt19937 rng(1601);
  const int64_t row_counts[] = {1, 15, 16, 17, 40};
  const int64_t token_counts[] = {1, 2, 3, 5, 7, 9};
  for (const auto& f : gemm_formats()) {
    quant::GemmKernel gemm = quant::gemm_kernel(f.type);
    ASSERT_NE(gemm, nullptr) << traits(f.type).name;
    const int max_nb = f.block_elems == 32 ? 41 : 18;
    for (int nb = 1; nb <= max_nb; ++nb)
      for (int64_t rows : row_counts)
        for (int64_t tokens : token_counts) {
          if ((nb + rows + tokens) % 3 != 0 && rows != 17) continue;  // a spread of shapes, not all
          const size_t w_stride = f.block_bytes * nb + (rows % 2 ? 6 : 0);
          const size_t a_stride = act_block_bytes(f.type) * nb + (tokens % 2 ? 10 : 0);
          auto w = random_bytes(rng, w_stride * rows);
          for (int64_t r = 0; r < rows; ++r)
            for (int b = 0; b < nb; ++b)
              for (size_t off : f.half_offsets) {
                const uint16_t h = (rng() % 8 == 0) ? edge_or_random_half(rng) : static_cast<uint16_t>(0x0400 + rng() % 0x7400);
                std::memcpy(&w[r * w_stride + b * f.block_bytes + off], &h, 2);
              }
          std::vector<uint8_t> a(a_stride * tokens);
          for (int64_t t = 0; t < tokens; ++t) {
            auto at = random_acts(rng, f.type, nb);
            std::memcpy(&a[t * a_stride], at.data(), at.size());
          }
          expect_equal_to_scalar(f, gemm, w, w_stride, rows, a, a_stride, tokens, nb * f.block_elems,
                                 "nb=" + std::to_string(nb) + " rows=" + std::to_string(rows) +
                                     " tokens=" + std::to_string(tokens));
        }
  }
}

// The few-token IQ2_XXS / Q2_K kernels (gemv_avx512.cpp) called directly, for every token count
// they may serve and beyond: random weight bytes, activations without -128 (the IQ2_XXS kernel's
// fast case) and with it (it must then decline, writing nothing, and the gemm_kernel wrapper
// must still give the scalar floats).
TEST(GemmExact, FewTokenKernelsEqualScalar) {
#if DS4_HAVE_AVX512_BUILD && DS4_HAVE_IQ2_XXS
  if (!quant::have_avx512_vbmi()) GTEST_SKIP() << "CPU without AVX-512 VBMI (or DS4_NO_AVX512 set)";
  std::mt19937 rng(1608);
  const int64_t row_counts[] = {1, 2, 15, 16, 17, 33, 48};
  for (const auto& f : gemm_formats()) {
    if (f.type != GgmlType::IQ2_XXS && f.type != GgmlType::Q2_K) continue;
    for (int nb = 1; nb <= 18; ++nb)
      for (int64_t rows : row_counts)
        for (int64_t tokens = 1; tokens <= 5; ++tokens) {
          if ((nb + rows + tokens) % 2 != 0 && nb > 3) continue;  // a spread of shapes, not all
          const size_t w_stride = f.block_bytes * nb + (rows % 2 ? 6 : 0);
          const size_t a_stride = act_block_bytes(f.type) * nb + (tokens % 2 ? 10 : 0);
          auto w = random_bytes(rng, w_stride * rows);
          for (int64_t r = 0; r < rows; ++r)
            for (int b = 0; b < nb; ++b)
              for (size_t off : f.half_offsets) {
                const uint16_t h = (rng() % 8 == 0) ? edge_or_random_half(rng) : static_cast<uint16_t>(0x0400 + rng() % 0x7400);
                std::memcpy(&w[r * w_stride + b * f.block_bytes + off], &h, 2);
              }
          std::vector<uint8_t> a(a_stride * tokens);
          for (int64_t t = 0; t < tokens; ++t) {
            auto at = random_acts(rng, f.type, nb);
            std::memcpy(&a[t * a_stride], at.data(), at.size());
          }
          const std::string what = "nb=" + std::to_string(nb) + " rows=" + std::to_string(rows) + " tokens=" + std::to_string(tokens);
          // With -128 somewhere (random bytes almost always have one): the wrapper.
          expect_equal_to_scalar(f, quant::gemm_kernel(f.type), w, w_stride, rows, a, a_stride, tokens, nb * f.block_elems,
                                 what + " with -128");
          if (f.type == GgmlType::IQ2_XXS) {
            std::vector<float> y(static_cast<size_t>(tokens * rows), -7.0f);
            bool has_min = false;
            for (int64_t t = 0; t < tokens; ++t)
              for (int b = 0; b < nb; ++b)
                for (int i = 0; i < 256; ++i) has_min |= a[t * a_stride + b * 292 + 4 + i] == 0x80;
            const bool done = quant::gemv_iq2_xxs_avx512vbmi(w.data(), w_stride, rows, a.data(), a_stride, tokens, y.data(),
                                                             rows, nb * f.block_elems);
            ASSERT_EQ(done, !has_min) << what;
            if (!done) {
              for (float v : y) {
                ASSERT_EQ(v, -7.0f) << "declined but wrote, " << what;
              }
            }
          }
          // Without -128 (what the Q8_K quantizer writes): the direct kernels themselves.
          for (int64_t t = 0; t < tokens; ++t)
            for (int b = 0; b < nb; ++b) {
              uint8_t* blk = &a[t * a_stride + b * 292];
              for (int i = 0; i < 256; ++i)
                if (blk[4 + i] == 0x80) blk[4 + i] = 0x81;
              for (int j = 0; j < 16; ++j) {
                int16_t sum = 0;
                for (int k = 0; k < 16; ++k) sum = static_cast<int16_t>(sum + static_cast<int8_t>(blk[4 + 16 * j + k]));
                std::memcpy(blk + 4 + 256 + 2 * j, &sum, 2);
              }
            }
          const quant::GemmKernel direct = f.type == GgmlType::Q2_K ? quant::gemv_q2_K_avx512vbmi : [](const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y, int64_t ys, int64_t n) {
            if (!quant::gemv_iq2_xxs_avx512vbmi(w, ws, rows, act, as, tokens, y, ys, n)) ADD_FAILURE() << "declined without -128";
          };
          expect_equal_to_scalar(f, direct, w, w_stride, rows, a, a_stride, tokens, nb * f.block_elems, what);
          expect_equal_to_scalar(f, quant::gemm_kernel(f.type), w, w_stride, rows, a, a_stride, tokens, nb * f.block_elems,
                                 what + " (gemm_kernel)");
        }
  }
#else
  GTEST_SKIP() << "built without the AVX-512 kernels";
#endif
}

TEST(GemmExact, EqualsScalarOnQuantizedRows) {
  if (!quant::have_avx512_vnni()) GTEST_SKIP() << "CPU without AVX-512 VNNI (or DS4_NO_AVX512 set)";
  std::mt19937 rng(1602);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 1024, rows = 37, tokens = 9;
  std::vector<float> wf(static_cast<size_t>(rows * n)), xf(static_cast<size_t>(tokens * n)), imat(static_cast<size_t>(n));
  for (auto& v : wf) v = nd(rng);
  for (auto& v : xf) v = nd(rng) * 3.0f;
  for (auto& v : imat) v = 0.5f + std::fabs(nd(rng));
  for (const auto& f : gemm_formats()) {
    const size_t ws = f.block_bytes * static_cast<size_t>(n / f.block_elems);
    std::vector<uint8_t> w(ws * rows);
    quant::quantize_rows(f.type, wf.data(), w.data(), rows, n, imat.data());
    const GgmlType at = quant::vec_dot_type(f.type);
    const size_t as = act_block_bytes(f.type) * static_cast<size_t>(n / (at == GgmlType::Q8_0 ? 32 : 256));
    std::vector<uint8_t> a(as * tokens);
    for (int64_t t = 0; t < tokens; ++t) quant::quantize_activation_row(at, xf.data() + t * n, a.data() + t * as, n);
    expect_equal_to_scalar(f, quant::gemm_kernel(f.type), w, ws, rows, a, as, tokens, n, "quantized");
  }
}

// The AVX-512 Q8_0 activation quantizer must write the scalar (ggml _ref) bytes: half-integer
// ties (away from zero), all-zero and denormal blocks, huge and tiny magnitudes.
TEST(Avx512Q8_0Quantizer, SameBytesAsScalar) {
#if DS4_HAVE_AVX512_BUILD
  if (!quant::have_avx512_vnni()) GTEST_SKIP() << "CPU without AVX-512 VNNI (or DS4_NO_AVX512 set)";
  std::mt19937 rng(1603);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 32 * 64;
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<float> x(n);
    for (int64_t b = 0; b < n / 32; ++b) {
      const int kind = static_cast<int>((rep + b) % 6);
      for (int j = 0; j < 32; ++j) {
        float& v = x[b * 32 + j];
        switch (kind) {
          case 0: v = nd(rng); break;
          case 1: v = j == 0 ? 127.0f : static_cast<float>(static_cast<int>(rng() % 255) - 127) / 2.0f; break;  // d = 1: exact ties
          case 2: v = 0.0f; break;
          case 3: v = std::ldexp(nd(rng), -140); break;  // denormal amax: 1/d overflows
          case 4: v = std::ldexp(nd(rng), 100); break;
          default: v = (j % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, -static_cast<int>(rng() % 30));
        }
      }
    }
    std::vector<uint8_t> want(34 * n / 32), got(34 * n / 32);
    quant::quantize_row_q8_0(x.data(), want.data(), n);
    ASSERT_TRUE(quant::quantize_row_q8_0_avx512(x.data(), got.data(), n));
    ASSERT_EQ(want, got) << "rep " << rep;
  }
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> out(68);
  x[40] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(quant::quantize_row_q8_0_avx512(x.data(), out.data(), 64));
  x[40] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(quant::quantize_row_q8_0_avx512(x.data(), out.data(), 64));
  EXPECT_THROW(quant::quantize_activation_row(GgmlType::Q8_0, x.data(), out.data(), 64), Error);
#else
  GTEST_SKIP() << "built without the AVX-512 kernels";
#endif
}

// y += a * x: the same floats on every path (no FMA anywhere).
TEST(AxpyF32, SameFloatsAsScalarOnEveryPath) {
  std::mt19937 rng(1604);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {1, 7, 8, 15, 16, 17, 512, 515}) {
    std::vector<float> x(n), y0(n);
    for (auto& v : x) v = nd(rng);
    for (auto& v : y0) v = nd(rng);
    const float a = nd(rng);
    std::vector<float> want = y0, got = y0;
    quant::axpy_f32_scalar(a, x.data(), want.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(want[i]), bits(y0[i] + a * x[i]));
    quant::axpy_f32(a, x.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(want[i]), bits(got[i])) << "n " << n << " i " << i;
#if DS4_HAVE_AVX2_BUILD
    if (quant::have_avx2()) {
      got = y0;
      quant::axpy_f32_avx2(a, x.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(want[i]), bits(got[i])) << "avx2 n " << n << " i " << i;
    }
#endif
  }
}

// F16: the blocked kernel must return the AVX2 float kernel's result (the per-row path on the
// same CPU), bit for bit, for every length remainder mod 32 and mod 8.
TEST(GemmExact, F16EqualsAvx2Kernel) {
#if DS4_HAVE_AVX512_BUILD
  if (!quant::have_avx512_vnni()) GTEST_SKIP() << "CPU without AVX-512 VNNI (or DS4_NO_AVX512 set)";
  std::mt19937 rng(1605);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {1, 7, 8, 31, 32, 33, 40, 100, 512, 1000}) {
    for (int64_t rows : {1, 2, 5}) {
      for (int64_t tokens : {1, 3, 4, 6, 16, 19, 40}) {  // 16+: the 16-token fold
        const size_t ws = 2 * n + 4, as = 4 * n + 12;  // padded strides
        std::vector<uint8_t> w(ws * rows), a(as * tokens);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = 0; i < n; ++i) {
            const uint16_t h = fp32_to_fp16(nd(rng));
            std::memcpy(&w[r * ws + 2 * i], &h, 2);
          }
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t i = 0; i < n; ++i) {
            const float v = nd(rng);
            std::memcpy(&a[t * as + 4 * i], &v, 4);
          }
        const int64_t ys = rows + 1;
        std::vector<float> y(tokens * ys, -7.0f);
        quant::gemm_f16_avx512(w.data(), ws, rows, a.data(), as, tokens, y.data(), ys, n);
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const float want = quant::vec_dot_f16_f32_avx2(w.data() + r * ws, a.data() + t * as, n);
            ASSERT_EQ(bits(want), bits(y[t * ys + r])) << "n " << n << " row " << r << " token " << t;
          }
        for (int64_t t = 0; t < tokens; ++t) ASSERT_EQ(y[t * ys + rows], -7.0f);
      }
    }
  }
#else
  GTEST_SKIP() << "built without the AVX-512 kernels";
#endif
}

// The AVX-512 per-row float dots return the AVX2 kernels' float bit for bit.
TEST(FloatDotAvx512, EqualsAvx2Kernels) {
#if DS4_HAVE_AVX512_BUILD
  if (!quant::have_avx512_vnni()) GTEST_SKIP() << "CPU without AVX-512 VNNI (or DS4_NO_AVX512 set)";
  std::mt19937 rng(1606);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n = 0; n <= 200; n += (n < 70 ? 1 : 13)) {
    std::vector<float> w(n + 1), x(n + 1);
    std::vector<uint16_t> h(n + 1);
    for (int64_t i = 0; i < n; ++i) {
      w[i] = nd(rng);
      x[i] = nd(rng);
      h[i] = fp32_to_fp16(nd(rng));
    }
    ASSERT_EQ(bits(quant::vec_dot_f32_f32_avx2(w.data(), x.data(), n)), bits(quant::vec_dot_f32_f32_avx512(w.data(), x.data(), n)))
        << "f32 n " << n;
    ASSERT_EQ(bits(quant::vec_dot_f16_f32_avx2(h.data(), x.data(), n)), bits(quant::vec_dot_f16_f32_avx512(h.data(), x.data(), n)))
        << "f16 n " << n;
  }
#else
  GTEST_SKIP() << "built without the AVX-512 kernels";
#endif
}

// Several rows per pass (attention): every dot equals the one-row kernel's on the same CPU, and
// the weighted row sum equals one exactly rounded fma per term in row order on every path the
// build has (scalar, AVX2, AVX-512), for lengths with and without 32- and 8-element remainders
// and row counts around the group sizes.
TEST(FloatRows, DotRowsEqualOneRowKernelsAndFmaRowsEqualFmaInRowOrder) {
  std::mt19937 rng(1607);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const quant::DotKernel dot = quant::dot_kernel(GgmlType::F32);
  for (int64_t n : {1, 8, 31, 32, 40, 128, 512, 515}) {
    for (int64_t count : {1, 3, 4, 5, 8, 9, 17}) {
      std::vector<std::vector<float>> rows(static_cast<size_t>(count), std::vector<float>(static_cast<size_t>(n)));
      std::vector<const float*> rp;
      for (auto& r : rows) {
        for (auto& v : r) v = nd(rng);
        rp.push_back(r.data());
      }
      std::vector<float> x(static_cast<size_t>(n)), a(static_cast<size_t>(count)), y0(static_cast<size_t>(n));
      for (auto& v : x) v = nd(rng);
      for (auto& v : a) v = nd(rng);
      for (auto& v : y0) v = nd(rng);
      std::vector<float> out(static_cast<size_t>(count), -7.0f);
      quant::dot_f32_rows(x.data(), rp.data(), count, n, out.data());
      for (int64_t k = 0; k < count; ++k)
        ASSERT_EQ(bits(dot(x.data(), rp[k], n)), bits(out[k])) << "dot n " << n << " count " << count << " row " << k;
      std::vector<float> want = y0, unfused = y0;
      for (int64_t k = 0; k < count; ++k)
        for (int64_t i = 0; i < n; ++i) want[i] = std::fma(a[k], rp[k][i], want[i]);
      for (int64_t k = 0; k < count; ++k) quant::axpy_f32(a[k], rp[k], unfused.data(), n);
      if (n >= 128 && count >= 8) EXPECT_NE(want, unfused) << "the fused sums must differ somewhere from product-then-sum";
      std::vector<std::pair<const char*, void (*)(const float*, const float* const*, int64_t, float*, int64_t)>> paths = {
          {"dispatch", quant::fma_f32_rows}, {"scalar", quant::fma_f32_rows_scalar}};
#if DS4_HAVE_AVX2_BUILD
      paths.push_back({"avx2", quant::fma_f32_rows_avx2});
#endif
#if DS4_HAVE_AVX512_BUILD
      if (quant::have_avx512_vnni()) paths.push_back({"avx512", quant::fma_f32_rows_avx512});
#endif
      for (const auto& [name, fn] : paths) {
        std::vector<float> got = y0;
        fn(a.data(), rp.data(), count, got.data(), n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(bits(want[i]), bits(got[i])) << name << " n " << n << " count " << count << " i " << i;
      }
    }
  }
}

TEST(GemmExact, NoKernelForOtherFormats) {
  EXPECT_EQ(quant::gemm_kernel(GgmlType::F32), nullptr);
  EXPECT_EQ(quant::gemm_kernel(GgmlType::Q6_K), nullptr);
}

}  // namespace
}  // namespace ds4::test
