// Few-token (decode) products for the routed-expert formats IQ2_XXS and Q2_K against Q8_K
// activations, with AVX-512 F/BW/VL/DQ + VNNI + VBMI (run-time checked in quant.cpp). The
// blocked kernels of gemm_avx512.cpp decode a 16-row panel into memory and pay for it once per
// batch, which a one-token product cannot amortise; these kernels decode each weight block in
// registers and use it at once for a few tokens (kGemvMaxTokens*), rows read as streams (prefetched).
//
// Layout: 16 rows form a group. Each row's super-block is worked in its natural element order
// (64 weights per zmm, no transposition); the 16 rows' partial-sum vectors are then reduced by a
// transposing add tree into one vector whose lane r is row r's exact integer block sum, and the
// float work runs 16 rows per instruction. A group is walked kChunk blocks at a time, pair by pair
// (rows 0-1 over the chunk's blocks, then rows 2-3, ...), the add-tree state of each block kept in
// a small stack array: each row is then read as a run of consecutive blocks instead of 16 rows
// interleaved one block each, which the prefetchers follow better (1.3-1.45x for 1-2 tokens on
// one core of a 16-core AVX-512 FP16 Xeon, gemm_bench --experts 200).
//
// IQ2_XXS (per pair of rows, one block each): the 64 grid-index bytes of the two rows go through
// two 256-entry byte tables at once (two vpermi2b + a blend each): table b0 holds, for grid point
// k, a bit per weight where the magnitude is 25, table b1 where it is 43 (8 elsewhere). The 7-bit
// sign codes are cut out of the sign words with vpmultishiftqb and completed to their even-parity
// byte with one vpermi2b on ksigns. Stored and reloaded as mask registers, those bytes build the
// weight magnitudes (two masked moves), negate the activations where the sign bit is set, and
// vpmaddubsw + vpdpwssd (with the sub-block scale 2s+1 per word) sum the block exactly.
//   Exactness: magnitude <= 43 and |activation| <= 127, so the vpmaddubsw pairs (<= 10922) do
//   not saturate. An activation byte -128 meeting a minus sign would not negate; such calls
//   (ggml's Q8_K quantizer never writes -128) go to the blocked kernel instead.
// Q2_K (per row and block): the 64 code bytes give the 4 bit planes with a shift and a mask; a
// vpshufb per plane maps each 2-bit code to scale * code (<= 45) with the 16-weight sub-block's
// scale in each 128-bit lane (a sub-block is exactly one lane), and vpdpbusd multiplies by the
// activations, rearranged once per call into the same plane order. The mins go through vpmaddwd
// with the bsums (as the scalar kernel: from bsums), in the upper half of the reduced vector.
//
// Float work per (row, token, block) is the scalar kernel's expression in its order: IQ2_XXS
// sumf += (d_w * d_x) * bsum with one running sum and 0.125 * sumf at the end; Q2_K
// lane b % 8 += (d_x * d) * isum - (d_x * dmin) * summs, folded as lane_sum.h. -ffp-contract=off
// keeps mul + add from fusing. So the results equal the scalar kernels bit for bit.
// As gemm_avx512.cpp: no std:: and no shared inline helpers, and _mm256_zeroupper() at the end of
// the exported functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <stdlib.h>

#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "quant/iq2_xxs.h"
#include "quant/kernels.h"

namespace ds4::quant {

namespace {

constexpr int kGroup = 16;  // rows per group = int32 lanes of a zmm
constexpr int kQ8KBytes = static_cast<int>(sizeof(BlockQ8_K));
constexpr int kQ8KQsOffset = 4;  // float d, then the quants

inline __m512i loadu512(const void* p) { return _mm512_loadu_si512(p); }

inline void store_lanes(float* y, __m512 v, int64_t rows) {
  const __mmask16 m = rows >= kGroup ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1);
  _mm512_mask_storeu_ps(y, m, v);
}

// Transposing add tree. red1(a, b): in each 128-bit lane, [a0+a2, b0+b2, a1+a3, b1+b3].
inline __m512i red1(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
// red2(s01, s23): 128-bit lane i holds v0..v3's sums over their lane i.
inline __m512i red2(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
// red3(u0..3, u4..7): lanes [v0..3 over L0+L1, v0..3 over L2+L3, v4..7 over L0+L1, v4..7 over L2+L3].
inline __m512i red3(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}
// Lanes 0..3 of red3's results: rows v0..3 (L0 + L1 half), 4..7, 8..11, 12..15.
inline __m512i red4_lo(__m512i a, __m512i b) { return _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)); }
inline __m512i red4_hi(__m512i a, __m512i b) { return _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)); }

