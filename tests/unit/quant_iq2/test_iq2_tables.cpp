// The constant IQ2_XXS tables and the quantizer's derived search tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <set>
#include <vector>

#include "quant/iq2_tables.h"

namespace ds4::quant {
namespace {

// kgrid_2bit_256 from ggml-quants.c (iq2xs_init_impl), reproduced as data: grid point k as
// 2-bit levels, coordinate j in bits 2j..2j+1. An independent encoding of the same grid.
constexpr uint16_t kGgmlKgrid2bit256[256] = {
    0,     2,     5,     8,     10,    17,    20,    32,    34,    40,    42,    65,    68,    80,    88,    97,
    100,   128,   130,   138,   162,   257,   260,   272,   277,   320,   388,   408,   512,   514,   546,   642,
    1025,  1028,  1040,  1057,  1060,  1088,  1090,  1096,  1120,  1153,  1156,  1168,  1188,  1280,  1282,  1288,
    1312,  1350,  1385,  1408,  1425,  1545,  1552,  1600,  1668,  1700,  2048,  2053,  2056,  2068,  2088,  2113,
    2116,  2128,  2130,  2184,  2308,  2368,  2562,  2580,  4097,  4100,  4112,  4129,  4160,  4192,  4228,  4240,
    4245,  4352,  4360,  4384,  4432,  4442,  4480,  4644,  4677,  5120,  5128,  5152,  5157,  5193,  5248,  5400,
    5474,  5632,  5654,  6145,  6148,  6160,  6208,  6273,  6400,  6405,  6560,  6737,  8192,  8194,  8202,  8260,
    8289,  8320,  8322,  8489,  8520,  8704,  8706,  9217,  9220,  9232,  9280,  9302,  9472,  9537,  9572,  9872,
    10248, 10272, 10388, 10820, 16385, 16388, 16400, 16408, 16417, 16420, 16448, 16456, 16470, 16480, 16513, 16516,
    16528, 16640, 16672, 16737, 16768, 16773, 16897, 16912, 16968, 16982, 17000, 17408, 17416, 17440, 17536, 17561,
    17682, 17700, 17920, 18433, 18436, 18448, 18496, 18501, 18688, 18776, 18785, 18818, 19013, 19088, 20480, 20488,
    20497, 20505, 20512, 20608, 20616, 20740, 20802, 20900, 21137, 21648, 21650, 21770, 22017, 22100, 22528, 22545,
    22553, 22628, 22848, 23048, 24580, 24592, 24640, 24680, 24832, 24917, 25112, 25184, 25600, 25605, 25872, 25874,
    25988, 26690, 32768, 32770, 32778, 32833, 32898, 33028, 33048, 33088, 33297, 33793, 33796, 33808, 33813, 33856,
    33888, 34048, 34118, 34196, 34313, 34368, 34400, 34818, 35076, 35345, 36868, 36880, 36900, 36928, 37025, 37142,
    37248, 37445, 37888, 37922, 37956, 38225, 39041, 39200, 40962, 41040, 41093, 41225, 41472, 42008, 43088, 43268,
};

int level_of(uint8_t magnitude) { return magnitude == 0x08 ? 0 : magnitude == 0x19 ? 1 : magnitude == 0x2b ? 2 : -1; }

TEST(Iq2Tables, GridMagnitudesAndOrderMatchGgmlLevelEncoding) {
  std::set<uint64_t> distinct;
  for (int k = 0; k < 256; ++k) {
    uint16_t code = 0;
    for (int j = 0; j < 8; ++j) {
      const int l = level_of(static_cast<uint8_t>(iq2xxs_grid[k] >> (8 * j)));
      ASSERT_GE(l, 0) << "grid entry " << k << " byte " << j;
      code = static_cast<uint16_t>(code | (l << (2 * j)));
    }
    EXPECT_EQ(code, kGgmlKgrid2bit256[k]) << "grid entry " << k;
    distinct.insert(iq2xxs_grid[k]);
  }
  EXPECT_EQ(distinct.size(), 256u);
}

TEST(Iq2Tables, SignTableHasEvenParityAsSpecified) {
  // Spec §4: ksigns[i] = i | ((popcount(i) & 1) << 7).
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(ksigns_iq2xs[i], i | ((std::popcount(static_cast<unsigned>(i)) & 1) << 7)) << i;
    EXPECT_EQ(std::popcount(static_cast<unsigned>(ksigns_iq2xs[i])) % 2, 0) << i;
  }
  for (int j = 0; j < 8; ++j) EXPECT_EQ(kmask_iq2xs[j], 1 << j);
}

TEST(Iq2Tables, SearchTablesMapGridPointsAndListNearestNeighbours) {
  const Iq2xxsSearchTables& t = iq2xxs_search_tables();
  for (int k = 0; k < 256; ++k) {
    for (int j = 0; j < 8; ++j) EXPECT_EQ(2 * level_of(static_cast<uint8_t>(iq2xxs_grid[k] >> (8 * j))) + 1,
                                          static_cast<int>((t.levels[k] >> (8 * j)) & 0xff));
    EXPECT_EQ(t.map[kGgmlKgrid2bit256[k]], k);
  }
  // Every reachable off-grid vector (levels 0..2) has a list: all grid points at the two
  // smallest distinct squared distances, ordered by (distance, index).
  int off_grid = 0;
  for (int u = 0; u < Iq2xxsSearchTables::kMapSize; ++u) {
    bool reachable = true;
    for (int j = 0; j < 8; ++j) reachable = reachable && ((u >> (2 * j)) & 3) < 3;
    if (!reachable || t.map[u] >= 0) continue;
    ++off_grid;
    ASSERT_LT(t.map[u], 0);
    const uint16_t* list = t.neighbours.data() + (-t.map[u] - 1);
    std::vector<std::pair<int, int>> all;
    for (int k = 0; k < 256; ++k) {
      int d2 = 0;
      for (int j = 0; j < 8; ++j) {
        const int diff = 2 * (((u >> (2 * j)) & 3) - ((kGgmlKgrid2bit256[k] >> (2 * j)) & 3));
        d2 += diff * diff;
      }
      all.push_back({d2, k});
    }
    std::sort(all.begin(), all.end());
    std::set<int> distances;
    std::vector<int> expect;
    for (const auto& [d2, k] : all) {
      distances.insert(d2);
      if (distances.size() > 2) break;
      expect.push_back(k);
    }
    ASSERT_EQ(list[0], expect.size()) << "u=" << u;
    for (size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(list[1 + i], expect[i]) << "u=" << u << " i=" << i;
  }
  EXPECT_EQ(off_grid, 6561 - 256);
}

}  // namespace
}  // namespace ds4::quant
