// The tensor-core routed-expert kernels' per-thread code (src/compute/cuda/gemm_moe_mma.cuh) run
// on the host in k_moe_mma's order (gemm_moe_mma.cu: stage 0's copies issued, then per
// superblock in visiting order: the next stage's copies (cp.async emulated: the raw words of
// each row's superblock, no byte read outside the weights), the decode of this one's raw bytes,
// integer sums by mma per 32-value step, the superblock's term into its slot), with mma.sync m16n8k32 .s8 modelled from the PTX fragment tables
// (as test_gemm_mma_host.cpp), against quant::vec_dot (IQ2_XXS and Q2_K against Q8_K rows):
// every output equal bit for bit and written once. Also: the sign table, the visiting order,
// the tile -> expert search, and mma_moe's whole sequence (grouping, the three emulated
// products, swiglu_cpu, the slot sum) against the CPU backend's moe_experts. Checked to fail on
// a swapped Q2_K fold, a reassociated IQ2_XXS term and a reassociated swiglu product. The GPU
// itself is checked by tests/cuda/cuda_mma_check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "compute/backend.h"
#include "compute/cuda/gemm_moe_mma.cuh"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "quant/quant.h"
#include "quant/types.h"

namespace ds4::test {
namespace {

using namespace ds4::cuda::moe_mma;

int8_t byte_at(uint32_t w, int i) { return static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * i))); }

// d[lane][j] = (A * B)[..] + c[lane][j] (PTX ISA, mma.m16n8k32 .s8 fragments).
void mma_model(const uint32_t a[32][4], const uint32_t b[32][2], const int c[32][4], int d[32][4]) {
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
      int64_t s = c[lane][j];
      for (int k = 0; k < 32; ++k) s += static_cast<int64_t>(A[row][k]) * B[k][col];
      d[lane][j] = static_cast<int>(s);
    }
  }
}

struct Case {
  bool q2k = false;
  int64_t n_in = 0, n_out = 0;
  std::vector<uint8_t> w;  // one expert: n_out rows
  size_t row_stride = 0;
  std::vector<int8_t> aqs;  // activation rows (Q8_K quants), n_in each
  std::vector<float> ad;
  std::vector<quant::BlockQ8_K> act;  // the same rows for the CPU
};

// One superblock (stage st) for all 256 threads, into fa[thread] (SLOT), as superblock<>.
template <bool Q2K, int SLOT>
void superblock_host(std::vector<FAcc<Q2K>>& fa, const uint8_t* dec, const uint8_t* st) {
  constexpr bool q2k = Q2K;
  for (int warp = 0; warp < kThreads / 32; ++warp) {
    IAcc<Q2K> ia[32];
    Ls ls[32];
    for (auto& a : ia) clear(a);
    if (!q2k)
      for (int lane = 0; lane < 32; ++lane) load_ls(dec, lane, warp, ls[lane]);
    for (int ks = 0; ks < 8; ++ks) {
      Frags<Q2K> fr[32];
      uint32_t am[32][kMT][4];
      for (int lane = 0; lane < 32; ++lane) {
        load_frags(dec, st, lane, warp, ks, fr[lane]);
        if (q2k) load_min_frags(dec, lane, warp, ks, am[lane]);
      }
      for (int mt = 0; mt < kMT; ++mt)
        for (int nt = 0; nt < Geo<Q2K>::kNT; ++nt) {
          uint32_t a[32][4], b[32][2];
          int c[32][4], d[32][4];
          for (int lane = 0; lane < 32; ++lane) {
            std::memcpy(a[lane], fr[lane].a[mt], sizeof a[lane]);
            std::memcpy(b[lane], fr[lane].b[nt], sizeof b[lane]);
          }
          if (q2k) {
            for (int lane = 0; lane < 32; ++lane) std::memcpy(c[lane], ia[lane].v[mt][nt], sizeof c[lane]);
            mma_model(a, b, c, d);
            for (int lane = 0; lane < 32; ++lane) std::memcpy(ia[lane].v[mt][nt], d[lane], sizeof d[lane]);
            for (int lane = 0; lane < 32; ++lane) {
              std::memcpy(a[lane], am[lane][mt], sizeof a[lane]);
              std::memcpy(c[lane], ia[lane].m[mt][nt], sizeof c[lane]);
            }
            mma_model(a, b, c, d);
            for (int lane = 0; lane < 32; ++lane) std::memcpy(ia[lane].m[mt][nt], d[lane], sizeof d[lane]);
          } else {
            std::memset(c, 0, sizeof c);
            mma_model(a, b, c, d);
            for (int lane = 0; lane < 32; ++lane) {
              if constexpr (!Q2K) iq2_group(ia[lane], ls[lane], ks, mt, nt, d[lane]);
            }
          }
        }
    }
    for (int lane = 0; lane < 32; ++lane) {
      if constexpr (Q2K)
        q2k_term<SLOT>(fa[warp * 32 + lane], ia[lane], dec, st, lane, warp);
      else
        iq2_term(fa[warp * 32 + lane], ia[lane], dec, st, lane, warp);
    }
  }
}