// Tree state of one (block, token) over the 16 rows of a group, fed one row pair at a time in
// pair order: s01, u0123, w0..7 and w8..15 (kept in memory: the group is walked pair by pair,
// each pair over all blocks of a chunk, so that the rows are read front to back).
struct Tree {
  __m512i s, u, w07, w815;
};
template <int P>
inline void tree_push(Tree& t, __m512i a, __m512i b) {
  const __m512i s = red1(a, b);
  if constexpr ((P & 1) == 0) {
    t.s = s;
  } else {
    const __m512i u = red2(t.s, s);
    if constexpr ((P & 2) == 0) {
      t.u = u;
    } else {
      const __m512i w = red3(t.u, u);
      if constexpr ((P & 4) == 0)
        t.w07 = w;
      else
        t.w815 = w;
    }
  }
}

constexpr int64_t kChunk = 16;  // blocks per pass over the group's rows

// Address of row `row` + `ahead` rows, block b, for a prefetch (never dereferenced: a prefetch of
// an address past the matrix does not fault).
inline const char* ahead_addr(const uint8_t* row, size_t ws, int ahead, int64_t off) {
  return reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(row) + ahead * ws + static_cast<uintptr_t>(off));
}

// ------------------------------------------------------------- IQ2_XXS -----------------
struct Iq2Tables {
  alignas(64) uint8_t b0[256];  // bit j of entry k: weight j of grid point k has magnitude 0x19
  alignas(64) uint8_t b1[256];  // ... magnitude 0x2b (neither: 0x08)
  alignas(64) uint8_t signs[128];
  bool ok;  // every grid byte is one of the three magnitudes
};

const Iq2Tables& iq2_tables() {
  static const Iq2Tables t = [] {
    Iq2Tables r{};
    r.ok = true;
    for (int k = 0; k < 256; ++k) {
      for (int j = 0; j < 8; ++j) {
        const unsigned v = static_cast<unsigned>((iq2xxs_grid[k] >> (8 * j)) & 0xff);
        if (v == 0x19) r.b0[k] = static_cast<uint8_t>(r.b0[k] | (1u << j));
        else if (v == 0x2b) r.b1[k] = static_cast<uint8_t>(r.b1[k] | (1u << j));
        else if (v != 0x08) r.ok = false;
      }
    }
    for (int c = 0; c < 128; ++c) r.signs[c] = ksigns_iq2xs[c];
    return r;
  }();
  return t;
}

struct Iq2Consts {
  __m512i b0[4], b1[4], sg[2];
  __m512i idx_x, idx_y, shifts, one, c8, c25, c43;
  __m512i lsw[8];  // word index vectors for (row of the pair, 64-weight slice k)
};

inline void iq2_consts(const Iq2Tables& tb, Iq2Consts& c) {
  for (int i = 0; i < 4; ++i) {
    c.b0[i] = _mm512_load_si512(tb.b0 + 64 * i);
    c.b1[i] = _mm512_load_si512(tb.b1 + 64 * i);
  }
  c.sg[0] = _mm512_load_si512(tb.signs);
  c.sg[1] = _mm512_load_si512(tb.signs + 64);
  // Block dwords (after d): even = 4 grid indices of sub-block j, odd = its sign codes + scale.
  c.idx_x = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  c.idx_y = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  // Each qword of y = sign words of sub-blocks 2k, 2k+1: codes at bits 0, 7, 14, 21, 32, 39, 46, 53.
  c.shifts = _mm512_set1_epi64(0x352E2720150E0700LL);
  c.one = _mm512_set1_epi32(1);
  c.c8 = _mm512_set1_epi8(0x08);
  c.c25 = _mm512_set1_epi8(0x19);
  c.c43 = _mm512_set1_epi8(0x2b);
  for (int rr = 0; rr < 2; ++rr)
    for (int k = 0; k < 4; ++k) {
      alignas(64) uint16_t ix[32];
      for (int i = 0; i < 32; ++i) ix[i] = static_cast<uint16_t>(2 * (8 * rr + 2 * k + (i < 16 ? 0 : 1)));
      c.lsw[4 * rr + k] = _mm512_load_si512(ix);
    }
}

