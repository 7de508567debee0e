// Codec throughput: dequantize and dot product per weight format, scalar vs AVX2 kernels
// called directly, reported as GB/s of weight bytes read (F32 "dequantize" is a memcpy).
// Two working sets: "cache" (256 KiB of weights, stays in L2) and "dram" (128 MiB, streamed
// from memory as a GEMV does). Dots use one 4096-element activation row per weight row.
//   build-*/bench/quant_bench --benchmark_min_time=0.3
// Block contents are random bytes with finite normal f16 scales (timing does not depend on
// the values, except that denormal or NaN scales could slow the float paths, so none).
#include <benchmark/benchmark.h>

#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <vector>

#include "quant/iq2_xxs.h"
#include "quant/kernels.h"
#include "quant/quant.h"

namespace {

using ds4::GgmlType;
namespace q = ds4::quant;

constexpr int64_t kRow = 4096;  // elements per row

struct Weights {
  std::vector<uint8_t> bytes;
  int64_t rows;
  size_t row_bytes;
};

// Random blocks with sane scales; built once per (type, size) and kept for all benchmarks.
const Weights& weights(GgmlType t, size_t target_bytes) {
  static std::map<std::pair<GgmlType, size_t>, Weights> cache;
  auto it = cache.find({t, target_bytes});
  if (it != cache.end()) return it->second;
  const auto& tr = ds4::traits(t);
  Weights w;
  w.row_bytes = ds4::row_bytes(tr, kRow);
  w.rows = static_cast<int64_t>(target_bytes / w.row_bytes);
  w.bytes.resize(w.rows * w.row_bytes);
  std::mt19937_64 rng(7);
  for (size_t i = 0; i + 8 <= w.bytes.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(&w.bytes[i], &r, 8);
  }
  auto set_half = [&](size_t off) {
    const uint16_t h = static_cast<uint16_t>(0x2000 + rng() % 0x1000);  // ~1e-3 .. 1e-2
    std::memcpy(&w.bytes[off], &h, 2);
  };
  const size_t nblocks = w.bytes.size() / tr.block_bytes;
  for (size_t b = 0; b < nblocks; ++b) {
    const size_t o = b * tr.block_bytes;
    switch (t) {
      case GgmlType::Q8_0: set_half(o); break;
      case GgmlType::Q2_K: set_half(o + 80), set_half(o + 82); break;
      case GgmlType::Q4_K: set_half(o), set_half(o + 2); break;
      case GgmlType::F16: set_half(o); break;
      case GgmlType::IQ2_XXS: set_half(o); break;
      case GgmlType::BF16: {
        const uint16_t h = static_cast<uint16_t>(0x3C00 + rng() % 0x200);
        std::memcpy(&w.bytes[o], &h, 2);
        break;
      }
      case GgmlType::F32: {
        const float f = static_cast<float>(rng() % 2000) / 1000.f - 1.f;
        std::memcpy(&w.bytes[o], &f, 4);
        break;
      }
      default: break;
    }
  }
  return cache.emplace(std::make_pair(t, target_bytes), std::move(w)).first->second;
}

// One activation row in the weight type's vec_dot_type, from Gaussian floats.
std::vector<uint8_t> activation(GgmlType wt) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(kRow);
  for (auto& v : x) v = nd(rng);
  const GgmlType at = q::vec_dot_type(wt);
  std::vector<uint8_t> out(ds4::row_bytes(ds4::traits(at), kRow));
  q::quantize_activation_row(at, x.data(), out.data(), kRow);
  return out;
}

using DequantFn = void (*)(const void*, float*, int64_t);

