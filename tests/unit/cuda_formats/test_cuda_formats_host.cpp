// The CUDA format structs of the further weight formats (src/compute/cuda/gemv_formats_ext.cuh:
// Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4, Q3_K, Q5_K, Q6_K, IQ4_XS, IQ1_S, IQ1_M, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S), compiled for the host with the stand-in intrinsics of host_cuda/, against the CPU
// codecs on the same bytes:
//  * dot<R>: each block's term added into partial sum (block mod 8), folded as the kernels of
//    gemv_exact.cuh do, times kPost, equals quant::vec_dot and quant::vec_dot_scalar bit for bit
//    (R = 4 activation rows, 3 or 4 of them used), for activations from the CPU's Q8_0/Q8_K/Q8_1
//    quantizer and for random activation bytes (every value, -128 included);
//  * the device Q8_1 quantizer (Q5_1's activations) gives quant::quantize_activation_row's bytes;
//  * decode32 equals quant::dequantize_row bit for bit;
//  * dotf<R> (decoded weights times f32 activations, one FMA chain over the row) is within
//    (n + 2) * 2^-24 * sum |w x| of the exact dot of the CPU-decoded weights: the standard bound
//    of n rounded steps in sequence.
// Weight blocks come from the CPU quantizers (tests/cuda/quant_pool.h), placed at every
// alignment the CUDA backend allows for the type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "compute/cuda/gemv_formats_ext.cuh"
#include "core/fp16.h"
#include "cuda/quant_pool.h"  // tests/cuda
#include "quant/blocks.h"
#include "quant/blocks_ext.h"
#include "quant/quant.h"