// kmovq from memory. Written as asm because GCC otherwise forwards the stored vector through
// general registers (vpextrq / valignq + kmovq: several vector-port operations per mask), where a
// mask load only uses a load port.
inline __mmask64 load_mask(const __mmask64* p) {
  __mmask64 k;
  __asm__("kmovq %1, %0" : "=k"(k) : "m"(*p));
  return k;
}

inline __m512i lookup256(const __m512i t[4], __m512i idx, __mmask64 high) {
  return _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(t[0], idx, t[1]), _mm512_permutex2var_epi8(t[2], idx, t[3]));
}

// One block b of rows (r, s) = group rows (2p, 2p + 1): their T exact scaled sums as vectors
// (lanes are partial sums; the tree adds them up).
template <int T>
inline void iq2_pair(const Iq2Consts& c, const uint8_t* br, const uint8_t* bs, const uint8_t* const act[T],
                     const uint8_t* const neg[T], int64_t b, __m512i out_r[T], __m512i out_s[T]) {
  const __m512i q0 = loadu512(br + 2), q1 = loadu512(bs + 2);
  const __m512i x = _mm512_permutex2var_epi32(q0, c.idx_x, q1);  // 32 grid indices of r, then of s
  const __m512i y = _mm512_permutex2var_epi32(q0, c.idx_y, q1);  // 8 sign words of r, then of s
  const __mmask64 high = _mm512_movepi8_mask(x);
  alignas(64) __mmask64 m[3][8];
  _mm512_store_si512(m[0], lookup256(c.b0, x, high));
  _mm512_store_si512(m[1], lookup256(c.b1, x, high));
  _mm512_store_si512(m[2], _mm512_permutex2var_epi8(c.sg[0], _mm512_multishift_epi64_epi8(c.shifts, y), c.sg[1]));
  const __m512i ls = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(y, 28), 1), c.one);  // 2s + 1 per dword
  const __m512i zero = _mm512_setzero_si512();
#pragma GCC unroll 2
  for (int rr = 0; rr < 2; ++rr) {
    __m512i acc[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[t] = zero;
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const int q = 4 * rr + k;
      const __mmask64 k0 = load_mask(&m[0][q]), k1 = load_mask(&m[1][q]), ks = load_mask(&m[2][q]);
      const __m512i g = _mm512_mask_mov_epi8(_mm512_mask_blend_epi8(k0, c.c8, c.c25), k1, c.c43);
      const __m512i lsw = _mm512_permutexvar_epi16(c.lsw[q], ls);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512i a = loadu512(act[t] + b * kQ8KBytes + kQ8KQsOffset + 64 * k);
        const __m512i sa = _mm512_mask_blend_epi8(ks, a, _mm512_load_si512(neg[t] + b * 256 + 64 * k));
        acc[t] = _mm512_dpwssd_epi32(acc[t], _mm512_maddubs_epi16(g, sa), lsw);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) (rr == 0 ? out_r : out_s)[t] = acc[t];
  }
}

