// GPU check for the float-weight GEMMs (src/compute/cuda/gemm_float.cu, gemm_float_tc.cu):
//  * v2 (k_fgemm2, DS4_CUDA_FGEMM_V2: 8 x 8 chains per lane) against v1 (k_fgemm, whose values
//    equal the CPU backend's bit for bit: cuda_gemv_check and the parity tests): every output
//    bit-identical (pass rule), and both timed;
//  * the tensor-core path (two TF32 products, off in the backend: docs/ARCHITECTURE.md) against
//    a double-precision reference, its error and time reported beside the CPU order's.
//
// Shapes: the prefill's float products on the Flash file: compressor kv/gate 4096 -> 1024 and
// 4096 -> 512, indexer compressor 4096 -> 256, indexer weights 4096 -> 64, indexer q_b
// 1024 -> 8192, router 4096 -> 256, hyper-connection mix 16384 -> 24; rows {64, 100, 512, 2048};
// F16 weights, and BF16 for two shapes. Weights: random normals (rounded to the 16-bit type);
// activations: random normals times a per-32 scale in [2^-6, 2^6]; fresh seed per run (printed).
// Outputs are poisoned (NaN) before each product.
// Error of an output: |y - exact| / sum_k |w_k x_k| (exact in double; for batches over 64 rows,
// 64 rows spread over the batch are checked, every output must be finite).
// Pass rule per case: v2 equal to v1 in every output, no output non-finite. The tensor-core
// error is reported only (on the H100, 2026-12-07: 3-6.5e-6 against the CPU order's 3.4-10e-8).
// Time: CUDA events, median of 20 runs after 3 warm-ups; TFLOP/s = 2 * n_in * n_out * rows / t.
//
// Usage: cuda_fgemm_tc_check [--quick] (rows {64, 100} only). Exit 0 = pass, 1 = failure, 77 = no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "check_timing.h"
#include "compute/cuda/gemm_float.h"
#include "compute/cuda/gemv.h"
#include "core/fp16.h"
#include "quant/types.h"

using namespace ds4;
using namespace ds4::cuda::gemv_detail;
using ds4::cuda_check::ck;

