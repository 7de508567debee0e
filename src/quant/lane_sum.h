#pragma once
// The fixed summation order shared by the scalar and AVX2 integer dot products, so that both
// give the same float bit for bit: block b's float contribution is added into lane b % 8,
// and the eight lanes are folded in the order an AVX2 horizontal sum uses
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
// Functions are static: this header is compiled both with and without -mavx2 (see blocks.h).

namespace ds4::quant {

inline constexpr int kLanes = 8;

static inline float fold_lanes8(const float l[kLanes]) {
  const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
  return (a0 + a2) + (a1 + a3);
}

}  // namespace ds4::quant