template <int T, int P>
inline void iq2_pair_chunk(const Iq2Consts& c, const uint8_t* const rowp[kGroup], size_t ws, int64_t b0, int64_t nbc,
                           const uint8_t* const act[T], const uint8_t* const neg[T], Tree (*tr)[T],
                           uint16_t (*dh)[kGroup]) {
  for (int64_t i = 0; i < nbc; ++i) {
    const int64_t b = b0 + i;
    const uint8_t* br = rowp[2 * P] + b * kIq2xxsBlockBytes;
    const uint8_t* bs = rowp[2 * P + 1] + b * kIq2xxsBlockBytes;
    _mm_prefetch(ahead_addr(rowp[2 * P], ws, 2, b * kIq2xxsBlockBytes), _MM_HINT_T0);
    _mm_prefetch(ahead_addr(rowp[2 * P + 1], ws, 2, b * kIq2xxsBlockBytes), _MM_HINT_T0);
    __builtin_memcpy(&dh[i][2 * P], br, 2);
    __builtin_memcpy(&dh[i][2 * P + 1], bs, 2);
    __m512i vr[T], vs[T];
    iq2_pair<T>(c, br, bs, act, neg, b, vr, vs);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) tree_push<P>(tr[i][t], vr[t], vs[t]);
  }
}

template <int T>
void iq2_group(const Iq2Consts& c, const uint8_t* const rowp[kGroup], size_t ws, int64_t nb,
               const uint8_t* const act[T], const uint8_t* const neg[T], float* const y[T], int64_t rows) {
  __m512 sumf[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) sumf[t] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int64_t nbc = nb - b0 < kChunk ? nb - b0 : kChunk;
    Tree tr[kChunk][T];
    alignas(32) uint16_t dh[kChunk][kGroup];
    iq2_pair_chunk<T, 0>(c, rowp, ws, b0, nbc, act, neg, tr, dh);
    iq2_pair_chunk<T, 1>(c, rowp, ws, b0, nbc, act, neg, tr, dh);
    iq2_pair_chunk<T, 2>(c, rowp, ws, b0, nbc, act, neg, tr, dh);
    iq2_pair_chunk<T, 3>(c, rowp, ws, b0, nbc, act, neg, tr, dh);
    iq2_pair_chunk<T, 4>(c, rowp, ws, b0, nbc, act, neg, tr, dh);
    iq2_pair_chunk<T, 5>(c, rowp, ws, b0, nbc, act, neg, tr, dh);
    iq2_pair_chunk<T, 6>(c, rowp, ws, b0, nbc, act, neg, tr, dh);
    iq2_pair_chunk<T, 7>(c, rowp, ws, b0, nbc, act, neg, tr, dh);
    for (int64_t i = 0; i < nbc; ++i) {  // blocks in order: one running sum per (row, token)
      const int64_t b = b0 + i;
      const __m512 dx = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh[i])));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512i bsum =
            _mm512_add_epi32(red4_lo(tr[i][t].w07, tr[i][t].w815), red4_hi(tr[i][t].w07, tr[i][t].w815));
        float dy;
        __builtin_memcpy(&dy, act[t] + b * kQ8KBytes, 4);
        sumf[t] =
            _mm512_add_ps(sumf[t], _mm512_mul_ps(_mm512_mul_ps(dx, _mm512_set1_ps(dy)), _mm512_cvtepi32_ps(bsum)));
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) store_lanes(y[t], _mm512_mul_ps(_mm512_set1_ps(0.125f), sumf[t]), rows);
}

// True when some activation quant of the tokens is -128 (see the top of the file).
bool q8_K_has_min(const uint8_t* act, size_t as, int64_t tokens, int64_t nb) {
  const __m512i m = _mm512_set1_epi8(static_cast<char>(0x80));
  __mmask64 any = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = act + t * as + b * kQ8KBytes + kQ8KQsOffset;
      for (int i = 0; i < 4; ++i) any |= _mm512_cmpeq_epi8_mask(loadu512(q + 64 * i), m);
    }
  return any != 0;
}

// ---------------------------------------------------------------- Q2_K -----------------
struct Q2Consts {
  __m512i idx[4], m3, m15, mul;
};