namespace ds4::test {
namespace {

using namespace ds4::cuda::gemv_detail;

float fold8h(const float* l) {
  const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
  return (a0 + a2) + (a1 + a3);
}

// Activation rows in the CPU's block layout and in the kernels' split view (ActQ).
struct Acts {
  GgmlType type;
  int64_t n;
  size_t row_bytes;
  std::vector<uint8_t> blocks;
  std::vector<int8_t> qs;
  std::vector<float> d;
  std::vector<int16_t> bs;
  ActQ view() const {
    ActQ a;
    a.qs = qs.data(), a.d = d.data(), a.bs = bs.data(), a.n = n;
    return a;
  }
};

Acts make_acts(GgmlType at, int rows, int64_t n, bool random_bytes, cudatest::PoolRng& rng, std::vector<float>& x) {
  Acts a{at, n, row_bytes(traits(at), static_cast<uint64_t>(n)), {}, {}, {}, {}};
  const int64_t nb = n / traits(at).block_elems;
  a.blocks.resize(rows * a.row_bytes);
  a.qs.resize(rows * n), a.d.resize(rows * nb * (at == GgmlType::Q8_1 ? 2 : 1)), a.bs.resize(rows * (n / 16));
  x.assign(rows * n, 0.0f);
  for (int r = 0; r < rows; ++r) {
    uint8_t* row = a.blocks.data() + r * a.row_bytes;
    if (random_bytes) {
      for (size_t i = 0; i < a.row_bytes; ++i) row[i] = static_cast<uint8_t>(rng.next());
      for (int64_t b = 0; b < nb; ++b) {
        if (at == GgmlType::Q8_0) {
          auto* q = reinterpret_cast<quant::BlockQ8_0*>(row) + b;
          q->d = fp32_to_fp16(static_cast<float>(0.001 + 0.05 * rng.uniform()));
        } else if (at == GgmlType::Q8_1) {
          auto* q = reinterpret_cast<quant::BlockQ8_1*>(row) + b;
          q->d = fp32_to_fp16(static_cast<float>(0.001 + 0.05 * rng.uniform()));
          int s = 0;
          for (int k = 0; k < 32; ++k) s += q->qs[k];
          q->s = fp32_to_fp16(static_cast<float>(s) * fp16_to_fp32(q->d));
        } else {
          auto* q = reinterpret_cast<quant::BlockQ8_K*>(row) + b;
          q->d = static_cast<float>(1e-4 + 1e-2 * rng.uniform());
          for (int j = 0; j < 16; ++j) {
            int s = 0;
            for (int k = 0; k < 16; ++k) s += q->qs[16 * j + k];
            q->bsums[j] = static_cast<int16_t>(s);
          }
        }
      }
    } else {
      float sc = 1;
      for (int64_t i = 0; i < n; ++i) {
        if (i % 32 == 0) sc = std::exp(rng.normal());
        x[r * n + i] = rng.normal() * sc;
      }
      quant::quantize_activation_row(at, &x[r * n], row, n);
    }
    for (int64_t b = 0; b < nb; ++b) {
      if (at == GgmlType::Q8_0) {
        const auto* q = reinterpret_cast<const quant::BlockQ8_0*>(row) + b;
        a.d[r * nb + b] = fp16_to_fp32(q->d);  // the device view keeps Q8_0's scale widened to f32
        std::memcpy(&a.qs[r * n + 32 * b], q->qs, 32);
      } else if (at == GgmlType::Q8_1) {  // {d, s} per 32 values (FmtQ5_1::kActBE = 16)
        const auto* q = reinterpret_cast<const quant::BlockQ8_1*>(row) + b;
        a.d[2 * (r * nb + b)] = fp16_to_fp32(q->d), a.d[2 * (r * nb + b) + 1] = fp16_to_fp32(q->s);
        std::memcpy(&a.qs[r * n + 32 * b], q->qs, 32);
      } else {
        const auto* q = reinterpret_cast<const quant::BlockQ8_K*>(row) + b;
        a.d[r * nb + b] = q->d;
        std::memcpy(&a.qs[r * n + 256 * b], q->qs, 256);
        std::memcpy(&a.bs[r * (n / 16) + 16 * b], q->bsums, 32);
      }
    }
  }
  return a;
}

template <class F>
void check_format(GgmlType t) {
  SCOPED_TRACE(std::string(traits(t).name));
  const auto& tr = traits(t);
  ASSERT_EQ(tr.block_bytes, static_cast<uint32_t>(F::kBB));
  ASSERT_EQ(tr.block_elems, static_cast<uint32_t>(F::kBE));
  ASSERT_EQ(quant::vec_dot_type(t), F::kQ8K ? GgmlType::Q8_K : F::kActBE == 16 ? GgmlType::Q8_1 : GgmlType::Q8_0);
  ASSERT_TRUE(ext_format(t));
  const int64_t n = 2048, nb = n / F::kBE;
  const uint64_t seed = 0x5eed0000ull + static_cast<uint64_t>(t);
  const auto pool = cudatest::make_block_pool(t, seed, 16, 4096);
  cudatest::PoolRng rng(seed * 7 + 1);
  const size_t rb = row_bytes(tr, n);
  const bool byte_aligned = t == GgmlType::MXFP4 || t == GgmlType::IQ1_M;  // natural alignment 1, else 2
  if (t == GgmlType::Q5_1) {
    // The device's Q8_1 activation quantizer against the CPU's, on rows with varied block scales.
    std::vector<float> x(1024);
    float sc = 1;
    for (size_t i = 0; i < x.size(); ++i) {
      if (i % 32 == 0) sc = std::exp(2 * rng.normal());
      x[i] = rng.normal() * sc;
    }
    x[40] = 0;  // and an all-zero block
    for (int k = 64; k < 96; ++k) x[k] = 0;
    std::vector<quant::BlockQ8_1> ref(x.size() / 32);
    quant::quantize_activation_row(GgmlType::Q8_1, x.data(), ref.data(), static_cast<int64_t>(x.size()));
    int bad = 0;
    for (size_t b = 0; b < ref.size(); ++b) {
      int8_t qs[32];
      float ds[2];
      quant_q8_1_block(&x[32 * b], qs, ds);
      bad += std::memcmp(qs, ref[b].qs, 32) != 0 || ds[0] != fp16_to_fp32(ref[b].d) || ds[1] != fp16_to_fp32(ref[b].s);
    }
    EXPECT_EQ(bad, 0) << "Q8_1 blocks differing from quantize_activation_row";
  }
  int dot_bad = 0, dec_bad = 0, f_bad = 0;
  for (int rep = 0; rep < 8; ++rep) {
    // Staged blocks keep their address mod 16; the word reader touches up to 3 bytes before and
    // 4 after a block (inside the kernels' slice slack), so the buffer has room both sides.
    const size_t off = 64 + (byte_aligned ? rep % 4 : 2 * (rep % 2));
    std::vector<uint8_t> buf(rb + 256, 0xA5);
    uint8_t* row = buf.data() + off;
    cudatest::fill_row_from_pool(pool, row, nb, rng);
    constexpr int R = 4;
    const int nr = rep % 2 ? 3 : 4;
    std::vector<float> x;
    const Acts acts = make_acts(quant::vec_dot_type(t), R, n, rep >= 4, rng, x);
    const ActQ a = acts.view();
    float lanes[R][8] = {};
    for (int64_t b = 0; b < nb; ++b) {
      float c[R] = {};
      F::template dot<R>(row + b * F::kBB, b, a, nr, c, nullptr);
      for (int r = 0; r < R; ++r) lanes[r][b % 8] += c[r];
    }
    for (int r = 0; r < nr; ++r) {
      float v = fold8h(lanes[r]);
      if (F::kPost != 1.0f) v = F::kPost * v;
      const uint8_t* ar = acts.blocks.data() + r * acts.row_bytes;
      const float ref = quant::vec_dot(t, row, ar, n), refs = quant::vec_dot_scalar(t, row, ar, n);
      if (std::memcmp(&v, &ref, 4) != 0 || std::memcmp(&v, &refs, 4) != 0) {
        if (dot_bad < 3)
          ADD_FAILURE() << "dot rep " << rep << " row " << r << ": " << v << " vs vec_dot " << ref << " / scalar " << refs;
        ++dot_bad;
      }
    }
    std::vector<float> dq(n);
    quant::dequantize_row(t, row, dq.data(), n);
    for (int64_t b = 0; b < nb; ++b)
      for (int g = 0; g < F::kBE / 32; ++g) {
        float v[32];
        F::decode32(row + b * F::kBB, g, v);
        for (int j = 0; j < 32; ++j)
          if (std::memcmp(&v[j], &dq[b * F::kBE + 32 * g + j], 4) != 0) {
            if (dec_bad < 3)
              ADD_FAILURE() << "decode block " << b << " group " << g << " weight " << j << ": " << v[j] << " vs "
                            << dq[b * F::kBE + 32 * g + j];
            ++dec_bad;
          }
      }
    if (rep >= 4) continue;  // dotf: f32 activations (the quantizer's inputs)
    const ActF af{x.data(), n};
    float fa[R] = {};
    for (int64_t b = 0; b < nb; ++b) F::template dotf<R>(row + b * F::kBB, b, af, nr, fa, nullptr);
    for (int r = 0; r < nr; ++r) {
      double ex = 0, S = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double p = static_cast<double>(dq[i]) * x[r * n + i];
        ex += p, S += std::fabs(p);
      }
      if (!(std::fabs(fa[r] - ex) <= (n + 2) * std::ldexp(1.0, -24) * S)) {
        if (f_bad < 3) ADD_FAILURE() << "dotf row " << r << ": " << fa[r] << " vs " << ex << " (sum |terms| " << S << ")";
        ++f_bad;
      }
    }
  }
  EXPECT_EQ(dot_bad, 0);
  EXPECT_EQ(dec_bad, 0);
  EXPECT_EQ(f_bad, 0);
}

TEST(CudaFormatsHost, ValueTablesMatchTheCpu) {
  EXPECT_NO_THROW(ext_check_tables());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(table_value<Iq4nlValues>(i), quant::kvalues_iq4nl[i]) << i;
    EXPECT_EQ(table_value<Mxfp4Values>(i), quant::kvalues_mxfp4[i]) << i;
    // lut16x4 on four copies of index i (and lut16f) give the same value.
    const uint32_t idx = static_cast<uint32_t>(i) * 0x01010101u;
    EXPECT_EQ(static_cast<int8_t>(lut16x4<Iq4nlValues>(idx) >> 24), quant::kvalues_iq4nl[i]);
    EXPECT_EQ(lut16f<Mxfp4Values>(static_cast<uint32_t>(i)), static_cast<float>(quant::kvalues_mxfp4[i]));
  }
}