void BM_Dequantize(benchmark::State& state, GgmlType t, size_t bytes, DequantFn fn) {
  const Weights& w = weights(t, bytes);
  std::vector<float> out(kRow);
  for (auto _ : state) {
    for (int64_t r = 0; r < w.rows; ++r) {
      fn(w.bytes.data() + r * w.row_bytes, out.data(), kRow);
      benchmark::DoNotOptimize(out.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.bytes.size()));
}

void copy_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

void BM_Dot(benchmark::State& state, GgmlType t, size_t bytes, q::DotFn fn) {
  const Weights& w = weights(t, bytes);
  const auto act = activation(t);
  for (auto _ : state) {
    float s = 0;
    for (int64_t r = 0; r < w.rows; ++r) s += fn(w.bytes.data() + r * w.row_bytes, act.data(), kRow);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.bytes.size()));
}

struct Format {
  const char* name;
  GgmlType type;
  DequantFn deq_scalar, deq_avx2;
  q::DotFn dot_scalar, dot_avx2;
};

int register_all() {
  std::vector<Format> formats = {
      {"q8_0", GgmlType::Q8_0, q::dequantize_row_q8_0, nullptr, q::vec_dot_q8_0_q8_0_scalar, nullptr},
      {"q2_K", GgmlType::Q2_K, q::dequantize_row_q2_K, nullptr, q::vec_dot_q2_K_q8_K_scalar, nullptr},
      {"q4_K", GgmlType::Q4_K, q::dequantize_row_q4_K, nullptr, q::vec_dot_q4_K_q8_K_scalar, nullptr},
      {"f16", GgmlType::F16, q::dequantize_row_f16, nullptr, q::vec_dot_f16_f32_scalar, nullptr},
      {"bf16", GgmlType::BF16, q::dequantize_row_bf16, nullptr, q::vec_dot_bf16_f32_scalar, nullptr},
      {"f32", GgmlType::F32, copy_f32, nullptr, q::vec_dot_f32_f32_scalar, nullptr},
  };
#if DS4_HAVE_AVX2_BUILD
  const DequantFn deq_avx2[] = {q::dequantize_row_q8_0_avx2, q::dequantize_row_q2_K_avx2, q::dequantize_row_q4_K_avx2,
                                q::dequantize_row_f16_avx2, q::dequantize_row_bf16_avx2, nullptr};
  const q::DotFn dot_avx2[] = {q::vec_dot_q8_0_q8_0_avx2, q::vec_dot_q2_K_q8_K_avx2, q::vec_dot_q4_K_q8_K_avx2,
                               q::vec_dot_f16_f32_avx2,   q::vec_dot_bf16_f32_avx2,  q::vec_dot_f32_f32_avx2};
  if (q::have_avx2())
    for (size_t k = 0; k < std::size(dot_avx2); ++k) formats[k].deq_avx2 = deq_avx2[k], formats[k].dot_avx2 = dot_avx2[k];
#endif
#if DS4_HAVE_IQ2_XXS
  formats.push_back({"iq2_xxs", GgmlType::IQ2_XXS, q::dequantize_row_iq2_xxs, nullptr, q::vec_dot_iq2_xxs_q8_K_scalar,
                     nullptr});
#if DS4_HAVE_IQ2_XXS_AVX2
  if (q::have_avx2()) formats.back().dot_avx2 = q::vec_dot_iq2_xxs_q8_K_avx2;
#endif
#endif
  const std::pair<const char*, size_t> sizes[] = {{"cache", 256u << 10}, {"dram", 128u << 20}};
  for (const auto& [sname, bytes] : sizes)
    for (const auto& f : formats) {
      const std::string suffix = std::string(f.name) + "/" + sname;
      benchmark::RegisterBenchmark(("dequantize_scalar/" + suffix).c_str(), BM_Dequantize, f.type, bytes, f.deq_scalar);
      if (f.deq_avx2)
        benchmark::RegisterBenchmark(("dequantize_avx2/" + suffix).c_str(), BM_Dequantize, f.type, bytes, f.deq_avx2);
      benchmark::RegisterBenchmark(("dot_scalar/" + suffix).c_str(), BM_Dot, f.type, bytes, f.dot_scalar);
      if (f.dot_avx2)
        benchmark::RegisterBenchmark(("dot_avx2/" + suffix).c_str(), BM_Dot, f.type, bytes, f.dot_avx2);
    }
  return 0;
}

const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