inline void q2_consts(Q2Consts& c) {
  for (int s = 0; s < 4; ++s) {
    // 128-bit lane L of plane s holds sub-block 2s, 2s+1, 8+2s, 9+2s (L = 0..3): its table
    // (0, sc, 2 sc, 3 sc) must be the lane's first dword.
    const int j[4] = {2 * s, 2 * s + 1, 8 + 2 * s, 9 + 2 * s};
    c.idx[s] = _mm512_setr_epi32(j[0], j[0], j[0], j[0], j[1], j[1], j[1], j[1], j[2], j[2], j[2], j[2], j[3], j[3], j[3], j[3]);
  }
  c.m3 = _mm512_set1_epi8(3);
  c.m15 = _mm512_set1_epi32(15);
  c.mul = _mm512_set1_epi32(0x03020100);
}

// Activations in plane order: per block, plane s = quants 32s..32s+31 then 128+32s..128+32s+31.
void q2_planes(const uint8_t* act, size_t as, int64_t tokens, int64_t nb, uint8_t* out) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = act + t * as + b * kQ8KBytes + kQ8KQsOffset;
      uint8_t* o = out + (t * nb + b) * 256;
      for (int s = 0; s < 4; ++s) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 64 * s), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * s)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 64 * s + 32),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 128 + 32 * s)));
      }
    }
}

// One row's block: lanes 0..7 partial isum, lanes 8..15 partial summs, for each token.
template <int T>
inline void q2_row(const Q2Consts& c, const uint8_t* blk, const uint8_t* const planes[T], const uint8_t* const act[T],
                   int64_t b, __m512i out[T]) {
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
  const __m512i q = loadu512(blk + 16);
  const __m512i tbl = _mm512_mullo_epi32(_mm512_and_si512(_mm512_cvtepu8_epi32(sc), c.m15), c.mul);
  __m512i z[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) z[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s) {
    const __m512i codes = _mm512_and_si512(s == 0 ? q : _mm512_srli_epi16(q, 2 * s), c.m3);
    const __m512i wv = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(c.idx[s], tbl), codes);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) z[t] = _mm512_dpbusd_epi32(z[t], wv, loadu512(planes[t] + b * 256 + 64 * s));
  }
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15)));
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act[t] + b * kQ8KBytes + kQ8KQsOffset + 256));
    const __m256i mm = _mm256_madd_epi16(mins, bs);
    const __m256i f = _mm256_add_epi32(_mm512_castsi512_si256(z[t]), _mm512_extracti64x4_epi64(z[t], 1));
    out[t] = _mm512_inserti64x4(_mm512_castsi256_si512(f), mm, 1);
  }
}

template <int T, int P>
inline void q2_pair_chunk(const Q2Consts& c, const uint8_t* const rowp[kGroup], size_t ws, int64_t b0, int64_t nbc,
                          const uint8_t* const planes[T], const uint8_t* const act[T], Tree (*tr)[T],
                          uint32_t (*dd)[kGroup]) {
  constexpr int64_t kBB = static_cast<int64_t>(sizeof(BlockQ2_K));
  for (int64_t i = 0; i < nbc; ++i) {
    const int64_t b = b0 + i;
    const uint8_t* br = rowp[2 * P] + b * kBB;
    const uint8_t* bs = rowp[2 * P + 1] + b * kBB;
    _mm_prefetch(ahead_addr(rowp[2 * P], ws, 2, b * kBB), _MM_HINT_T0);
    _mm_prefetch(ahead_addr(rowp[2 * P + 1], ws, 2, b * kBB), _MM_HINT_T0);
    _mm_prefetch(ahead_addr(rowp[2 * P], ws, 2, b * kBB + 64), _MM_HINT_T0);
    _mm_prefetch(ahead_addr(rowp[2 * P + 1], ws, 2, b * kBB + 64), _MM_HINT_T0);
    __builtin_memcpy(&dd[i][2 * P], br + 80, 4);
    __builtin_memcpy(&dd[i][2 * P + 1], bs + 80, 4);
    __m512i vr[T], vs[T];
    q2_row<T>(c, br, planes, act, b, vr);
    q2_row<T>(c, bs, planes, act, b, vs);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) tree_push<P>(tr[i][t], vr[t], vs[t]);
  }
}