TEST(CudaFormatsHost, SignRuleMatchesTheCpuTable) {
  for (uint32_t i = 0; i < 128; ++i) EXPECT_EQ(iq_signs8(i), quant::ksigns_iq2xs[i]) << i;
}

TEST(CudaFormatsHost, LegacyFormats) {
  check_format<FmtQ4_0>(GgmlType::Q4_0);
  check_format<FmtQ5_0>(GgmlType::Q5_0);
  check_format<FmtQ5_1>(GgmlType::Q5_1);
  check_format<FmtIQ4_NL>(GgmlType::IQ4_NL);
  check_format<FmtMXFP4>(GgmlType::MXFP4);
}

TEST(CudaFormatsHost, KFormats) {
  check_format<FmtQ3_K>(GgmlType::Q3_K);
  check_format<FmtQ5_K>(GgmlType::Q5_K);
  check_format<FmtQ6_K>(GgmlType::Q6_K);
  check_format<FmtIQ4_XS>(GgmlType::IQ4_XS);
}

TEST(CudaFormatsHost, CodebookFormats) {
  ext_upload_tables();  // host stand-in: copies the CPU's grids into the tables
  check_format<FmtIQ1_S>(GgmlType::IQ1_S);
  check_format<FmtIQ1_M>(GgmlType::IQ1_M);
  check_format<FmtIQ2_XS>(GgmlType::IQ2_XS);
  check_format<FmtIQ2_S>(GgmlType::IQ2_S);
  check_format<FmtIQ3_XXS>(GgmlType::IQ3_XXS);
  check_format<FmtIQ3_S>(GgmlType::IQ3_S);
}

// with_ext_format dispatches every type ext_format claims, and nothing else the CPU reads.
TEST(CudaFormatsHost, DispatchCoversTheFurtherFormats) {
  int n = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto tr = type_traits(id);
    if (!tr) continue;
    int calls = 0;
    const bool ok = with_ext_format(tr->type, [&](auto fmt) {
      ++calls;
      EXPECT_EQ(static_cast<uint32_t>(decltype(fmt)::kBB), tr->block_bytes) << tr->name;
    });
    EXPECT_EQ(ok, ext_format(tr->type)) << tr->name;
    EXPECT_EQ(calls, ok ? 1 : 0) << tr->name;
    n += ok;
  }
  EXPECT_EQ(n, 15);
}

}  // namespace
}  // namespace ds4::test