struct LoopH {
  const Case* C;
  std::vector<uint8_t> smem;
  int64_t o0;
  std::vector<int> pair;  // tile column -> pair (-1 padding)
  int act_div;            // activation row of a pair: pair / act_div (gate/up: k, down: 1)
  int nsb, idx;
};

// issue_stage's copies (cp.async: raw 16-byte pieces of each row's superblock, reading only
// raw_piece_bytes of each, the rest zeros; rows past n_out not copied) and act_piece's bytes.
template <bool Q2K>
void issue_host(LoopH& L, int sb, uint8_t* st) {
  using G = Geo<Q2K>;
  const Case& C = *L.C;
  for (int row = 0; row < kBM; ++row) {
    const int64_t o = L.o0 + row;
    if (o >= C.n_out) continue;
    const uint8_t* blk = C.w.data() + o * C.row_stride + sb * G::kSbBytes;
    const int lead = raw_lead(blk);
    for (int w = 0; w < G::kRawChunks; ++w) {
      const uint8_t* src = blk - lead + 16 * w;
      const int n = raw_piece_bytes<Q2K>(lead, w);
      uint8_t* dst = st + G::kRawWOff + row * G::kRawPitch + 16 * w;
      ASSERT_EQ(reinterpret_cast<uintptr_t>(src) % 16, 0u);
      if (n > 0) {
        ASSERT_GE(src, C.w.data()) << "read before the weights";
        ASSERT_LE(src + n, C.w.data() + C.w.size()) << "read past the weights";
      }
      std::memset(dst, 0, 16);
      std::memcpy(dst, src, static_cast<size_t>(n));
    }
  }
  for (int i = 0; i < G::kItemsA; ++i) {
    const int p = L.pair[i / 16];
    act_piece<Q2K>(C.aqs.data(), C.ad.data(), C.n_in, p < 0 ? -1 : p / L.act_div, sb, i, st);
  }
}

// decode_stage: the stage's raw superblock of every row into dec.
template <bool Q2K>
void decode_host(LoopH& L, int sb, const uint8_t* st, uint8_t* dec) {
  using G = Geo<Q2K>;
  const Case& C = *L.C;
  for (int item = 0; item < G::kItemsW; ++item) {
    const int row = item / 8, c = item % 8;
    const int64_t o = L.o0 + row;
    const uint8_t* blk = nullptr;
    if (o < C.n_out) {
      blk = C.w.data() + o * C.row_stride + sb * G::kSbBytes;
      if constexpr (G::kStaged) blk = st + G::kRawWOff + row * G::kRawPitch + raw_lead(blk);
    }
    if constexpr (Q2K)
      decode_q2k_item(blk, c, dec, row);
    else
      decode_iq2_item(blk, c, quant::iq2xxs_grid, dec, row);
  }
}