template <int T>
void q2_group(const Q2Consts& c, const uint8_t* const rowp[kGroup], size_t ws, int64_t nb,
              const uint8_t* const planes[T], const uint8_t* const act[T], float* const y[T], int64_t rows) {
  __m512 acc[T][8];
  for (int t = 0; t < T; ++t)
    for (int l = 0; l < 8; ++l) acc[t][l] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int64_t nbc = nb - b0 < kChunk ? nb - b0 : kChunk;
    Tree tr[kChunk][T];
    alignas(64) uint32_t dd[kChunk][kGroup];
    q2_pair_chunk<T, 0>(c, rowp, ws, b0, nbc, planes, act, tr, dd);
    q2_pair_chunk<T, 1>(c, rowp, ws, b0, nbc, planes, act, tr, dd);
    q2_pair_chunk<T, 2>(c, rowp, ws, b0, nbc, planes, act, tr, dd);
    q2_pair_chunk<T, 3>(c, rowp, ws, b0, nbc, planes, act, tr, dd);
    q2_pair_chunk<T, 4>(c, rowp, ws, b0, nbc, planes, act, tr, dd);
    q2_pair_chunk<T, 5>(c, rowp, ws, b0, nbc, planes, act, tr, dd);
    q2_pair_chunk<T, 6>(c, rowp, ws, b0, nbc, planes, act, tr, dd);
    q2_pair_chunk<T, 7>(c, rowp, ws, b0, nbc, planes, act, tr, dd);
    for (int64_t i = 0; i < nbc; ++i) {  // block b goes to lane b % 8 (kChunk is a multiple of 8)
      const int64_t b = b0 + i;
      const __m512i dv = _mm512_load_si512(dd[i]);
      const __m512 dx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dv));
      const __m512 dm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dv, 16)));
      for (int t = 0; t < T; ++t) {
        const __m512i isum = red4_lo(tr[i][t].w07, tr[i][t].w815), summs = red4_hi(tr[i][t].w07, tr[i][t].w815);
        float dy;
        __builtin_memcpy(&dy, act[t] + b * kQ8KBytes, 4);
        const __m512 yd = _mm512_set1_ps(dy);
        const __m512 v = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(yd, dx), _mm512_cvtepi32_ps(isum)),
                                       _mm512_mul_ps(_mm512_mul_ps(yd, dm), _mm512_cvtepi32_ps(summs)));
        acc[t][b & 7] = _mm512_add_ps(acc[t][b & 7], v);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m512 a0 = _mm512_add_ps(acc[t][0], acc[t][4]), a1 = _mm512_add_ps(acc[t][1], acc[t][5]);
    const __m512 a2 = _mm512_add_ps(acc[t][2], acc[t][6]), a3 = _mm512_add_ps(acc[t][3], acc[t][7]);
    store_lanes(y[t], _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)), rows);
  }
}

// ------------------------------------------------------------------ driver -------------
// Row pointers of group r0; rows past the end repeat the group's first row (computed, not stored).
inline void group_rows(const void* w, size_t ws, int64_t r0, int64_t rows, const uint8_t* rowp[kGroup]) {
  const auto* base = static_cast<const uint8_t*>(w);
  for (int r = 0; r < kGroup; ++r) rowp[r] = base + (r0 + r < rows ? r0 + r : r0) * ws;
}

}  // namespace

