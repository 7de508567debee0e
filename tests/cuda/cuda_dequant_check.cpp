// GPU check: CUDA dequantization equals the CPU codecs bit for bit on random blocks.
// Exit 0 = pass, 1 = mismatch, 77 = no GPU (skipped). Prints one line per format.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "compute/cuda/cuda_dequant.h"
#include "core/fp16.h"
#include "quant/quant.h"

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
  int failures = 0;
  std::mt19937 rng(1234);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K}) {
    const auto& tr = traits(t);
    const int64_t rows = 64, n = 4096;
    std::vector<uint8_t> bytes(rows * row_bytes(tr, n));
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
    std::vector<float> cpu(rows * n), gpu(rows * n);
    for (int64_t r = 0; r < rows; ++r)
      quant::dequantize_row(t, bytes.data() + r * row_bytes(tr, n), cpu.data() + r * n, n);
    cuda::dequantize_rows_on_device(t, bytes.data(), gpu.data(), rows, n);
    int64_t bad = 0;
    for (size_t i = 0; i < cpu.size(); ++i)
      if (std::memcmp(&cpu[i], &gpu[i], 4) != 0) ++bad;
    std::printf("%-8s %lld values, %lld differ from CPU\n", std::string(tr.name).c_str(), (long long)cpu.size(),
                (long long)bad);
    failures += bad != 0;
  }
  std::printf("%d passed, %d failed\n", 3 - failures, failures);
  return failures ? 1 : 0;
}