// k_moe_mma's step: the stage of L.idx (issued a step earlier), the next one's copies, decode,
// compute.
template <bool Q2K, int SLOT>
void step_host(std::vector<FAcc<Q2K>>& fa, LoopH& L) {
  using G = Geo<Q2K>;
  uint8_t* dec = L.smem.data();
  uint8_t* st = dec + G::kDecBytes + (L.idx & 1) * G::kStageBytes;
  if (L.idx + 1 < L.nsb) {
    issue_host<Q2K>(L, sb_at(Q2K, L.nsb, L.idx + 1), dec + G::kDecBytes + ((L.idx + 1) & 1) * G::kStageBytes);
    if (testing::Test::HasFatalFailure()) return;
  }
  decode_host<Q2K>(L, sb_at(Q2K, L.nsb, L.idx), st, dec);
  superblock_host<Q2K, SLOT>(fa, dec, st);
  ++L.idx;
}

template <int S>
void q2k_segment_host(std::vector<FAcc<true>>& fa, LoopH& L) {
  for (auto& f : fa) clear_slot<seg_slot(S)>(f);
  const int n = seg_count_sb(L.nsb, S);
  for (int j = 0; j < n && !testing::Test::HasFatalFailure(); ++j) step_host<true, seg_slot(S)>(fa, L);
  for (auto& f : fa) end_segment<S>(f);
}

// Outputs y[p][o] of one tile (rows o0.., columns = pairs pair[], activation row p / act_div)
// as k_moe_mma writes them.
template <bool Q2K>
void emulate_tile_t(const Case& C, int64_t o0, const std::vector<int>& pair, std::vector<float>& y,
                    std::vector<int>& writes, int64_t n_tok, int act_div) {
  LoopH L;
  L.C = &C;
  L.smem.assign(Geo<Q2K>::kSmemBytes, 0xEE);
  L.o0 = o0;
  L.pair = pair;
  L.pair.resize(Geo<Q2K>::kBN, -1);
  L.act_div = act_div;
  L.nsb = static_cast<int>(C.n_in / 256);
  L.idx = 0;
  issue_host<Q2K>(L, sb_at(Q2K, L.nsb, 0), L.smem.data() + Geo<Q2K>::kDecBytes);
  if (testing::Test::HasFatalFailure()) return;
  std::vector<FAcc<Q2K>> fa(kThreads);
  for (auto& f : fa) {
    float* p = &f.v[0][0][0][0];
    for (size_t i = 0; i < sizeof f.v / sizeof(float); ++i) p[i] = std::nanf("");
  }
  if constexpr (Q2K) {
    q2k_segment_host<0>(fa, L);
    q2k_segment_host<1>(fa, L);
    q2k_segment_host<2>(fa, L);
    q2k_segment_host<3>(fa, L);
    q2k_segment_host<4>(fa, L);
    q2k_segment_host<5>(fa, L);
    q2k_segment_host<6>(fa, L);
    q2k_segment_host<7>(fa, L);
  } else {
    for (auto& f : fa) clear_slot<0>(f);
    for (int j = 0; j < L.nsb && !testing::Test::HasFatalFailure(); ++j) step_host<false, 0>(fa, L);
  }
  ASSERT_EQ(L.idx, L.nsb);
  const int ntok = static_cast<int>(pair.size());
  for (int warp = 0; warp < kThreads / 32; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int mt = 0; mt < kMT; ++mt)
        for (int nt = 0; nt < Geo<Q2K>::kNT; ++nt)
          for (int i = 0; i < 4; ++i) {
            const int64_t o = o0 + elem_row(lane, warp, mt, i);
            const int col = elem_col<Q2K>(lane, warp, nt, i);
            if (o < C.n_out && col < ntok) {
              float v = fa[warp * 32 + lane].v[0][mt][nt][i];
              if (!C.q2k) v = 0.125f * v;
              const int64_t t = pair[col];
              ASSERT_LT(t, n_tok);
              y[t * C.n_out + o] = v;
              ++writes[t * C.n_out + o];
            }
          }
}

