// The byte-permute IQ2_XXS decode of the routed-expert warp kernels (WarpIQ2_XXSNib,
// src/compute/cuda/gemv_warp.cuh) compiled for the host with the stand-in intrinsics of
// host_cuda/: for every grid point and every 7-bit sign code, at every position of a group,
// its integer sum equals the grid + sign-mask decode's (WarpIQ2_XXS, which tests/cuda's
// cuda_gemv_check holds to the CPU bit for bit on the GPU) and a sum formed here directly from
// quant::iq2xxs_grid, for activation bytes covering -128..127. Equal integer sums give equal
// float terms, so the kernels' results are the same bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "compute/cuda/gemv_warp.cuh"
#include "cuda/quant_pool.h"  // tests/cuda: PoolRng
#include "quant/iq2_tables.h"

namespace ds4::test {
namespace {

using namespace ds4::cuda::gemv_detail;

// One IQ2_XXS group's sum from the CPU's grid: sum_k sign_k * grid[idx_l][k] * a[8l + k], times
// the group scale 2 * ls + 1 (what WarpIQ2_XXS::sums returns as i0).
int reference_group(uint32_t aux0, uint32_t aux1, const int8_t* a) {
  int s = 0;
  for (int l = 0; l < 4; ++l) {
    const uint64_t g = quant::iq2xxs_grid[(aux0 >> (8 * l)) & 0xffu];
    const uint32_t s7 = (aux1 >> (7 * l)) & 127u;
    const uint32_t s8 = s7 | ((static_cast<uint32_t>(__builtin_popcount(s7)) & 1u) << 7);
    for (int k = 0; k < 8; ++k) {
      const int v = static_cast<int>((g >> (8 * k)) & 0xffu);
      s += ((s8 >> k) & 1u ? -v : v) * a[8 * l + k];
    }
  }
  return s * (2 * static_cast<int>(aux1 >> 28) + 1);
}

TEST(CudaFormatsHost, Iq2XxsBytePermuteDecodeEqualsGridDecode) {
  const uint2* grid = iq2_grid_address();  // builds both tables (and checks the grid's bytes)
  cudatest::PoolRng rng(20261206);
  alignas(16) int8_t act[32];
  int checked = 0;
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t sc = 0; sc < 128; ++sc) {
      const int pos = static_cast<int>((e + sc) % 4);  // the point under test sits at every position
      uint32_t aux0 = static_cast<uint32_t>(rng.next()), aux1 = static_cast<uint32_t>(rng.next());
      aux0 = (aux0 & ~(0xffu << (8 * pos))) | (e << (8 * pos));
      aux1 = (aux1 & ~(127u << (7 * pos))) | (sc << (7 * pos));
      for (int i = 0; i < 32; ++i) act[i] = static_cast<int8_t>(rng.next() & 0xffu);  // -128 included
      if (e % 64 == 0) std::memset(act, 0x80, sizeof act);  // every byte -128
      const WarpIQ2_XXS::Raw r{aux0, aux1, 0x3c00u};
      int g0 = 0, g1 = 0, n0 = 0, n1 = 0;
      WarpIQ2_XXS::sums(r, act, nullptr, 0, grid, g0, g1);
      WarpIQ2_XXSNib::sums(r, act, nullptr, 0, grid, n0, n1);
      const int want = reference_group(aux0, aux1, act);
      ASSERT_EQ(g0, want) << "grid decode, point " << e << " sign code " << sc;
      ASSERT_EQ(n0, want) << "byte-permute decode, point " << e << " sign code " << sc;
      ASSERT_EQ(n1, 0);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 256 * 128);
}

}  // namespace
}  // namespace ds4::test
