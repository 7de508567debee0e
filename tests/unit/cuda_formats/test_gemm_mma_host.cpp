// The tensor-core Q8_0 matmul's per-thread code (src/compute/cuda/gemm_mma.cuh) run on the host
// in the kernel's order (gemm_mma.cu k_mma_q8_0: prologue stages, then per chunk: prefetch into
// the stage after, compute the current stage warp by warp, lane by lane), with mma.sync
// m16n8k32 .s8 modelled from the PTX ISA's fragment tables (written here, independently of the
// kernel's load_frags/elem_row/elem_col), against quant::vec_dot and quant::vec_dot_scalar: every
// output must be equal bit for bit and written exactly once. No GPU is involved; the device's
// own behaviour is checked by tests/cuda/cuda_mma_check on a GPU machine.
//
// PTX ISA (9.7.14.5, "Matrix Fragments for mma.m16n8k32", .s8), gid = lane >> 2, tig = lane % 4:
//   A (16 x 32, row-major): register j of the lane holds 4 consecutive k of one row:
//     row = gid + 8 * (j % 2), k = 4 * tig + 16 * (j / 2) + byte;
//   B (32 x 8, column-major): register j holds B[k][n], n = gid, k = 4 * tig + 16 * j + byte;
//   C/D (16 x 8, s32): element j is row gid + 8 * (j / 2), column 2 * tig + (j % 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "compute/cuda/gemm_mma.cuh"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/types.h"

namespace ds4::test {
namespace {

using namespace ds4::cuda::mma;

// ---- the mma.sync model --------------------------------------------------------------------

int8_t byte_at(uint32_t w, int i) { return static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * i))); }

// d[lane][j] = (A * B)[..] + bias, A and B gathered from every lane's registers.
void mma_model(const uint32_t a[32][4], const uint32_t b[32][2], int bias, int d[32][4]) {
  int A[16][32], B[32][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int gid = lane >> 2, tig = lane & 3;
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) A[gid + 8 * (j % 2)][4 * tig + 16 * (j / 2) + i] = byte_at(a[lane][j], i);
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 4; ++i) B[4 * tig + 16 * j + i][gid] = byte_at(b[lane][j], i);
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int gid = lane >> 2, tig = lane & 3;
    for (int j = 0; j < 4; ++j) {
      const int row = gid + 8 * (j / 2), col = 2 * tig + (j % 2);
      int64_t s = bias;
      for (int k = 0; k < 32; ++k) s += static_cast<int64_t>(A[row][k]) * B[k][col];
      d[lane][j] = static_cast<int>(s);
    }
  }
}

// ---- the kernel, emulated ------------------------------------------------------------------

struct Problem {
  int64_t n_in = 0, n_out = 0, rows = 0, groups = 1;
  std::vector<uint8_t> w;  // n_out rows of Q8_0 (row_stride bytes each)
  size_t row_stride = 0;
  std::vector<int8_t> aqs;  // rows x (groups * n_in), quantize_acts' layout
  std::vector<float> ad;    // rows x (groups * n_in / 32)
};

template <int S>
void run_segment_host(std::vector<Acc>& acc, const TileSrc& T, std::vector<uint8_t>& smem, int& ci, int nchunks,
                      int cps, const std::vector<const uint8_t*>& lo, const std::vector<const uint8_t*>& hi);

// Copies stage `stage` as issue_stage does, checking every source lies inside its buffer.
void fill_stage(const TileSrc& T, int q0, uint8_t* st, const std::vector<const uint8_t*>& lo,
                const std::vector<const uint8_t*>& hi) {
  for (int i = 0; i < kPieces; ++i) {
    int dst = -1;
    const uint8_t* src = static_cast<const uint8_t*>(stage_piece(T, q0, i, &dst));
    ASSERT_GE(dst, 0);
    ASSERT_LE(dst + 16, kStageBytes);
    ASSERT_EQ(dst % 16, 0);
    bool inside = false;
    for (size_t k = 0; k < lo.size(); ++k) inside = inside || (src >= lo[k] && src + 16 <= hi[k]);
    ASSERT_TRUE(inside) << "piece " << i << " of stage at q0 " << q0 << " reads outside the repacked buffers";
    ASSERT_EQ(reinterpret_cast<uintptr_t>(src) % 16, 0u) << "cp.async source not 16-byte aligned";
    std::memcpy(st + dst, src, 16);
  }
}