void emulate_tile(const Case& C, int64_t o0, const std::vector<int>& pair, std::vector<float>& y,
                  std::vector<int>& writes, int64_t n_tok, int act_div = 1) {
  if (C.q2k)
    emulate_tile_t<true>(C, o0, pair, y, writes, n_tok, act_div);
  else
    emulate_tile_t<false>(C, o0, pair, y, writes, n_tok, act_div);
}
int tile_pairs(bool q2k) { return q2k ? Geo<true>::kBN : Geo<false>::kBN; }

// Random blocks with finite scales (every quant byte random: all grid indices, signs, ls, Q2_K
// scale and min nibbles); activations from the CPU's Q8_K quantizer, or random bytes (bsums
// recomputed so the CPU's Q2_K dot sees the same values).
Case make_case(std::mt19937& rng, bool q2k, int64_t n_in, int64_t n_out, int64_t n_tok, bool random_act_bytes) {
  Case C;
  C.q2k = q2k, C.n_in = n_in, C.n_out = n_out;
  const int64_t nsb = n_in / 256;
  const int bb = q2k ? 84 : 66;
  C.row_stride = static_cast<size_t>(nsb) * bb + (q2k ? 4 : 2);  // padded, alignment kept
  C.w.resize(C.row_stride * n_out);
  for (auto& b : C.w) b = static_cast<uint8_t>(rng());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t sb = 0; sb < nsb; ++sb) {
      uint8_t* blk = C.w.data() + o * C.row_stride + sb * bb;
      const uint16_t d = fp32_to_fp16(0.01f * nd(rng)), dm = fp32_to_fp16(0.01f * nd(rng));
      if (q2k) {
        std::memcpy(blk + 80, &d, 2);
        std::memcpy(blk + 82, &dm, 2);
      } else {
        std::memcpy(blk, &d, 2);
      }
    }
  C.act.resize(n_tok * nsb);
  C.aqs.resize(n_tok * n_in);
  C.ad.resize(n_tok * nsb);
  std::vector<float> x(n_in);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (auto& v : x) v = nd(rng) * std::exp(nd(rng));
    quant::quantize_activation_row(GgmlType::Q8_K, x.data(), C.act.data() + t * nsb, n_in);
    for (int64_t sb = 0; sb < nsb; ++sb) {
      quant::BlockQ8_K& a = C.act[t * nsb + sb];
      if (random_act_bytes) {
        for (auto& q : a.qs) q = static_cast<int8_t>(rng());
        for (int j = 0; j < 16; ++j) {
          int s = 0;
          for (int i = 0; i < 16; ++i) s += a.qs[16 * j + i];
          a.bsums[j] = static_cast<int16_t>(s);
        }
      }
      std::memcpy(C.aqs.data() + t * n_in + 256 * sb, a.qs, 256);
      C.ad[t * nsb + sb] = a.d;
    }
  }
  return C;
}

void check(bool q2k, int64_t n_in, int64_t n_out, int64_t n_tok, bool random_act_bytes, unsigned seed) {
  SCOPED_TRACE(testing::Message() << (q2k ? "Q2_K" : "IQ2_XXS") << " n_in " << n_in << " n_out " << n_out << " tokens "
                                  << n_tok << (random_act_bytes ? " random act bytes" : ""));
  std::mt19937 rng(seed);
  const Case C = make_case(rng, q2k, n_in, n_out, n_tok, random_act_bytes);
  std::vector<float> y(n_tok * n_out, std::nanf(""));
  std::vector<int> writes(y.size(), 0);
  // Tokens in a shuffled order (as the device placement leaves them), kBN per tile.
  const int kBN = tile_pairs(q2k);
  std::vector<int> order(n_tok);
  for (int t = 0; t < n_tok; ++t) order[t] = t;
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t o0 = 0; o0 < n_out; o0 += kBM)
    for (int64_t j0 = 0; j0 < n_tok; j0 += kBN) {
      std::vector<int> pair(order.begin() + j0, order.begin() + std::min<int64_t>(n_tok, j0 + kBN));
      emulate_tile(C, o0, pair, y, writes, n_tok);
      if (testing::Test::HasFatalFailure()) return;
    }
  const GgmlType wt = q2k ? GgmlType::Q2_K : GgmlType::IQ2_XXS;
  const int64_t nsb = n_in / 256;
  int64_t bad = 0;
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t o = 0; o < n_out; ++o) {
      ASSERT_EQ(writes[t * n_out + o], 1) << "(" << t << ", " << o << ")";
      const float want = quant::vec_dot(wt, C.w.data() + o * C.row_stride, C.act.data() + t * nsb, n_in);
      const float want_s = quant::vec_dot_scalar(wt, C.w.data() + o * C.row_stride, C.act.data() + t * nsb, n_in);
      const float got = y[t * n_out + o];
      uint32_t a, b, c;
      std::memcpy(&a, &got, 4), std::memcpy(&b, &want, 4), std::memcpy(&c, &want_s, 4);
      ASSERT_EQ(b, c) << "vec_dot and vec_dot_scalar disagree";
      if (a != b && ++bad <= 5)
        ADD_FAILURE() << "(" << t << ", " << o << "): emulated " << got << " (0x" << std::hex << a << "), CPU " << want
                      << " (0x" << b << std::dec << ")";
    }
  EXPECT_EQ(bad, 0);
}

