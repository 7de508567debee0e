// GPU check for the tensor-core Q8_0 matmul (src/compute/cuda/gemm_mma.cu) against the CPU
// backend (compute::make_cpu_backend: matmul / matmul_grouped on the same weight bytes and f32
// activations), with the existing CUDA path (gemv.cu, CUDA cores) beside it for time and for
// its own equality with the CPU.
//
// Cases: rows {32, 100, 512, 2048} x the Flash Q8_0 shapes 4096->1024, 1024->32768,
// 4096->2048 (shared expert) and the grouped output projection (8 groups of 4096 -> 1024),
// plus one with weights at an address of 2 mod 4 and a padded row stride; then the routed experts
// (mma_moe: IQ2_XXS gate/up, Q2_K down, 4096 x 2048, 64 experts, top 6, limit 0 and 7, rows
// {8, 40, 200, 512}, then one bad expert id (its token's row must be NaN, the rest unchanged) against the CPU backend's
// moe_experts. Weights come from the
// CPU's Q8_0 quantizer on random rows; activations are random normals with per-32 scale
// variation, never zero; fresh seeds per run (printed). Outputs are poisoned (NaN) before each
// product.
// Pass rule: every output equal to the CPU's bit for bit (max |diff| 0): the kernel adds the
// CPU's own per-block float terms in the CPU's order (gemm_mma.cuh), so any difference is a bug.
// Time: CUDA events, median of 20 runs after 3 warm-ups, TFLOP/s = 2 * n_in * n_out * rows / t
// (n_in per group); the new path's time includes its activation quantization and both repacks.
// "one-slot": the same kernel adding every term into one running sum (not the CPU's order; its
// output within 1e-5 x the case's max |y| of the CPU's): the time the CPU's 4 live partial
// slots cost, and what DS4_CUDA_MMA_ONE_SLOT=1 computes.
// DS4_CUDA_MMA=0 is set at start, so ds4::cuda::matmul_grouped is the existing path.
//
// Usage: cuda_mma_check [--quick] (quick: rows {32, 100} only). Exit 0 = pass, 1 = failure,
// 77 = no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "check_timing.h"
#include "compute/backend.h"
#include "compute/cuda/gemm_mma.h"
#include "compute/cuda/gemv.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "quant/quant.h"
#include "quant/types.h"

using namespace ds4;

namespace {

using cuda_check::ck;
double time_ms(const std::function<void()>& fn, cudaStream_t s) { return cuda_check::time_ms(fn, s, 20); }

struct Shape {
  const char* name;
  int64_t n_in, n_out, groups;
  size_t offset = 0, pad = 0;  // weight bytes before row 0 / after each row
};

struct Diff {
  double max_abs = 0, max_rel = 0;
  int64_t unequal = 0, nonfinite = 0;
};
Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
  Diff d;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) {
      if (std::memcmp(&got[i], &want[i], 4) != 0) ++d.nonfinite, ++d.unequal;
      continue;
    }
    if (std::memcmp(&got[i], &want[i], 4) != 0) ++d.unequal;
    const double a = std::fabs(static_cast<double>(got[i]) - want[i]);
    d.max_abs = std::max(d.max_abs, a);
    d.max_rel = std::max(d.max_rel, a / std::max(1e-30, std::fabs(static_cast<double>(want[i]))));
  }
  return d;
}