namespace {

double time_ms(const std::function<void()>& fn, cudaStream_t s) { return cuda_check::time_ms(fn, s, 20); }

struct Shape {
  const char* name;
  int64_t n_in, n_out;
  GgmlType type;
};

struct Err {
  double worst = 0;
  int64_t nonfinite = 0;
  std::vector<float> y;  // every output
};

Err errors(const std::vector<float>& y, const std::vector<double>& exact, const std::vector<double>& mag) {
  Err e;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      ++e.nonfinite;
      continue;
    }
    e.worst = std::max(e.worst, std::fabs(static_cast<double>(y[i]) - exact[i]) / std::max(mag[i], 1e-300));
  }
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("no CUDA device\n");
    return 77;
  }
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> sc(-6, 6);
  const Shape shapes[] = {
      {"compressor 4096->1024", 4096, 1024, GgmlType::F16}, {"compressor 4096->512", 4096, 512, GgmlType::F16},
      {"idx compressor 4096->256", 4096, 256, GgmlType::F16}, {"idx weights 4096->64", 4096, 64, GgmlType::F16},
      {"idx q_b 1024->8192", 1024, 8192, GgmlType::F16},     {"router 4096->256", 4096, 256, GgmlType::F16},
      {"hc mix 16384->24", 16384, 24, GgmlType::F16},       {"bf16 4096->1024", 4096, 1024, GgmlType::BF16},
      {"bf16 16384->24", 16384, 24, GgmlType::BF16},
  };
  std::vector<int64_t> row_counts = {64, 100, 512, 2048};
  if (quick) row_counts = {64, 100};
  cudaStream_t s;
  ck(cudaStreamCreate(&s), "stream");
  int failures = 0, cases = 0;
  std::printf("%-26s %5s | %10s %10s | %9s %9s %9s | %8s %8s %8s | %s\n", "shape", "rows", "err cpu-ord", "err tc",
              "ms v1", "ms v2", "ms tc", "TF/s v1", "TF/s v2", "TF/s tc", "result");
  for (const Shape& sh : shapes) {
    const size_t row_bytes = static_cast<size_t>(sh.n_in) * 2;
    std::vector<uint16_t> wq(static_cast<size_t>(sh.n_in * sh.n_out));
    std::vector<float> wf(wq.size());
    for (size_t i = 0; i < wq.size(); ++i) {
      const float v = nd(rng) * 0.05f;
      wq[i] = sh.type == GgmlType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
      wf[i] = sh.type == GgmlType::F16 ? fp16_to_fp32(wq[i]) : bf16_to_fp32(wq[i]);
    }
    uint8_t* dw = nullptr;
    ck(cudaMalloc(&dw, wq.size() * 2), "malloc w");
    ck(cudaMemcpy(dw, wq.data(), wq.size() * 2, cudaMemcpyHostToDevice), "copy w");
    const ds4::cuda::DevMatrix w{sh.type, dw, sh.n_in, sh.n_out, row_bytes};
    for (int64_t rows : row_counts) {
      std::vector<float> x(static_cast<size_t>(rows * sh.n_in));
      for (size_t i = 0; i < x.size(); i += 32) {
        const float scale = std::ldexp(1.0f, sc(rng));
        for (size_t j = i; j < i + 32; ++j) x[j] = nd(rng) * scale;
      }
      // The exact sums of every row up to 64 rows, else of 64 rows spread over the batch (the
      // first and last included): a double reference of every row would take minutes here.
      std::vector<int64_t> checked;
      for (int64_t i = 0; i < std::min<int64_t>(rows, 64); ++i)
        checked.push_back(rows <= 64 ? i : i * (rows - 1) / 63);
      std::vector<double> exact(checked.size() * static_cast<size_t>(sh.n_out)), mag(exact.size());
      for (size_t ci = 0; ci < checked.size(); ++ci)
        for (int64_t o = 0; o < sh.n_out; ++o) {
          const int64_t r = checked[ci];
          double sum = 0, m = 0;
          const float* xr = &x[static_cast<size_t>(r * sh.n_in)];
          const float* wr = &wf[static_cast<size_t>(o * sh.n_in)];
          for (int64_t k = 0; k < sh.n_in; ++k) {
            const double p = static_cast<double>(wr[k]) * xr[k];
            sum += p;
            m += std::fabs(p);
          }
          exact[ci * static_cast<size_t>(sh.n_out) + static_cast<size_t>(o)] = sum;
          mag[ci * static_cast<size_t>(sh.n_out) + static_cast<size_t>(o)] = m;
        }
      float *dx = nullptr, *dy = nullptr;
      ck(cudaMalloc(&dx, x.size() * 4), "malloc x");
      const size_t y_len = static_cast<size_t>(rows * sh.n_out);
      ck(cudaMalloc(&dy, y_len * 4), "malloc y");
      ck(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "copy x");
      const bool supported = fgemm_tc_supports(w, dx, sh.n_in, rows, 0);
      auto run_cpu_order = [&] { fgemm(w, dx, sh.n_in, rows, dy, sh.n_out, s, 1); };
      auto run_v2 = [&] { fgemm(w, dx, sh.n_in, rows, dy, sh.n_out, s, 2); };
      auto run_tc = [&] { fgemm_tc(w, dx, sh.n_in, rows, dy, sh.n_out, s); };
      auto result = [&](const std::function<void()>& fn) {
        ck(cudaMemsetAsync(dy, 0xff, y_len * 4, s), "poison");
        fn();
        ck(cudaStreamSynchronize(s), "product");
        std::vector<float> y(y_len), yc;
        ck(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), "copy y");
        int64_t bad = 0;  // every output, checked rows or not, must be finite (no poison left)
        for (float v : y) bad += !std::isfinite(v);
        for (int64_t r : checked)
          yc.insert(yc.end(), y.begin() + r * sh.n_out, y.begin() + (r + 1) * sh.n_out);
        Err e = errors(yc, exact, mag);
        e.nonfinite = bad;
        e.y = std::move(y);
        return e;
      };
      const Err ec = result(run_cpu_order);
      const Err e2 = result(run_v2);
      const Err et = supported ? result(run_tc) : Err{};
      int64_t unequal = 0;
      for (size_t i = 0; i < y_len; ++i) unequal += std::memcmp(&ec.y[i], &e2.y[i], 4) != 0;
      const double tc_ms = supported ? time_ms(run_tc, s) : 0, co_ms = time_ms(run_cpu_order, s);
      const double v2_ms = time_ms(run_v2, s);
      const double flop = 2.0 * static_cast<double>(sh.n_in) * sh.n_out * rows;
      const bool ok = ec.nonfinite == 0 && e2.nonfinite == 0 && unequal == 0;
      ++cases;
      if (!ok) ++failures;
      std::printf("%-26s %5lld | %10.3g %10.3g | %9.4f %9.4f %9.4f | %8.2f %8.2f %8.2f | v2 unequal %lld %s%s\n",
                  sh.name, static_cast<long long>(rows), ec.worst, et.worst, co_ms, v2_ms, tc_ms,
                  flop / co_ms * 1e-9, flop / v2_ms * 1e-9, supported ? flop / tc_ms * 1e-9 : 0.0,
                  static_cast<long long>(unequal), ok ? "ok" : "FAIL",
                  ec.nonfinite || e2.nonfinite ? " (non-finite outputs)" : "");
      cudaFree(dx);
      cudaFree(dy);
    }
    cudaFree(dw);
  }
  std::printf("%d cases, %d failed\n", cases, failures);
  return failures ? 1 : 0;
}
