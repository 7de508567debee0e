// Builds the codebook search tables of iq_search.h from the decoders' grids.
#include "quant/iq_search.h"

#include <algorithm>
#include <cfloat>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "quant/iq_grids.h"

namespace ds4::quant {
namespace {

// Rank of a decoded grid byte among the format's magnitudes (its level).
int iq2_level(uint8_t b) { return b == 0x08 ? 0 : b == 0x19 ? 1 : b == 0x2b ? 2 : -1; }
int iq1_level(uint8_t b) { return b == 0xff ? 0 : b == 0x00 ? 1 : b == 0x01 ? 2 : -1; }
int iq3xxs_level(uint8_t b) {
  static constexpr uint8_t kMag[8] = {4, 12, 20, 28, 36, 44, 52, 62};
  for (int l = 0; l < 8; ++l)
    if (kMag[l] == b) return l;
  return -1;
}
int iq3s_level(uint8_t b) { return (b & 1) && b <= 15 ? (b - 1) / 2 : -1; }

template <class Entry, class Level>
void build(GridSearch& g, const Entry* grid, int size, int dims, int bits, int nlevels, int nwant, Level level_of) {
  g.dims = dims;
  g.bits = bits;
  g.size = size;
  g.level.resize(static_cast<size_t>(size) * dims);
  g.odd.resize(g.level.size());
  g.map.assign(size_t{1} << (bits * dims), -1);
  for (int k = 0; k < size; ++k) {
    int8_t l[8];
    for (int j = 0; j < dims; ++j) {
      const int v = level_of(static_cast<uint8_t>(static_cast<uint64_t>(grid[k]) >> (8 * j)));
      if (v < 0) fail("codebook search tables: grid point {} has an unexpected byte", k);
      l[j] = static_cast<int8_t>(v);
      g.level[k * dims + j] = static_cast<uint8_t>(v);
      g.odd[k * dims + j] = static_cast<float>(2 * v + 1);
    }
    g.map[g.key(l)] = k;
  }
  // Off-grid keys in increasing order, as ggml enumerates them. Keys holding a level the
  // writers never produce (a "3" digit in the 2-bit grids) get no list: ggml builds one that
  // is never read.
  std::vector<std::pair<int, int>> dist(size);
  for (uint32_t u = 0; u < g.map.size(); ++u) {
    if (g.map[u] >= 0) continue;
    int pos[8];
    bool reachable = true;
    for (int j = 0; j < dims; ++j) {
      const int l = static_cast<int>((u >> (bits * j)) & ((1u << bits) - 1));
      reachable = reachable && l < nlevels;
      pos[j] = 2 * l + 1;
    }
    if (!reachable) {
      g.map[u] = GridSearch::kUnreachable;
      continue;
    }
    for (int k = 0; k < size; ++k) {
      int d2 = 0;
      for (int j = 0; j < dims; ++j) {
        const int diff = 2 * g.level[k * dims + j] + 1 - pos[j];
        d2 += diff * diff;
      }
      dist[k] = {d2, k};
    }
    std::sort(dist.begin(), dist.end());  // total order (distance, index), as ggml's comparator
    const size_t start = g.neighbours.size();
    g.map[u] = -static_cast<int32_t>(start) - 1;
    g.neighbours.push_back(0);
    int have = 1, d2 = dist[0].first;
    for (const auto& [d, k] : dist) {
      if (d > d2) {
        if (have == nwant) break;
        d2 = d;
        ++have;
      }
      g.neighbours.push_back(static_cast<uint16_t>(k));
    }
    g.neighbours[start] = static_cast<uint16_t>(g.neighbours.size() - start - 1);
  }
}

template <class Build>
const GridSearch& once(GridSearch& g, std::once_flag& flag, Build b) {
  std::call_once(flag, [&] { b(g); });
  return g;
}

}  // namespace

int GridSearch::best_neighbour(uint32_t u, const float* xval, const float* w, float scale, int8_t* L) const {
  if (u >= map.size() || map[u] >= 0 || map[u] == kUnreachable) return -1;
  const uint16_t* list = neighbours_of(u);
  float best_d2 = FLT_MAX;
  int best = -1;
  for (int j = 1; j <= list[0]; ++j) {
    const float* q = &odd[static_cast<size_t>(list[j]) * dims];
    float d2 = 0;
    for (int i = 0; i < dims; ++i) {
      const float diff = scale * q[i] - xval[i];
      d2 += w[i] * diff * diff;
    }
    if (d2 < best_d2) {
      best_d2 = d2;
      best = list[j];
    }
  }
  if (best >= 0) levels_of(best, L);
  return best;
}

const GridSearch& iq2xs_search() {
  static GridSearch g;
  static std::once_flag f;
  return once(g, f, [](GridSearch& t) { build(t, iq2xs_grid, 512, 8, 2, 3, 2, iq2_level); });
}

const GridSearch& iq2s_search() {
  static GridSearch g;
  static std::once_flag f;
  return once(g, f, [](GridSearch& t) { build(t, iq2s_grid, 1024, 8, 2, 3, 1, iq2_level); });
}

const GridSearch& iq1s_search() {
  static GridSearch g;
  static std::once_flag f;
  return once(g, f, [](GridSearch& t) { build(t, iq1s_grid, 2048, 8, 2, 3, 3, iq1_level); });
}

const GridSearch& iq3xxs_search() {
  static GridSearch g;
  static std::once_flag f;
  return once(g, f, [](GridSearch& t) { build(t, iq3xxs_grid, 256, 4, 3, 8, 2, iq3xxs_level); });
}

const GridSearch& iq3s_search() {
  static GridSearch g;
  static std::once_flag f;
  return once(g, f, [](GridSearch& t) { build(t, iq3s_grid, 512, 4, 3, 8, 3, iq3s_level); });
}

}  // namespace ds4::quant