template <int S>
void run_segment_host(std::vector<Acc>& acc, const TileSrc& T, std::vector<uint8_t>& smem, int& ci, int nchunks,
                      int cps, const std::vector<const uint8_t*>& lo, const std::vector<const uint8_t*>& hi) {
  for (int t = 0; t < kThreads; ++t) begin_segment<S>(acc[t]);
  for (int c = 0; c < cps; ++c, ++ci) {
    const int nx = ci + kStages - 1;
    if (nx < nchunks) fill_stage(T, nx * kKB, smem.data() + (nx % kStages) * kStageBytes, lo, hi);
    const uint8_t* st = smem.data() + (ci % kStages) * kStageBytes;
    for (int warp = 0; warp < kThreads / 32; ++warp)
      for (int kb = 0; kb < kKB; ++kb) {
        Frags f[32];
        for (int lane = 0; lane < 32; ++lane) load_frags(st, lane, warp, kb, f[lane]);
        for (int mt = 0; mt < kMT; ++mt)
          for (int nt = 0; nt < kNT; ++nt) {
            uint32_t a[32][4], b[32][2];
            int d[32][4];
            for (int lane = 0; lane < 32; ++lane) {
              std::memcpy(a[lane], f[lane].a[mt], sizeof a[lane]);
              std::memcpy(b[lane], f[lane].b[nt], sizeof b[lane]);
            }
            mma_model(a, b, kBiasBits, d);
            for (int lane = 0; lane < 32; ++lane)
              epilogue<seg_slot(S)>(acc[warp * 32 + lane], f[lane], mt, nt, d[lane]);
          }
      }
  }
  for (int t = 0; t < kThreads; ++t) end_segment<S>(acc[t]);
}

