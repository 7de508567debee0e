#pragma once
// Random but valid weight blocks for the CUDA check programs: random rows (normal values with a
// random scale per 32, so block scales vary) quantized by the CPU's own writers
// (quant::quantize_rows). Rows alternate between the reference writer and the importance-weighted
// one (random positive importance weights, shared by all rows as in ggml); the types whose
// writer requires importance weights (quant::needs_imatrix) always get them. Weight rows of any
// length are then assembled from randomly picked blocks of the pool.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "quant/quant.h"
#include "quant/types.h"

namespace ds4::cudatest {

struct PoolRng {  // splitmix64
  uint64_t s;
  explicit PoolRng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  float normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

struct BlockPool {
  GgmlType type = GgmlType::F32;
  size_t block_bytes = 0;
  int64_t n_blocks = 0;
  std::vector<uint8_t> bytes;
  const uint8_t* block(int64_t i) const { return bytes.data() + static_cast<size_t>(i) * block_bytes; }
};

inline void pool_parallel_for(int64_t n, const auto& fn) {
  const int nt = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int64_t> next{0};
  std::vector<std::thread> th;
  for (int i = 0; i < nt; ++i)
    th.emplace_back([&] {
      for (int64_t j; (j = next.fetch_add(1)) < n;) fn(j);
    });
  for (auto& t : th) t.join();
}

// `rows` rows of n_per_row weights of type t (a quantized type with a CPU writer).
inline BlockPool make_block_pool(GgmlType t, uint64_t seed, int64_t rows = 64, int64_t n_per_row = 4096) {
  const auto& tr = traits(t);
  BlockPool p;
  p.type = t;
  p.block_bytes = tr.block_bytes;
  p.n_blocks = rows * (n_per_row / tr.block_elems);
  const size_t rb = row_bytes(tr, static_cast<uint64_t>(n_per_row));
  p.bytes.resize(static_cast<size_t>(rows) * rb);
  PoolRng rng(seed);
  std::vector<float> imat(static_cast<size_t>(n_per_row));
  for (auto& v : imat) v = static_cast<float>(0.05 + 2.0 * rng.uniform());
  const uint64_t base = rng.next();
  pool_parallel_for(rows, [&](int64_t r) {
    PoolRng rr(base ^ (static_cast<uint64_t>(r) * 0x51ED27ull + 11));
    std::vector<float> x(static_cast<size_t>(n_per_row));
    float scale = 1.0f;
    for (int64_t i = 0; i < n_per_row; ++i) {
      if (i % 32 == 0) scale = 0.02f * std::exp(0.7f * rr.normal());
      x[i] = rr.normal() * scale;
    }
    const bool weighted = quant::needs_imatrix(t) || (r % 2 == 1);
    quant::quantize_rows(t, x.data(), p.bytes.data() + static_cast<size_t>(r) * rb, 1, n_per_row,
                         weighted ? imat.data() : nullptr);
  });
  return p;
}

// Fills one weight row of n elements with blocks picked at random from the pool.
inline void fill_row_from_pool(const BlockPool& p, uint8_t* row, int64_t n_blocks, PoolRng& rng) {
  for (int64_t b = 0; b < n_blocks; ++b)
    std::memcpy(row + static_cast<size_t>(b) * p.block_bytes, p.block(static_cast<int64_t>(rng.next() % p.n_blocks)),
                p.block_bytes);
}

}  // namespace ds4::cudatest
