#pragma once
// Constant tables of the IQ2_XXS format (spec §4): the 256-point E8-style grid, the
// even-parity sign table and the bit masks that pick one sign bit per weight.
#include <cstdint>
#include <vector>

namespace ds4::quant {

extern const uint64_t iq2xxs_grid[256];
extern const uint8_t ksigns_iq2xs[128];
extern const uint8_t kmask_iq2xs[8];

}  // namespace ds4::quant

// Search structures the quantizer needs, derived from iq2xxs_grid exactly as ggml's
// iq2xs_init_impl(GGML_TYPE_IQ2_XXS) derives them, so that the quantizer picks the same
// grid points as ggml:
//  * point k of the grid as 8 odd "levels" 2l+1 in {1,3,5} (ggml quantizes in those units);
//  * for every 8-vector of levels 0..2 (index u = sum l_j << 2j) either its grid index, or,
//    when it is not a grid point, its list of nearest grid points: every grid point whose
//    squared distance is among the 2 smallest distinct distances, sorted by (distance, index).
namespace ds4::quant {

struct Iq2xxsSearchTables {
  static constexpr int kMapSize = 43692;  // largest index 0b1010...10 = 43690, plus slack as ggml
  uint64_t levels[256];                    // byte j of point k = 2*l_j + 1
  float level_values[256][8];              // the same odd levels as floats (saves conversions)
  // map[u] >= 0: grid index of u. map[u] < 0: u is off the grid; its list starts at
  // neighbours[-map[u] - 1] with the count, followed by that many grid indices.
  std::vector<int32_t> map;
  std::vector<uint16_t> neighbours;
};

// Built on first use (thread-safe), then immutable.
const Iq2xxsSearchTables& iq2xxs_search_tables();

}  // namespace ds4::quant