// y (rows x n_out) as mma_matmul_q8_0 + k_mma_q8_0 compute it; `writes` counts stores per output.
void emulate(const Problem& P, int64_t group_rows, std::vector<float>& y, std::vector<int>& writes) {
  const KLayout L = k_layout(P.n_in);
  const int64_t n = P.groups * P.n_in;
  const int64_t rows_pad = (P.rows + kBN - 1) / kBN * kBN;
  const int64_t a_pitch = P.groups * L.KP;
  std::vector<uint8_t> aq(static_cast<size_t>(rows_pad * a_pitch) * 32, 0xAB);
  std::vector<float> ad(static_cast<size_t>(rows_pad * a_pitch), -7.0f);  // poison: every item must be written
  for (int64_t r = 0; r < rows_pad; ++r)
    for (int64_t g = 0; g < P.groups; ++g)
      for (int x = 0; x < L.KP; ++x) {  // k_repack_a's item (r, g, x)
        const int q = item_pos(L, x);
        ASSERT_GE(q, 0);
        ASSERT_LT(q, L.KP);
        const int64_t rg = r * P.groups + g;
        const int8_t* qs = r < P.rows ? P.aqs.data() + r * n + g * P.n_in : nullptr;
        const float* d = r < P.rows ? P.ad.data() + (r * n + g * P.n_in) / 32 : nullptr;
        repack_act_block(qs, d, L, q, aq.data() + (rg * L.KP + q) * 32, ad.data() + rg * L.KP + q);
      }
  const int64_t n_pad = (P.n_out + kBM - 1) / kBM * kBM;  // one slab
  std::vector<uint8_t> wq(static_cast<size_t>(n_pad * L.KP) * 32, 0xCD);
  std::vector<float> wd(static_cast<size_t>(n_pad * L.KP), -9.0f);
  for (int64_t o = 0; o < n_pad; ++o)
    for (int x = 0; x < L.KP; ++x) {  // k_repack_w's item (o, x)
      const int q = item_pos(L, x);
      const uint8_t* src = o < P.n_out ? P.w.data() + o * P.row_stride : nullptr;
      repack_weight_block(src, L, q, wq.data() + (o * L.KP + q) * 32, wd.data() + o * L.KP + q);
    }
  // Every repacked value written once: no poison left.
  for (float v : ad) ASSERT_NE(v, -7.0f);
  for (float v : wd) ASSERT_NE(v, -9.0f);
  const std::vector<const uint8_t*> lo = {wq.data(), reinterpret_cast<const uint8_t*>(wd.data()), aq.data(),
                                          reinterpret_cast<const uint8_t*>(ad.data())};
  const std::vector<const uint8_t*> hi = {
      wq.data() + wq.size(), reinterpret_cast<const uint8_t*>(wd.data() + wd.size()), aq.data() + aq.size(),
      reinterpret_cast<const uint8_t*>(ad.data() + ad.size())};

  y.assign(static_cast<size_t>(P.rows * P.n_out), std::nanf(""));
  writes.assign(y.size(), 0);
  std::vector<uint8_t> smem(kSmemBytes);
  for (int64_t bx = 0; bx < n_pad / kBM; ++bx)
    for (int64_t by = 0; by < rows_pad / kBN; ++by) {
      TileSrc T;
      T.wq = reinterpret_cast<const int8_t*>(wq.data()), T.wd = wd.data();
      T.aq = reinterpret_cast<const int8_t*>(aq.data()), T.ad = ad.data();
      T.o0 = bx * kBM, T.t0 = by * kBN, T.a_pitch = a_pitch;
      T.acol = group_rows > 0 ? T.o0 / group_rows * L.KP : 0;
      T.KP = L.KP;
      std::fill(smem.begin(), smem.end(), 0xEE);
      const int cps = L.C / kKB, nchunks = 8 * cps;
      for (int s = 0; s < kStages - 1; ++s)
        if (s < nchunks) fill_stage(T, s * kKB, smem.data() + s * kStageBytes, lo, hi);
      std::vector<Acc> acc(kThreads);
      for (auto& a : acc) {  // begin_segment must clear each slot before use
        float* p = &a.v[0][0][0][0];
        for (size_t i = 0; i < sizeof a.v / sizeof(float); ++i) p[i] = std::nanf("");
      }
      int ci = 0;
      run_segment_host<0>(acc, T, smem, ci, nchunks, cps, lo, hi);
      run_segment_host<1>(acc, T, smem, ci, nchunks, cps, lo, hi);
      run_segment_host<2>(acc, T, smem, ci, nchunks, cps, lo, hi);
      run_segment_host<3>(acc, T, smem, ci, nchunks, cps, lo, hi);
      run_segment_host<4>(acc, T, smem, ci, nchunks, cps, lo, hi);
      run_segment_host<5>(acc, T, smem, ci, nchunks, cps, lo, hi);
      run_segment_host<6>(acc, T, smem, ci, nchunks, cps, lo, hi);
      run_segment_host<7>(acc, T, smem, ci, nchunks, cps, lo, hi);
      ASSERT_EQ(ci, nchunks);
      for (int warp = 0; warp < kThreads / 32; ++warp)
        for (int lane = 0; lane < 32; ++lane)
          for (int mt = 0; mt < kMT; ++mt)
            for (int nt = 0; nt < kNT; ++nt)
              for (int i = 0; i < 4; ++i) {
                const int64_t o = T.o0 + elem_row(lane, warp, mt, i), t = T.t0 + elem_col(lane, warp, nt, i);
                if (o < P.n_out && t < P.rows) {
                  y[t * P.n_out + o] = acc[warp * 32 + lane].v[0][mt][nt][i];
                  ++writes[t * P.n_out + o];
                }
              }
    }
}

// ---- inputs and the reference ------------------------------------------------------------