uint16_t fp32_to_fp16_check(float v) { return fp32_to_fp16(v); }

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  setenv("DS4_CUDA_MMA", "0", 1);  // the reference CUDA path is the existing one (MMA is on by default)
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  const uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("cuda_mma_check on %s, seed %llu\n", prop.name, static_cast<unsigned long long>(seed));
  const auto t_start = std::chrono::steady_clock::now();

  ThreadPool pool(0);
  auto cpu = compute::make_cpu_backend(&pool);
  cudaStream_t s;
  ck(cudaStreamCreate(&s), "stream");

  const std::vector<Shape> shapes = {
      {"attn q_a/kv 4096->1024", 4096, 1024, 1},
      {"ffn-like 1024->32768", 1024, 32768, 1},
      {"shared expert 4096->2048", 4096, 2048, 1},
      {"out_a grouped 8x(4096->1024)", 4096, 8192, 8},
      {"unaligned 4096->1024 (+2 B, stride +6)", 4096, 1024, 1, 2, 6},
  };
  const std::vector<int64_t> row_counts =
      quick ? std::vector<int64_t>{32, 100} : std::vector<int64_t>{32, 100, 512, 2048};
  int failures = 0;
  std::mt19937_64 rng(seed);
  std::printf("%-40s %6s | %-34s | %-12s | %9s %7s | %9s %7s | %6s\n", "case", "rows",
              "mma vs cpu (max abs, rel, unequal)", "old vs cpu", "mma ms", "TFLOP/s", "old ms", "TFLOP/s", "x");
  for (const Shape& sh : shapes) {
    const int64_t nb = sh.n_in / 32;
    const size_t row_bytes = static_cast<size_t>(nb) * 34, stride = row_bytes + sh.pad;
    std::vector<uint8_t> wbytes(sh.offset + stride * sh.n_out + 64, 0xff);
    {  // the CPU's quantizer on random rows, in parallel
      const uint64_t base = rng();
      pool.parallel_for(sh.n_out, 64, [&](int64_t b, int64_t e) {
        std::mt19937 r(static_cast<uint32_t>(base ^ (static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull)));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> row(sh.n_in);
        for (int64_t o = b; o < e; ++o) {
          const float scale = 0.02f * std::exp(0.5f * nd(r));
          for (auto& v : row) v = nd(r) * scale;
          quant::quantize_rows(GgmlType::Q8_0, row.data(), wbytes.data() + sh.offset + o * stride, 1, sh.n_in, nullptr);
        }
      });
    }
    uint8_t* dw = nullptr;
    ck(cudaMalloc(&dw, wbytes.size()), "malloc weights");
    ck(cudaMemcpy(dw, wbytes.data(), wbytes.size(), cudaMemcpyHostToDevice), "upload weights");
    const compute::Matrix hm{GgmlType::Q8_0, wbytes.data() + sh.offset, sh.n_in, sh.n_out, stride};
    const cuda::DevMatrix dm{GgmlType::Q8_0, dw + sh.offset, sh.n_in, sh.n_out, stride};
    const int64_t x_len = sh.groups * sh.n_in;
    for (int64_t rows : row_counts) {
      std::vector<float> x(static_cast<size_t>(rows * x_len));
      {
        std::normal_distribution<float> nd(0.0f, 1.0f);
        float scale = 1.0f;
        for (size_t i = 0; i < x.size(); ++i) {
          if (i % 32 == 0) scale = std::exp(nd(rng));
          float v = nd(rng) * scale;
          x[i] = v == 0.0f ? 1e-3f : v;
        }
      }
      std::vector<float> want(static_cast<size_t>(rows * sh.n_out));
      cpu->matmul_grouped(hm, sh.groups, x.data(), rows, want.data());
      float *dx = nullptr, *dy = nullptr, *dy_old = nullptr;
      const size_t ybytes = want.size() * sizeof(float);
      ck(cudaMalloc(&dx, x.size() * sizeof(float)), "malloc x");
      ck(cudaMalloc(&dy, ybytes), "malloc y");
      ck(cudaMalloc(&dy_old, ybytes), "malloc y");
      ck(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), "upload x");
      ck(cudaMemset(dy, 0xff, ybytes), "poison");  // NaN
      ck(cudaMemset(dy_old, 0xff, ybytes), "poison");
      std::string err;
      std::vector<float> got(want.size()), got_old(want.size());
      try {
        cuda::gemv_detail::mma_matmul(dm, sh.groups, dx, rows, dy, 0, 0, s);
        cuda::matmul_grouped(dm, sh.groups, dx, rows, dy_old, 0, 0, false, s);
        ck(cudaStreamSynchronize(s), "sync");
      } catch (const std::exception& e) {
        err = e.what();
      }
      if (!err.empty()) {
        std::printf("%-40s %6lld | ERROR %s  FAIL\n", sh.name, static_cast<long long>(rows), err.c_str());
        ++failures;
      } else {
        ck(cudaMemcpy(got.data(), dy, ybytes, cudaMemcpyDeviceToHost), "download");
        ck(cudaMemcpy(got_old.data(), dy_old, ybytes, cudaMemcpyDeviceToHost), "download");
        const Diff d = compare(got, want), d_old = compare(got_old, want);
        const bool pass = d.unequal == 0;
        failures += pass ? 0 : 1;
        const double flop = 2.0 * sh.n_in * sh.n_out * rows;
        double t_new = -1, t_old = -1, t_one = -1;
        try {
          t_new = time_ms([&] { cuda::gemv_detail::mma_matmul(dm, sh.groups, dx, rows, dy, 0, 0, s); }, s);
          t_old = time_ms([&] { cuda::matmul_grouped(dm, sh.groups, dx, rows, dy_old, 0, 0, false, s); }, s);
          // The same kernel with one running sum (not the CPU's order; its output is not checked):
          // what the CPU's partial-sum order costs. Into dy_old, which was already compared.
          t_one = time_ms([&] { cuda::gemv_detail::mma_matmul(dm, sh.groups, dx, rows, dy_old, 0, 0, s, true); }, s);
        } catch (const std::exception& e) {
          std::printf("    timing failed: %s\n", e.what());
          ++failures;
        }
        // The one-slot output (DS4_CUDA_MMA_ONE_SLOT=1's values): the CPU's block terms in another
        // f32 order, so within f32 rounding of the CPU's sum: |diff| <= 1e-5 x the case's max |y|.
        std::vector<float> got_one(want.size());
        ck(cudaMemcpy(got_one.data(), dy_old, ybytes, cudaMemcpyDeviceToHost), "download");
        const Diff d_one = compare(got_one, want);
        double ymax = 0;
        for (float v : want) ymax = std::max(ymax, static_cast<double>(std::fabs(v)));
        const bool one_ok = t_one >= 0 && d_one.nonfinite == 0 && d_one.max_abs <= 1e-5 * ymax;
        failures += one_ok ? 0 : 1;
        std::printf("    one-slot vs cpu: max abs %.3g (max |y| %.3g, tol 1e-5 x that), %lld unequal  %s\n",
                    d_one.max_abs, ymax, static_cast<long long>(d_one.unequal), one_ok ? "PASS" : "FAIL");
        char diff[64], dold[32];
        std::snprintf(diff, sizeof diff, "%.3g, %.3g, %lld", d.max_abs, d.max_rel, static_cast<long long>(d.unequal));
        std::snprintf(dold, sizeof dold, "%lld unequal", static_cast<long long>(d_old.unequal));
        std::printf(
            "%-40s %6lld | %-34s | %-12s | %9.4f %7.1f | %9.4f %7.1f | %6.2f  one-slot %.4f ms (CPU order "
            "costs %+.0f%%)  tol 0 (CPU terms, CPU order)  %s\n",
            sh.name, static_cast<long long>(rows), diff, dold, t_new, flop / t_new * 1e-9, t_old, flop / t_old * 1e-9,
            t_old / t_new, t_one, (t_new / t_one - 1) * 100, pass ? "PASS" : "FAIL");
        if (!pass) {
          int shown = 0;
          for (size_t i = 0; i < got.size() && shown < 3; ++i)
            if (std::memcmp(&got[i], &want[i], 4) != 0) {
              std::printf("    first differences: row %lld out %lld: gpu %.9g cpu %.9g\n",
                          static_cast<long long>(i / sh.n_out), static_cast<long long>(i % sh.n_out), got[i], want[i]);
              ++shown;
            }
        }
      }
      std::fflush(stdout);
      cudaFree(dx);
      cudaFree(dy);
      cudaFree(dy_old);
    }
    cudaFree(dw);
  }
  // ---- routed experts: IQ2_XXS gate/up, Q2_K down (the Flash q2 mix), 64 experts, top 6 ----
  {
    const int64_t n_embd = 4096, n_ff = 2048, n_expert = 64, k = 6;
    const size_t gu_row = static_cast<size_t>(n_embd / 256) * 66, dn_row = static_cast<size_t>(n_ff / 256) * 84;
    const size_t gu_exp = gu_row * n_ff, dn_exp = dn_row * n_embd;
    std::vector<uint8_t> hg(gu_exp * n_expert), hu(gu_exp * n_expert), hd(dn_exp * n_expert);
    const uint64_t base = rng();
    // Random quant bytes (every grid index, sign pattern, scale and min nibble), finite scales.
    auto fill = [&](std::vector<uint8_t>& v, size_t bb, size_t d_off, bool two, uint64_t salt) {
      const size_t nblk = v.size() / bb;
      pool.parallel_for(static_cast<int64_t>(nblk), 4096, [&](int64_t b, int64_t e) {
        std::mt19937_64 r(base ^ salt ^ (static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (int64_t i = b; i < e; ++i) {
          uint8_t* blk = v.data() + i * bb;
          for (size_t j = 0; j < bb; j += 8) {
            const uint64_t x = r();
            std::memcpy(blk + j, &x, std::min<size_t>(8, bb - j));
          }
          const uint16_t d = fp32_to_fp16_check(0.004f * nd(r));
          std::memcpy(blk + d_off, &d, 2);
          if (two) {
            const uint16_t m = fp32_to_fp16_check(0.004f * nd(r));
            std::memcpy(blk + d_off + 2, &m, 2);
          }
        }
      });
    };
    fill(hg, 66, 0, false, 1), fill(hu, 66, 0, false, 2), fill(hd, 84, 80, true, 3);
    uint8_t *dg = nullptr, *du = nullptr, *dd = nullptr;
    ck(cudaMalloc(&dg, hg.size()), "malloc gate");
    ck(cudaMalloc(&du, hu.size()), "malloc up");
    ck(cudaMalloc(&dd, hd.size()), "malloc down");
    ck(cudaMemcpy(dg, hg.data(), hg.size(), cudaMemcpyHostToDevice), "upload");
    ck(cudaMemcpy(du, hu.data(), hu.size(), cudaMemcpyHostToDevice), "upload");
    ck(cudaMemcpy(dd, hd.data(), hd.size(), cudaMemcpyHostToDevice), "upload");
    auto hset = [&](const std::vector<uint8_t>& v, GgmlType t, int64_t n_in, int64_t n_out, size_t row, size_t ex) {
      return compute::ExpertSet{compute::Matrix{t, v.data(), n_in, n_out, row}, n_expert, ex};
    };
    auto dset = [&](const uint8_t* p, GgmlType t, int64_t n_in, int64_t n_out, size_t row, size_t ex) {
      return cuda::DevExperts{cuda::DevMatrix{t, p, n_in, n_out, row}, n_expert, ex};
    };
    const auto cg = hset(hg, GgmlType::IQ2_XXS, n_embd, n_ff, gu_row, gu_exp);
    const auto cu = hset(hu, GgmlType::IQ2_XXS, n_embd, n_ff, gu_row, gu_exp);
    const auto cdn = hset(hd, GgmlType::Q2_K, n_ff, n_embd, dn_row, dn_exp);
    const auto gg = dset(dg, GgmlType::IQ2_XXS, n_embd, n_ff, gu_row, gu_exp);
    const auto gu = dset(du, GgmlType::IQ2_XXS, n_embd, n_ff, gu_row, gu_exp);
    const auto gdn = dset(dd, GgmlType::Q2_K, n_ff, n_embd, dn_row, dn_exp);
    const std::vector<int64_t> moe_rows = quick ? std::vector<int64_t>{8, 40} : std::vector<int64_t>{8, 40, 200, 512};
    for (float limit : {0.0f, 7.0f})
      for (int64_t rows : moe_rows) {
        std::vector<float> x(static_cast<size_t>(rows * n_embd)), w(static_cast<size_t>(rows * k));
        std::vector<int32_t> ids(static_cast<size_t>(rows * k));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& v : x) v = nd(rng) * 0.5f;
        for (auto& v : w) v = 0.05f + std::fabs(nd(rng));
        for (int64_t t = 0; t < rows; ++t) {  // k distinct experts, skewed towards low ids
          std::vector<int32_t> pick;
          while (static_cast<int64_t>(pick.size()) < k) {
            const int32_t e = static_cast<int32_t>(std::min<double>(n_expert - 1, std::fabs(nd(rng)) * n_expert / 3));
            if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
          }
          std::copy(pick.begin(), pick.end(), ids.begin() + t * k);
        }
        std::vector<float> want(static_cast<size_t>(rows * n_embd));
        cpu->moe_experts(cg, cu, cdn, x.data(), ids.data(), w.data(), rows, k, limit, want.data());
        float *dx, *dw, *dy, *dy_old;
        int32_t* did;
        ck(cudaMalloc(&dx, x.size() * 4), "malloc"), ck(cudaMalloc(&dw, w.size() * 4), "malloc");
        ck(cudaMalloc(&did, ids.size() * 4), "malloc");
        ck(cudaMalloc(&dy, want.size() * 4), "malloc"), ck(cudaMalloc(&dy_old, want.size() * 4), "malloc");
        ck(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload");
        ck(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice), "upload");
        ck(cudaMemcpy(did, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "upload");
        ck(cudaMemset(dy, 0xff, want.size() * 4), "poison"), ck(cudaMemset(dy_old, 0xff, want.size() * 4), "poison");
        char name[96];
        std::snprintf(name, sizeof name, "moe iq2_xxs/q2_k 4096x2048 E64 k6 lim %g", limit);
        try {
          cuda::gemv_detail::mma_moe(gg, gu, gdn, dx, did, dw, rows, k, limit, dy, s);
          cuda::moe_experts(gg, gu, gdn, dx, did, dw, rows, k, limit, dy_old, false, s);
          ck(cudaStreamSynchronize(s), "sync");
          std::vector<float> got(want.size()), got_old(want.size());
          ck(cudaMemcpy(got.data(), dy, want.size() * 4, cudaMemcpyDeviceToHost), "download");
          ck(cudaMemcpy(got_old.data(), dy_old, want.size() * 4, cudaMemcpyDeviceToHost), "download");
          const Diff d = compare(got, want), d_old = compare(got_old, want);
          const bool pass = d.unequal == 0;
          failures += pass ? 0 : 1;
          const double flop = 2.0 * 3 * n_embd * n_ff * rows * k;
          const double t_new =
              time_ms([&] { cuda::gemv_detail::mma_moe(gg, gu, gdn, dx, did, dw, rows, k, limit, dy, s); }, s);
          const double t_old =
              time_ms([&] { cuda::moe_experts(gg, gu, gdn, dx, did, dw, rows, k, limit, dy_old, false, s); }, s);
          char diff[64], dold[32];
          std::snprintf(diff, sizeof diff, "%.3g, %.3g, %lld", d.max_abs, d.max_rel, static_cast<long long>(d.unequal));
          std::snprintf(dold, sizeof dold, "%lld unequal", static_cast<long long>(d_old.unequal));
          std::printf(
              "%-40s %6lld | %-34s | %-12s | %9.4f %7.1f | %9.4f %7.1f | %6.2f  tol 0 (CPU terms, CPU order)  %s\n",
              name, static_cast<long long>(rows), diff, dold, t_new, flop / t_new * 1e-9, t_old, flop / t_old * 1e-9,
              t_old / t_new, pass ? "PASS" : "FAIL");
          if (rows == moe_rows.back()) {  // a bad expert id: token 0's row NaN, the other rows unchanged
            std::vector<int32_t> bad = ids;
            bad[3] = static_cast<int32_t>(n_expert + 5);
            ck(cudaMemcpy(did, bad.data(), bad.size() * 4, cudaMemcpyHostToDevice), "upload");
            ck(cudaMemset(dy, 0, want.size() * 4), "clear");
            cuda::gemv_detail::mma_moe(gg, gu, gdn, dx, did, dw, rows, k, limit, dy, s);
            ck(cudaStreamSynchronize(s), "sync");
            ck(cudaMemcpy(got.data(), dy, want.size() * 4, cudaMemcpyDeviceToHost), "download");
            int64_t not_nan = 0, changed = 0;
            for (int64_t i = 0; i < n_embd; ++i) not_nan += std::isnan(got[i]) ? 0 : 1;
            for (size_t i = n_embd; i < got.size(); ++i) changed += std::memcmp(&got[i], &want[i], 4) != 0;
            const bool ok = not_nan == 0 && changed == 0;
            failures += ok ? 0 : 1;
            std::printf("%-40s %6lld | bad expert id: %lld non-NaN in its row, %lld other values changed  %s\n", name,
                        static_cast<long long>(rows), static_cast<long long>(not_nan), static_cast<long long>(changed),
                        ok ? "PASS" : "FAIL");
          }
        } catch (const std::exception& e) {
          std::printf("%-40s %6lld | ERROR %s  FAIL\n", name, static_cast<long long>(rows), e.what());
          ++failures;
        }
        std::fflush(stdout);
        cudaFree(dx), cudaFree(dw), cudaFree(did), cudaFree(dy), cudaFree(dy_old);
      }
    cudaFree(dg), cudaFree(du), cudaFree(dd);
  }

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("cuda_mma_check: %d failure(s), %.1f s\n", failures, secs);
  return failures == 0 ? 0 : 1;
}