TEST(GemmMoeMmaHost, SignTableAndOrder) {
  for (uint32_t s = 0; s < 128; ++s) {
    const uint32_t sg = s | ((static_cast<uint32_t>(popc7(s)) & 1u) << 7);
    EXPECT_EQ(sg, quant::ksigns_iq2xs[s]) << s;
  }
  for (int nsb : {1, 3, 8, 16, 20}) {
    std::vector<int> seen(nsb, 0);
    int prev_seg_last = -1;
    (void)prev_seg_last;
    for (int i = 0; i < nsb; ++i) {
      const int sb = sb_at(true, nsb, i);
      ASSERT_GE(sb, 0);
      ASSERT_LT(sb, nsb);
      ++seen[sb];
      EXPECT_EQ(sb_at(false, nsb, i), i);
    }
    for (int v : seen) EXPECT_EQ(v, 1);
  }
  // tile0 for counts {3, 0, 40, 32} with kBN 32: {0, 1, 1, 3, 4}.
  const int32_t tile0[5] = {0, 1, 1, 3, 4};
  EXPECT_EQ(tile_expert(tile0, 4, 0), 0);
  EXPECT_EQ(tile_expert(tile0, 4, 1), 2);
  EXPECT_EQ(tile_expert(tile0, 4, 2), 2);
  EXPECT_EQ(tile_expert(tile0, 4, 3), 3);
  EXPECT_EQ(tile_expert(tile0, 4, 4), -1);
}

// gate/up shapes (IQ2_XXS, one running sum), down shapes (Q2_K, 8 partials): superblock counts
// below, at and above 8; partial row and token tiles.
TEST(GemmMoeMmaHost, Iq2xxsEqualsVecDot) {
  check(false, 256, 128, 32, false, 1);
  check(false, 1024, 130, 45, false, 2);
  check(false, 2304, 128, 7, true, 3);
  check(false, 512, 128, 70, false, 7);  // two pair tiles of 64
}
TEST(GemmMoeMmaHost, Q2kEqualsVecDot) {
  check(true, 256, 128, 32, false, 4);
  check(true, 2048, 200, 40, false, 5);
  check(true, 2560, 128, 9, true, 6);
}

// ---- the whole routed-expert product against the CPU backend's moe_experts -----------------

// Random superblock rows (every quant byte random) with finite fp16 scales, as make_case.
std::vector<uint8_t> random_rows(std::mt19937& rng, bool q2k, int64_t n_in, int64_t n_rows, size_t row_stride) {
  const int bb = q2k ? 84 : 66;
  std::vector<uint8_t> w(row_stride * n_rows);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t o = 0; o < n_rows; ++o)
    for (int64_t sb = 0; sb < n_in / 256; ++sb) {
      uint8_t* blk = w.data() + o * row_stride + sb * bb;
      const uint16_t d = fp32_to_fp16(0.01f * nd(rng)), dm = fp32_to_fp16(0.01f * nd(rng));
      std::memcpy(blk + (q2k ? 80 : 0), &d, 2);
      if (q2k) std::memcpy(blk + 82, &dm, 2);
    }
  return w;
}