// Weights from the CPU's Q8_0 quantizer on random rows (row padding filled with garbage);
// `extreme`: row 0's quants all -128 (the largest |isum| with -128 activations).
Problem make_problem(std::mt19937& rng, int64_t n_in, int64_t n_out, int64_t rows, int64_t groups,
                     bool random_act_bytes, bool extreme) {
  Problem P;
  P.n_in = n_in, P.n_out = n_out, P.rows = rows, P.groups = groups;
  const int64_t nb = n_in / 32;
  P.row_stride = static_cast<size_t>(nb) * 34 + 6;  // 2-byte aligned, not 4: the kernel's weakest case
  P.w.assign(P.row_stride * n_out, 0x5A);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> row(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    const float scale = std::exp(nd(rng));
    for (auto& v : row) v = nd(rng) * scale;
    quant::quantize_rows(GgmlType::Q8_0, row.data(), P.w.data() + o * P.row_stride, 1, n_in, nullptr);
  }
  if (extreme)
    for (int64_t b = 0; b < nb; ++b) std::memset(P.w.data() + b * 34 + 2, 0x80, 32);
  const int64_t n = groups * n_in;
  P.aqs.resize(rows * n);
  P.ad.resize(rows * n / 32);
  std::vector<float> x(n);
  std::vector<quant::BlockQ8_0> blk(n / 32);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : x) v = nd(rng) * 3.0f;
    quant::quantize_activation_row(GgmlType::Q8_0, x.data(), blk.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      if (random_act_bytes)
        for (auto& q : blk[b].qs) q = static_cast<int8_t>(rng());
      if (extreme && r == 0) std::memset(blk[b].qs, 0x80, 32);
      std::memcpy(P.aqs.data() + r * n + 32 * b, blk[b].qs, 32);
      P.ad[r * n / 32 + b] = fp16_to_fp32(blk[b].d);  // quantize_acts' f32 view of the f16 scale
    }
  }
  return P;
}

// The CPU's dot of weight row o with activation row r (group g's slice), from the same bytes.
float reference(const Problem& P, int64_t o, int64_t r, int64_t g, bool scalar) {
  const int64_t nb = P.n_in / 32, n = P.groups * P.n_in;
  std::vector<quant::BlockQ8_0> act(nb);
  for (int64_t b = 0; b < nb; ++b) {
    std::memcpy(act[b].qs, P.aqs.data() + r * n + g * P.n_in + 32 * b, 32);
    act[b].d = fp32_to_fp16(P.ad[(r * n + g * P.n_in) / 32 + b]);  // exact: the value is an f16
  }
  const uint8_t* w = P.w.data() + o * P.row_stride;
  return scalar ? quant::vec_dot_scalar(GgmlType::Q8_0, w, act.data(), P.n_in)
                : quant::vec_dot(GgmlType::Q8_0, w, act.data(), P.n_in);
}

void check(int64_t n_in, int64_t n_out, int64_t rows, int64_t groups, bool random_act_bytes, bool extreme,
           unsigned seed) {
  SCOPED_TRACE(testing::Message() << "n_in " << n_in << " n_out " << n_out << " rows " << rows << " groups " << groups
                                  << (random_act_bytes ? " random act bytes" : "") << (extreme ? " extreme" : ""));
  std::mt19937 rng(seed);
  const Problem P = make_problem(rng, n_in, n_out, rows, groups, random_act_bytes, extreme);
  const int64_t group_rows = groups > 1 ? n_out / groups : 0;
  std::vector<float> y;
  std::vector<int> writes;
  emulate(P, group_rows, y, writes);
  if (testing::Test::HasFatalFailure()) return;
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < n_out; ++o) {
      const int64_t g = group_rows > 0 ? o / group_rows : 0;
      const float want = reference(P, o, r, g, false), want_s = reference(P, o, r, g, true);
      const float got = y[r * n_out + o];
      uint32_t a, b, c;
      std::memcpy(&a, &got, 4), std::memcpy(&b, &want, 4), std::memcpy(&c, &want_s, 4);
      ASSERT_EQ(writes[r * n_out + o], 1) << "output (" << r << ", " << o << ")";
      ASSERT_EQ(b, c) << "vec_dot and vec_dot_scalar disagree at (" << r << ", " << o << ")";
      if (a != b && ++bad <= 5)
        ADD_FAILURE() << "(" << r << ", " << o << "): emulated " << got << " (0x" << std::hex << a << "), CPU " << want
                      << " (0x" << b << std::dec << ")";
    }
  EXPECT_EQ(bad, 0);
}

