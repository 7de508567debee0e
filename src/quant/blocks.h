#pragma once
// Byte layouts of the quant blocks DwarfStar reads and writes (spec §4). They must match the
// GGUF on-disk layout exactly, so every struct is checked for size and has no padding.
// Scales stored as IEEE half are kept as raw uint16_t bits; convert with core/fp16.h.
#include <cstddef>
#include <cstdint>

namespace ds4::quant {

inline constexpr int kQK8_0 = 32;   // weights per Q8_0 block
inline constexpr int kQK_K = 256;   // weights per K-quant super-block (Q2_K, Q4_K, Q8_K)
inline constexpr int kK4ScaleBytes = 12;  // Q4_K: 8 six-bit scales + 8 six-bit mins

// x_i = d * qs[i]
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};

// Activation-only format: x_i = d * qs[i]; bsums[j] = sum of qs[16j .. 16j+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

// 16 sub-blocks of 16; scales[j] = scale (low nibble) | min (high nibble).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};

// 8 sub-blocks of 32 with 6-bit scale and min packed into 12 bytes (see spec §4).
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kK4ScaleBytes];
  uint8_t qs[kQK_K / 2];
};

static_assert(sizeof(BlockQ8_0) == 34 && alignof(BlockQ8_0) == 2);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ2_K) == 84 && offsetof(BlockQ2_K, d) == 80);
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, qs) == 16);

// Unpacks the 6-bit scale and min of Q4_K sub-block j (0..7) from the 12 packed bytes.
// static: this header is also compiled with -mavx2, and a shared inline copy could leak
// AVX2 instructions into the portable code through the linker's COMDAT folding.
static inline void q4k_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

}  // namespace ds4::quant