// Case of one expert's matrix (bytes copied) with activation rows x (rows x n_in, the CPU's
// Q8_K quantizer: quantize_acts' bytes on the device).
Case expert_case(bool q2k, const std::vector<uint8_t>& all, size_t expert_stride, int64_t e, size_t row_stride,
                 int64_t n_in, int64_t n_out, const std::vector<float>& x, int64_t rows) {
  Case C;
  C.q2k = q2k, C.n_in = n_in, C.n_out = n_out, C.row_stride = row_stride;
  C.w.assign(all.begin() + e * expert_stride, all.begin() + e * expert_stride + row_stride * n_out);
  const int64_t nsb = n_in / 256;
  C.act.resize(rows * nsb);
  C.aqs.resize(rows * n_in);
  C.ad.resize(rows * nsb);
  for (int64_t t = 0; t < rows; ++t) {
    quant::quantize_activation_row(GgmlType::Q8_K, x.data() + t * n_in, C.act.data() + t * nsb, n_in);
    for (int64_t sb = 0; sb < nsb; ++sb) {
      std::memcpy(C.aqs.data() + t * n_in + 256 * sb, C.act[t * nsb + sb].qs, 256);
      C.ad[t * nsb + sb] = C.act[t * nsb + sb].d;
    }
  }
  return C;
}