bool gemv_iq2_xxs_avx512vbmi(const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y,
                             int64_t ys, int64_t n) {
  const int64_t nb = n / kIq2xxsBlockElems;
  if (rows <= 0 || tokens <= 0 || nb <= 0) return true;
  const Iq2Tables& tb = iq2_tables();
  const auto* a = static_cast<const uint8_t*>(act);
  if (!tb.ok || q8_K_has_min(a, as, tokens, nb)) return false;
  // The negated quants (no -128, so exact), selected per weight by its sign bit.
  const size_t nbytes = static_cast<size_t>(tokens * nb) * 256;
  auto* ng = static_cast<uint8_t*>(aligned_alloc(64, nbytes));
  if (!ng) __builtin_trap();
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t b = 0; b < nb; ++b)
      for (int i = 0; i < 4; ++i)
        _mm512_store_si512(ng + (t * nb + b) * 256 + 64 * i,
                           _mm512_sub_epi8(_mm512_setzero_si512(), loadu512(a + t * as + b * kQ8KBytes + kQ8KQsOffset + 64 * i)));
  Iq2Consts c;
  iq2_consts(tb, c);
  for (int64_t r0 = 0; r0 < rows; r0 += kGroup) {
    const uint8_t* rowp[kGroup];
    group_rows(w, ws, r0, rows, rowp);
    int64_t t = 0;
    for (; t + 2 <= tokens; t += 2) {
      const uint8_t* at[2] = {a + t * as, a + (t + 1) * as};
      const uint8_t* nt[2] = {ng + t * nb * 256, ng + (t + 1) * nb * 256};
      float* yt[2] = {y + t * ys + r0, y + (t + 1) * ys + r0};
      iq2_group<2>(c, rowp, ws, nb, at, nt, yt, rows - r0);
    }
    if (t < tokens) {
      const uint8_t* at[1] = {a + t * as};
      const uint8_t* nt[1] = {ng + t * nb * 256};
      float* yt[1] = {y + t * ys + r0};
      iq2_group<1>(c, rowp, ws, nb, at, nt, yt, rows - r0);
    }
  }
  free(ng);
  _mm256_zeroupper();
  return true;
}

void gemv_q2_K_avx512vbmi(const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y,
                          int64_t ys, int64_t n) {
  const int64_t nb = n / kQK_K;
  if (rows <= 0 || tokens <= 0 || nb <= 0) return;
  const auto* a = static_cast<const uint8_t*>(act);
  const size_t pbytes = static_cast<size_t>(tokens * nb) * 256;
  void* pl = aligned_alloc(64, (pbytes + 63) / 64 * 64);
  if (!pl) __builtin_trap();
  q2_planes(a, as, tokens, nb, static_cast<uint8_t*>(pl));
  const auto* planes = static_cast<const uint8_t*>(pl);
  Q2Consts c;
  q2_consts(c);
  for (int64_t r0 = 0; r0 < rows; r0 += kGroup) {
    const uint8_t* rowp[kGroup];
    group_rows(w, ws, r0, rows, rowp);
    int64_t t = 0;
    for (; t + 2 <= tokens; t += 2) {
      const uint8_t* pt[2] = {planes + t * nb * 256, planes + (t + 1) * nb * 256};
      const uint8_t* at[2] = {a + t * as, a + (t + 1) * as};
      float* yt[2] = {y + t * ys + r0, y + (t + 1) * ys + r0};
      q2_group<2>(c, rowp, ws, nb, pt, at, yt, rows - r0);
    }
    if (t < tokens) {
      const uint8_t* pt[1] = {planes + t * nb * 256};
      const uint8_t* at[1] = {a + t * as};
      float* yt[1] = {y + t * ys + r0};
      q2_group<1>(c, rowp, ws, nb, pt, at, yt, rows - r0);
    }
  }
  free(pl);
  _mm256_zeroupper();
}

// Few tokens: the direct kernels; more: the blocked (panel) kernels, which decode once per batch.
void gemm_iq2_xxs_avx512vbmi(const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y,
                             int64_t ys, int64_t n) {
  if (tokens <= kGemvMaxTokensIq2xxs && gemv_iq2_xxs_avx512vbmi(w, ws, rows, act, as, tokens, y, ys, n)) return;
  gemm_iq2_xxs_avx512(w, ws, rows, act, as, tokens, y, ys, n);
}

void gemm_q2_K_avx512vbmi(const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y,
                          int64_t ys, int64_t n) {
  if (tokens <= kGemvMaxTokensQ2K) return gemv_q2_K_avx512vbmi(w, ws, rows, act, as, tokens, y, ys, n);
  gemm_q2_K_avx512(w, ws, rows, act, as, tokens, y, ys, n);
}

}  // namespace ds4::quant
