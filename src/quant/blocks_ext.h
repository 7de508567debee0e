#pragma once
// Byte layouts of the further ggml block formats that community DeepSeek V4 GGUFs use
// (llama.cpp's llama-quantize mixes; docs/FORMATS.md). Same rules as blocks.h: exact GGUF
// on-disk layout, no padding, half-precision scales kept as raw uint16_t bits.
#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"

namespace ds4::quant {

inline constexpr int kQK32 = 32;  // weights per block of the 32-element formats

// x_i = d * (q_i - 8); byte j: weight j (low nibble), weight 16+j (high nibble).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
// x_i = d * (q_i - 16), q_i 5 bits: nibbles as Q4_0, bit 4 of weight i in bit i of qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
// x_i = d * q_i + m, q_i 5 bits packed as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// Activation format of Q5_1's dot product: x_i = d * qs[i]; s = d * sum(qs).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[32];
};
// x_i = d * kvalues_iq4nl[q_i], nibbles as Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
// x_i = 2^(e-128) * kvalues_mxfp4[q_i] (E2M1 codes, E8M0 shared scale), nibbles as Q4_0.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};

// 16 sub-blocks of 16: x = d * (sc_j - 32) * (q - (hbit ? 0 : 4)), q 2 bits; 6-bit scales packed in 12 bytes.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32: x = d * sc_j * q - dmin * m_j, q 5 bits (Q4_K nibbles + one bit in qh).
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kK4ScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16: x = d * scales_j * (q - 32), q 6 bits (4 in ql, 2 in qh).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
// 8 sub-blocks of 32: x = d * (ls_j - 32) * kvalues_iq4nl[q], ls 6 bits (4 in scales_l, 2 in scales_h).
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
// qs[l]: 9-bit grid index | 7-bit sign code << 9; scales: two 4-bit scales per 32 weights.
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};
// qs[0..32): low 8 bits of 10-bit grid indices, qs[32..64): sign bytes; qh: 2 index bits each.
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};
// qs[0..64): grid indices (4 weights each); qs[64..96): per 32 weights a u32 of 4 sign codes + 4-bit scale.
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[3 * kQK_K / 8];
};
// 9-bit grid indices (8 in qs, 1 in qh), explicit sign bits, 4-bit scales per 32 weights.
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};
// 11-bit grid indices (8 in qs, 3 in qh), per 32 weights a 3-bit scale and the delta sign (qh bit 15).
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};
// 11-bit grid indices, per 8 weights a delta sign, per 16 a 3-bit scale; the f16 super-block
// scale is spread over the top nibbles of the four scale words.
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_1) == 36 && sizeof(BlockIQ4_NL) == 18 && sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ3_K) == 110 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ4_XS) == 136 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56);

// Q3_K: the 16 six-bit scales (before the -32 offset) from the 12 packed bytes.
static inline void q3k_scales(const uint8_t* s, int* out) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    out[j] = lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
  }
}

// IQ1_M: the f16 bits of the super-block scale, spread over the top nibbles of the 4 words.
static inline uint16_t iq1m_scale_bits(const uint8_t* scales) {
  uint16_t sc[4];
  __builtin_memcpy(sc, scales, 8);
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

// MXFP4: the E8M0 exponent byte as ggml's "half" scale 2^(e-128) (e = 0 and 1 are subnormal).
static inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

}  // namespace ds4::quant

namespace ds4::quant {

// Q6_K: the 6-bit code (0..63) of weight e (0..255).
static inline int q6k_code(const BlockQ6_K& b, int e) {
  const int half = e / 128, r = e % 128, k = r / 32, l = r % 32;
  const uint8_t ql = b.ql[64 * half + 32 * (k & 1) + l];
  const int lo = k < 2 ? (ql & 0xF) : (ql >> 4);
  return lo | (((b.qh[32 * half + l] >> (2 * k)) & 3) << 4);
}

}  // namespace ds4::quant
