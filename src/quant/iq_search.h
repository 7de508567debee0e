#pragma once
// Search structures of the codebook quantizers (IQ1_S/IQ1_M, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S),
// derived from the decoders' grids (iq_grids.h) the way ggml's iq2xs_init_impl /
// iq3xs_init_impl derive theirs from their index tables, so that the writers pick the same
// grid points as ggml:
//  * point k of a grid as `dims` levels l_j (its coordinates' ranks: 0..2 for the 8-wide
//    2-bit grids of IQ1/IQ2, 0..7 for the 4-wide 3-bit grids of IQ3);
//  * for every vector of levels (key u = sum l_j << (bits*j)) either its grid index, or, when
//    it is not a grid point, its list of nearest grid points: every point whose squared
//    distance in odd units 2l+1 is among the `nwant` smallest distinct distances, sorted by
//    (distance, index) as ggml's comparator sorts them.
// (The tables were checked once against ggml's kgrid_* index tables; the writers' byte-exact
// tests against ggml in tests/unit/quant_ext check them in use.)
#include <climits>
#include <cstdint>
#include <vector>

namespace ds4::quant {

struct GridSearch {
  int dims = 0;  // coordinates per grid point: 8 or 4
  int bits = 0;  // bits per level in a key: 2 or 3
  int size = 0;  // grid points
  std::vector<uint8_t> level;  // size * dims: level of coordinate j of point k
  std::vector<float> odd;      // size * dims: 2 * level + 1 as float (ggml's search units)
  // map[u] >= 0: grid index of key u. map[u] < 0: off the grid; its list starts at
  // neighbours[-map[u] - 1] with the count, followed by that many grid indices.
  // kUnreachable: a key with a level the writers never produce (no list).
  static constexpr int32_t kUnreachable = INT32_MIN;
  std::vector<int32_t> map;
  std::vector<uint16_t> neighbours;

  // Key of `dims` levels.
  uint32_t key(const int8_t* l) const {
    uint32_t u = 0;
    for (int j = 0; j < dims; ++j) u |= static_cast<uint32_t>(l[j]) << (bits * j);
    return u;
  }
  const uint16_t* neighbours_of(uint32_t u) const { return neighbours.data() + (-map[u] - 1); }
  // Among the neighbours of off-grid key u, the point with the smallest weighted error
  // sum_i w_i (scale * (2 l_i + 1) - x_i)^2 (the first on ties), in ggml's float order; writes
  // its levels to L and returns its index, or -1 when no error is below FLT_MAX (non-finite
  // intermediates, where ggml asserts; also for a key that is on the grid or unreachable).
  int best_neighbour(uint32_t u, const float* xval, const float* w, float scale, int8_t* L) const;
  // Writes the levels of point k to l.
  void levels_of(int k, int8_t* l) const {
    for (int j = 0; j < dims; ++j) l[j] = static_cast<int8_t>(level[k * dims + j]);
  }
};

// Built on first use (thread-safe), then immutable.
const GridSearch& iq2xs_search();   // 512 points, 2 distances
const GridSearch& iq2s_search();    // 1024 points, 1 distance
const GridSearch& iq1s_search();    // 2048 points (IQ1_S and IQ1_M), 3 distances
const GridSearch& iq3xxs_search();  // 256 points, 2 distances
const GridSearch& iq3s_search();    // 512 points, 3 distances

}  // namespace ds4::quant
