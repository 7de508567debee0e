// GPU check: CUDA dequantization equals the CPU codecs bit for bit on random blocks.
// Q8_0, Q2_K, Q4_K: random bytes with finite random f16 scales. The further formats
// (gemv_formats_ext.cuh: Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4, Q3_K, Q5_K, Q6_K, IQ4_XS, IQ1_S, IQ1_M,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): blocks made by the CPU's own quantizers from random rows
// (tests/cuda/quant_pool.h), rows assembled from randomly picked blocks. Pass rule: every decoded
// value equal to quant::dequantize_row's bit for bit (memcmp).
// Exit 0 = pass, 1 = mismatch, 77 = no GPU (skipped). Prints one line per format.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compute/cuda/cuda_dequant.h"
#include "core/error.h"
#include "core/fp16.h"
#include "quant/quant.h"
#include "quant_pool.h"

using namespace ds4;

int main() {
  auto devs = cuda::list_devices();
  if (devs.empty()) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  for (const auto& d : devs)
    std::printf("device %d: %s sm_%d%d, %d SMs, %.1f GiB, L2 %zu KiB\n", d.index, d.name.c_str(), d.sm_major,
                d.sm_minor, d.multiprocessors, d.total_memory / 1073741824.0, d.l2_bytes / 1024);
  const uint64_t seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  std::printf("seed %llu\n", (unsigned long long)seed);
  int failures = 0, cases = 0;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const std::vector<GgmlType> types = {GgmlType::Q8_0,  GgmlType::Q2_K,  GgmlType::Q4_K,   GgmlType::Q4_0,
                                       GgmlType::Q5_0,  GgmlType::Q5_1,  GgmlType::IQ4_NL, GgmlType::MXFP4,  GgmlType::Q3_K,
                                       GgmlType::Q5_K,  GgmlType::Q6_K,  GgmlType::IQ4_XS, GgmlType::IQ1_S,
                                       GgmlType::IQ1_M, GgmlType::IQ2_XS, GgmlType::IQ2_S,  GgmlType::IQ3_XXS,
                                       GgmlType::IQ3_S};
  for (GgmlType t : types) {
    const auto& tr = traits(t);
    const int64_t rows = 64, n = 4096;
    const size_t rb = row_bytes(tr, n);
    std::vector<uint8_t> bytes(rows * rb);
    const bool legacy_random = t == GgmlType::Q8_0 || t == GgmlType::Q2_K || t == GgmlType::Q4_K;
    if (legacy_random) {
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      // Keep scales finite so the comparison is about arithmetic, not NaN payloads.
      const size_t nb = bytes.size() / tr.block_bytes;
      std::normal_distribution<float> scale(0.f, 0.05f);
      for (size_t b = 0; b < nb; ++b) {
        uint8_t* blk = bytes.data() + b * tr.block_bytes;
        auto put = [&](size_t off) {
          uint16_t h = fp32_to_fp16(scale(rng));
          std::memcpy(blk + off, &h, 2);
        };
        if (t == GgmlType::Q8_0) put(0);
        if (t == GgmlType::Q4_K) put(0), put(2);
        if (t == GgmlType::Q2_K) put(80), put(82);
      }
    } else {
      const cudatest::BlockPool pool = cudatest::make_block_pool(t, seed ^ (static_cast<uint64_t>(t) * 0x9E3779B1ull));
      cudatest::PoolRng pr(seed + static_cast<uint64_t>(t));
      for (int64_t r = 0; r < rows; ++r) cudatest::fill_row_from_pool(pool, bytes.data() + r * rb, n / tr.block_elems, pr);
    }
    std::vector<float> cpu(rows * n), gpu(rows * n);
    for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t, bytes.data() + r * rb, cpu.data() + r * n, n);
    std::string err;
    try {
      cuda::dequantize_rows_on_device(t, bytes.data(), gpu.data(), rows, n);
    } catch (const Error& e) {
      err = e.what();
    }
    int64_t bad = 0, nonzero = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (std::memcmp(&cpu[i], &gpu[i], 4) != 0) ++bad;
      nonzero += cpu[i] != 0.0f;
    }
    const bool ok = err.empty() && bad == 0 && nonzero > 0;
    ++cases;
    failures += !ok;
    std::printf("%-8s %lld values (%lld nonzero, %s), %lld differ from CPU (tol: 0, bit-exact) %s%s%s\n",
                std::string(tr.name).c_str(), (long long)cpu.size(), (long long)nonzero,
                legacy_random ? "random bytes" : "CPU-quantized blocks", (long long)(err.empty() ? bad : cpu.size()),
                err.empty() ? "" : "error: ", err.c_str(), ok ? " PASS" : " FAIL");
  }
  std::printf("%d passed, %d failed\n", cases - failures, failures);
  return failures ? 1 : 0;
}