TEST(GemmMmaHost, PermutationCoversEveryBlockOnce) {
  for (int64_t n_in : {32, 64, 96, 224, 256, 416, 1024, 2080, 4096, 32768}) {
    const KLayout L = k_layout(n_in);
    ASSERT_EQ(L.C % kKB, 0);
    ASSERT_GE(8 * L.C, L.nb);
    std::vector<int> seen(L.KP, 0);
    for (int x = 0; x < L.KP; ++x) {
      const int q = item_pos(L, x);
      ASSERT_GE(q, 0) << n_in << " item " << x;
      ASSERT_LT(q, L.KP);
      ++seen[q];
      EXPECT_EQ(perm_source(L, q), x < L.nb ? x : -1) << n_in << " item " << x;
    }
    for (int q = 0; q < L.KP; ++q) EXPECT_EQ(seen[q], 1) << n_in << " position " << q;
    // Within a segment, the real blocks are those of one partial in increasing order.
    for (int s = 0; s < 8; ++s)
      for (int j = 0; j < L.C; ++j) {
        const int b = perm_source(L, s * L.C + j);
        if (b >= 0) {
          EXPECT_EQ(b, seg_partial(s) + 8 * j);
        }
      }
  }
}

TEST(GemmMmaHost, MmaModelMatchesPlainProduct) {
  // The model itself: a random A, B through the register tables and back gives A*B.
  std::mt19937 rng(7);
  int8_t A[16][32], B[32][8];
  for (auto& r : A)
    for (auto& v : r) v = static_cast<int8_t>(rng());
  for (auto& r : B)
    for (auto& v : r) v = static_cast<int8_t>(rng());
  uint32_t a[32][4] = {}, b[32][2] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int gid = lane >> 2, tig = lane & 3;
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i)
        a[lane][j] |= static_cast<uint32_t>(static_cast<uint8_t>(A[gid + 8 * (j % 2)][4 * tig + 16 * (j / 2) + i]))
                      << (8 * i);
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 4; ++i)
        b[lane][j] |= static_cast<uint32_t>(static_cast<uint8_t>(B[4 * tig + 16 * j + i][gid])) << (8 * i);
  }
  int d[32][4];
  mma_model(a, b, 5, d);
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j) {
      const int row = (lane >> 2) + 8 * (j / 2), col = 2 * (lane & 3) + (j % 2);
      int s = 5;
      for (int k = 0; k < 32; ++k) s += A[row][k] * B[k][col];
      EXPECT_EQ(d[lane][j], s);
    }
}

TEST(GemmMmaHost, BiasedIntegerIsExactFloat) {
  // The largest |isum| (32 * 128 * 128) and its neighbours come back exactly.
  for (int isum : {0, 1, -1, 127, -16129, 524288, -524288, 524287, -524287, 4194303 - 1}) {
    const float f = add_term(0.0f, kBiasBits + isum, 1.0f, 1.0f);
    EXPECT_EQ(f, static_cast<float>(isum)) << isum;
  }
}

// Shapes: a single block; fewer blocks than partials; partial tiles in M and N; segments that
// need padding (13, 65 blocks); the Flash widths 1024 and 4096; two groups (matmul_grouped).
TEST(GemmMmaHost, SmallShapesEqualVecDot) {
  check(32, 128, 64, 1, false, false, 1);
  check(96, 130, 33, 1, false, false, 2);
  check(416, 128, 100, 1, false, false, 3);
}
TEST(GemmMmaHost, FlashWidthsEqualVecDot) {
  check(1024, 200, 64, 1, false, false, 4);
  check(4096, 128, 40, 1, false, false, 5);
  check(2080, 128, 32, 1, false, false, 6);
}
TEST(GemmMmaHost, GroupsAndExtremeBytesEqualVecDot) {
  check(256, 256, 50, 2, false, false, 8);
  check(512, 128, 65, 1, true, true, 9);
}

}  // namespace
}  // namespace ds4::test