// Every (expert, matrix) tile of gemm_moe_mma.cu's launch over groups (pairs of each expert in
// placement order), into out[p * n_out + o]; each value written exactly once.
void emulate_grouped(bool q2k, const std::vector<uint8_t>& all, size_t expert_stride, size_t row_stride, int64_t n_in,
                     int64_t n_out, const std::vector<float>& x, int64_t x_rows,
                     const std::vector<std::vector<int>>& groups, int64_t pairs, int act_div, std::vector<float>& out) {
  out.assign(pairs * n_out, std::nanf(""));
  std::vector<int> writes(out.size(), 0);
  const size_t kBN = static_cast<size_t>(tile_pairs(q2k));
  for (size_t e = 0; e < groups.size(); ++e) {
    if (groups[e].empty()) continue;
    const Case C = expert_case(q2k, all, expert_stride, static_cast<int64_t>(e), row_stride, n_in, n_out, x, x_rows);
    for (size_t j0 = 0; j0 < groups[e].size(); j0 += kBN) {
      const std::vector<int> tile(groups[e].begin() + j0, groups[e].begin() + std::min(groups[e].size(), j0 + kBN));
      for (int64_t o0 = 0; o0 < n_out; o0 += kBM) {
        emulate_tile(C, o0, tile, out, writes, pairs, act_div);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
  for (size_t i = 0; i < writes.size(); ++i) ASSERT_EQ(writes[i], 1) << "pair " << i / n_out << " out " << i % n_out;
}

// mma_moe's steps on the host (the grouping, the emulated tile kernels for gate, up and down,
// swiglu_cpu, the CPU's Q8_K quantizer for h, the slot-order sum) against
// compute::make_cpu_backend's moe_experts on the same bytes: equal bit for bit. One expert gets a
// pair from every token (two gate/up pair tiles, three down ones), one none; limit 0 and 6 (the clamps).
TEST(GemmMoeMmaHost, RoutedExpertsEqualCpuBackend) {
  const int64_t d = 512, ff = 2048, E = 5, K = 3, rows = 70, pairs = rows * K;  // down: all 8 partials
  const size_t gu_row = (d / 256) * 66 + 2, dn_row = (ff / 256) * 84 + 4;       // padded rows, alignment kept
  const size_t gu_exp = gu_row * (ff + 1), dn_exp = dn_row * (d + 1);           // one padding row per expert
  std::mt19937 rng(7);
  const std::vector<uint8_t> gate = random_rows(rng, false, d, E * (ff + 1), gu_row);
  const std::vector<uint8_t> up = random_rows(rng, false, d, E * (ff + 1), gu_row);
  const std::vector<uint8_t> down = random_rows(rng, true, ff, E * (d + 1), dn_row);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(rows * d), w(pairs);
  std::vector<int32_t> ids(pairs);
  for (auto& v : x) v = nd(rng) * 0.5f;
  for (auto& v : w) v = 0.05f + std::fabs(nd(rng));
  for (int64_t t = 0; t < rows; ++t) {  // expert 0 in a random slot, two distinct others of 1..3
    std::vector<int32_t> e = {1, 2, 3};
    std::shuffle(e.begin(), e.end(), rng);
    e[2] = 0;
    std::shuffle(e.begin(), e.end(), rng);
    std::copy(e.begin(), e.end(), ids.begin() + t * K);
  }
  ThreadPool pool(2);
  auto cpu = compute::make_cpu_backend(&pool);
  auto set = [](const std::vector<uint8_t>& v, GgmlType t, int64_t n_in, int64_t n_out, size_t row, size_t ex) {
    return compute::ExpertSet{compute::Matrix{t, v.data(), n_in, n_out, row}, E, ex};
  };
  for (float limit : {0.0f, 6.0f}) {
    SCOPED_TRACE(testing::Message() << "limit " << limit);
    std::vector<float> want(rows * d);
    cpu->moe_experts(
        set(gate, GgmlType::IQ2_XXS, d, ff, gu_row, gu_exp), set(up, GgmlType::IQ2_XXS, d, ff, gu_row, gu_exp),
        set(down, GgmlType::Q2_K, ff, d, dn_row, dn_exp), x.data(), ids.data(), w.data(), rows, K, limit, want.data());
    // The device's placement order within an expert is whatever the atomics give: shuffled.
    std::vector<std::vector<int>> groups(E);
    for (int p = 0; p < pairs; ++p) groups[ids[p]].push_back(p);
    for (auto& g : groups) std::shuffle(g.begin(), g.end(), rng);
    ASSERT_GT(groups[0].size(), static_cast<size_t>(tile_pairs(false)));
    ASSERT_TRUE(groups[4].empty());
    std::vector<float> g_out, u_out, out;
    emulate_grouped(false, gate, gu_exp, gu_row, d, ff, x, rows, groups, pairs, K, g_out);
    if (HasFatalFailure()) return;
    emulate_grouped(false, up, gu_exp, gu_row, d, ff, x, rows, groups, pairs, K, u_out);
    if (HasFatalFailure()) return;
    std::vector<float> h(pairs * ff);
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t o = 0; o < ff; ++o) h[p * ff + o] = cuda::swiglu_cpu(g_out[p * ff + o], u_out[p * ff + o], limit, w[p]);
    emulate_grouped(true, down, dn_exp, dn_row, ff, d, h, pairs, groups, pairs, 1, out);
    if (HasFatalFailure()) return;
    int64_t bad = 0, clamped = 0;
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t o = 0; o < d; ++o) {
        float acc = 0.0f;  // k_mma_slot_sum
        for (int64_t s = 0; s < K; ++s) acc += out[(t * K + s) * d + o];
        uint32_t a, b;
        std::memcpy(&a, &acc, 4), std::memcpy(&b, &want[t * d + o], 4);
        if (a != b && ++bad <= 5)
          ADD_FAILURE() << "(" << t << ", " << o << "): emulated " << acc << ", CPU " << want[t * d + o];
      }
    for (int64_t i = 0; i < pairs * ff; ++i) clamped += limit > 0 && (g_out[i] > limit || std::fabs(u_out[i]) > limit);
    EXPECT_EQ(bad, 0);
    if (limit > 0) {
      EXPECT_GT(clamped, 0) << "the limit clamps nothing: the case does not test it";
    }
  }
}

}  // namespace
}  // namespace ds4::test
