// gemm_bench: the blocked rows x tokens kernel (quant::gemm_kernel) against the per-row kernel
// (quant::dot_kernel, row by row) on the weight shapes of DeepSeek V4 Flash, for batch sizes
// 1..64. One thread; the times are the thread's CPU time (the machine is shared), best of
// --reps passes over --copies copies of the matrix (so that one pass does not run from L1/L2;
// on a CPU with a large L3 the copies may still fit there). Prints one table row per (format, shape, tokens).
//
//   build/bench/gemm_bench [--reps N] [--copies N] [--only FORMAT] [--max-tokens N]
//
// --only FORMAT keeps the shapes of one format (q8_0, iq2_xxs, q2_K, q4_K, f16), --max-tokens
// drops the larger batch sizes. With DS4_NO_AVX512=1 this times the AVX2 path (what a CPU
// without AVX-512 runs): "blocked" is then the AVX2 row-group kernel where gemm_kernel has one.
//
// --stream MB instead streams one Q8_0 matrix of MB megabytes (rows of 4096, far larger than
// the caches) through the one-token kernels on one thread and prints GB/s for the blocked
// kernel, the per-row kernel and a plain read of the same bytes (wall time, best of --reps):
// how close a decode step's Q8_0 products come to the memory's read rate.
//
// --experts COPIES: the routed-expert products of a decode step (see experts() below).
#include <fmt/format.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/kernels.h"
#include "quant/quant.h"
#include "quant/types.h"

using namespace ds4;

namespace {

double thread_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double wall_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Sum of the 64-bit words of p[0..len) (len a multiple of 128), 64-byte loads where the CPU has them.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) uint64_t sum_words_avx512(const uint8_t* p, size_t len) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0;
  for (size_t i = 0; i < len; i += 128) {
    s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + i + 64));
  }
  alignas(64) uint64_t v[8];
  _mm512_store_si512(v, _mm512_add_epi64(s0, s1));
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
#endif
uint64_t sum_words(const uint8_t* p, size_t len) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return sum_words_avx512(p, len);
#endif
  uint64_t t = 0;
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    t += v;
  }
  return t;
}

int stream_q8_0(double mb, int reps) {
  const int64_t n = 4096;
  const size_t rb = row_bytes(traits(GgmlType::Q8_0), static_cast<uint64_t>(n));
  const int64_t rows = std::max<int64_t>(16, static_cast<int64_t>(mb * 1e6 / static_cast<double>(rb)) / 16 * 16);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  std::mt19937 rng(16);
  for (size_t i = 0; i + 4 <= w.size(); i += 4) {
    const uint32_t r = rng();
    std::memcpy(&w[i], &r, 4);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < n / 32; ++b) {
      const uint16_t h = 0x2000;  // a plain finite scale in every block
      std::memcpy(&w[r * rb + b * 34], &h, 2);
    }
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  std::vector<uint8_t> a(rb);
  quant::quantize_activation_row(GgmlType::Q8_0, x.data(), a.data(), n);
  std::vector<float> y(static_cast<size_t>(rows));
  const quant::GemmKernel gemm = quant::gemm_kernel(GgmlType::Q8_0);
  const quant::DotKernel dot = quant::dot_kernel(GgmlType::Q8_0);
  double best_g = 0, best_r = 0, best_read = 0;
  uint64_t sink = 0;
  for (int rep = 0; rep < reps; ++rep) {
    double t0 = wall_s();
    sink += sum_words(w.data(), w.size() / 128 * 128);
    best_read = std::max(best_read, static_cast<double>(w.size() / 128 * 128) / (wall_s() - t0) / 1e9);
    if (gemm) {
      t0 = wall_s();
      gemm(w.data(), rb, rows, a.data(), rb, 1, y.data(), rows, n);
      best_g = std::max(best_g, static_cast<double>(w.size()) / (wall_s() - t0) / 1e9);
    }
    t0 = wall_s();
    for (int64_t o = 0; o < rows; ++o) y[static_cast<size_t>(o)] = dot(w.data() + o * rb, a.data(), n);
    best_r = std::max(best_r, static_cast<double>(w.size()) / (wall_s() - t0) / 1e9);
  }
  fmt::print("q8_0 {} x {} ({:.0f} MB), 1 token, 1 thread, best of {}: blocked {:.1f} GB/s, per-row {:.1f} GB/s, "
             "plain read {:.1f} GB/s{}\n",
             rows, n, static_cast<double>(w.size()) / 1e6, reps, best_g, best_r, best_read, sink == 42 ? " " : "");
  return 0;
}

// --experts COPIES: the routed-expert shapes of Flash (IQ2_XXS gate/up 2048 x 4096, Q2_K down
// 4096 x 2048), COPIES distinct copies cycled (enough to leave the L3: the weights come from
// memory, as a decode step's experts do), 1/2/4/8 tokens, one thread, thread CPU time, best of
// reps. Columns: the per-row kernel, the blocked (panel) kernel, the few-token kernel, what
// gemm_kernel picks, and a plain read of the same bytes, each as ms per matrix and GB/s.
#if DS4_HAVE_AVX512_BUILD && DS4_HAVE_IQ2_XXS
int experts(int copies, int reps) {
  struct Ex {
    GgmlType type;
    int64_t rows, n;
    const char* what;
    quant::GemmKernel panel, direct;
  };
  const Ex shapes[] = {
      {GgmlType::IQ2_XXS, 2048, 4096, "gate/up (4096 -> 2048)", quant::gemm_iq2_xxs_avx512,
       [](const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y, int64_t ys, int64_t n) {
         if (!quant::gemv_iq2_xxs_avx512vbmi(w, ws, rows, act, as, tokens, y, ys, n)) std::abort();
       }},
      {GgmlType::Q2_K, 4096, 2048, "down (2048 -> 4096)", quant::gemm_q2_K_avx512, quant::gemv_q2_K_avx512vbmi}};
  // The panel kernels are called directly below: without AVX-512 VNNI they would fault (SIGILL).
  if (!quant::have_avx512_vnni()) {
    fmt::print("--experts needs a CPU with AVX-512 VNNI (or DS4_NO_AVX512 is set)\n");
    return 1;
  }
  const bool vbmi = quant::have_avx512_vbmi();
  fmt::print("AVX-512 VNNI: {}, VBMI: {}; {} copies, best of {}, thread CPU time\n", quant::have_avx512_vnni() ? "yes" : "no",
             vbmi ? "yes" : "no", copies, reps);
  fmt::print("| format | shape | tokens | MB cycled | per-row ms (GB/s) | panel ms (GB/s) | few-token ms (GB/s) | gemm_kernel ms | plain read ms (GB/s) |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(16);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Ex& s : shapes) {
    const size_t rb = row_bytes(traits(s.type), static_cast<uint64_t>(s.n));
    const size_t mbytes = rb * static_cast<size_t>(s.rows);
    std::vector<float> wf(static_cast<size_t>(s.rows * s.n)), imat(static_cast<size_t>(s.n), 1.0f);
    for (auto& v : wf) v = nd(rng);
    std::vector<uint8_t> w(mbytes * static_cast<size_t>(copies));
    quant::quantize_rows(s.type, wf.data(), w.data(), s.rows, s.n, imat.data());
    for (int c = 1; c < copies; ++c) std::memcpy(w.data() + c * mbytes, w.data(), mbytes);
    const size_t ab = row_bytes(traits(GgmlType::Q8_K), static_cast<uint64_t>(s.n));
    const quant::GemmKernel gemm = quant::gemm_kernel(s.type);
    const quant::DotKernel dot = quant::dot_kernel(s.type);
    for (int64_t T : {1, 2, 4, 8}) {
      std::vector<float> x(static_cast<size_t>(T * s.n));
      for (auto& v : x) v = nd(rng);
      std::vector<uint8_t> a(ab * static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) quant::quantize_activation_row(GgmlType::Q8_K, x.data() + t * s.n, a.data() + t * ab, s.n);
      std::vector<float> y(static_cast<size_t>(T * s.rows));
      double best[5] = {1e300, 1e300, 1e300, 1e300, 1e300};
      uint64_t sink = 0;
      for (int r = 0; r < reps; ++r) {
        auto timed = [&](int k, auto&& body) {
          const double t0 = thread_ms();
          for (int c = 0; c < copies; ++c) body(w.data() + c * mbytes);
          best[k] = std::min(best[k], (thread_ms() - t0) / copies);
        };
        timed(0, [&](const uint8_t* m) {
          for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < s.rows; ++o) y[t * s.rows + o] = dot(m + o * rb, a.data() + t * ab, s.n);
        });
        timed(1, [&](const uint8_t* m) { s.panel(m, rb, s.rows, a.data(), ab, T, y.data(), s.rows, s.n); });
        if (vbmi) timed(2, [&](const uint8_t* m) { s.direct(m, rb, s.rows, a.data(), ab, T, y.data(), s.rows, s.n); });
        timed(3, [&](const uint8_t* m) { gemm(m, rb, s.rows, a.data(), ab, T, y.data(), s.rows, s.n); });
        timed(4, [&](const uint8_t* m) { sink += sum_words(m, mbytes / 128 * 128); });
      }
      auto gbs = [&](double ms) { return static_cast<double>(mbytes) / (ms * 1e6); };
      fmt::print("| {} | {} x {} {} | {} | {:.0f} | {:.3f} ({:.1f}) | {:.3f} ({:.1f}) | {} | {:.3f} | {:.3f} ({:.1f}){} |\n",
                 traits(s.type).name, s.rows, s.n, s.what, T, static_cast<double>(w.size()) / 1e6, best[0], gbs(best[0]),
                 best[1], gbs(best[1]), vbmi ? fmt::format("{:.3f} ({:.1f})", best[2], gbs(best[2])) : std::string("-"),
                 best[3], best[4], gbs(best[4]), sink == 42 ? " " : "");
    }
  }
  return 0;
}
#endif

struct Shape {
  GgmlType type;
  int64_t rows, n;
  const char* what;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 3, copies = 8;
  double stream_mb = 0;
  int experts_copies = 0;
  std::string only;
  int64_t max_tokens = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--copies") copies = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--stream") stream_mb = std::atof(argv[i + 1]);
    else if (a == "--experts") experts_copies = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--only") only = argv[i + 1];
    else if (a == "--max-tokens") max_tokens = std::max(1, std::atoi(argv[i + 1]));
  }
#if DS4_HAVE_AVX512_BUILD && DS4_HAVE_IQ2_XXS
  if (experts_copies > 0) return experts(experts_copies, reps);
#endif
  if (stream_mb > 0) return stream_q8_0(stream_mb, reps);
  const Shape shapes[] = {{GgmlType::Q8_0, 1024, 4096, "attn_q_a"},
                          {GgmlType::IQ2_XXS, 2048, 4096, "ffn_gate/up_exps (one expert)"},
                          {GgmlType::Q2_K, 4096, 2048, "ffn_down_exps (one expert)"},
                          {GgmlType::Q4_K, 512, 2048, "qwen36 ffn_gate/up_exps (one expert)"},
                          {GgmlType::Q4_K, 2048, 512, "qwen36 ffn_down_exps (one expert)"},
                          {GgmlType::F16, 24, 16384, "hc_attn_fn"},
                          {GgmlType::F16, 256, 4096, "ffn_gate_inp"}};
  const int64_t token_counts[] = {1, 2, 3, 4, 8, 16, 64};
  fmt::print("AVX-512 VNNI kernels: {}\n", quant::have_avx512_vnni() ? "yes" : "no (blocked: the AVX2 row-group kernels where there are any)");
  fmt::print("| format | shape (rows x n) | tensor | tokens | blocked ms | per-row ms | per-row / blocked |\n");
  fmt::print("|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(16);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Shape& s : shapes) {
    if (!only.empty() && only != traits(s.type).name) continue;
    const size_t rb = row_bytes(traits(s.type), static_cast<uint64_t>(s.n));
    std::vector<float> wf(static_cast<size_t>(s.rows * s.n)), imat(static_cast<size_t>(s.n), 1.0f);
    for (auto& v : wf) v = nd(rng);
    std::vector<uint8_t> w(rb * static_cast<size_t>(s.rows) * static_cast<size_t>(copies));
    quant::quantize_rows(s.type, wf.data(), w.data(), s.rows, s.n, imat.data());
    for (int c = 1; c < copies; ++c) std::memcpy(w.data() + c * rb * s.rows, w.data(), rb * s.rows);
    const GgmlType at = quant::vec_dot_type(s.type);
    const size_t ab = at == GgmlType::F32 ? static_cast<size_t>(s.n) * 4 : row_bytes(traits(at), static_cast<uint64_t>(s.n));
    const quant::GemmKernel gemm = quant::gemm_kernel(s.type);
    const quant::DotKernel dot = quant::dot_kernel(s.type);
    for (int64_t T : token_counts) {
      if (T > max_tokens) break;
      std::vector<float> x(static_cast<size_t>(T * s.n));
      for (auto& v : x) v = nd(rng);
      std::vector<uint8_t> a(ab * static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) {
        if (at == GgmlType::F32) std::memcpy(a.data() + t * ab, x.data() + t * s.n, ab);
        else quant::quantize_activation_row(at, x.data() + t * s.n, a.data() + t * ab, s.n);
      }
      std::vector<float> y(static_cast<size_t>(T * s.rows));
      double best_g = 1e300, best_r = 1e300;
      for (int r = 0; r < reps; ++r) {
        if (gemm) {
          const double t0 = thread_ms();
          for (int c = 0; c < copies; ++c) gemm(w.data() + c * rb * s.rows, rb, s.rows, a.data(), ab, T, y.data(), s.rows, s.n);
          best_g = std::min(best_g, (thread_ms() - t0) / copies);
        }
        const double t1 = thread_ms();
        for (int c = 0; c < copies; ++c)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < s.rows; ++o)
              y[t * s.rows + o] = dot(w.data() + c * rb * s.rows + o * rb, a.data() + t * ab, s.n);
        best_r = std::min(best_r, (thread_ms() - t1) / copies);
      }
      if (gemm)
        fmt::print("| {} | {} x {} | {} | {} | {:.3f} | {:.3f} | {:.2f} |\n", traits(s.type).name, s.rows, s.n, s.what, T,
                   best_g, best_r, best_r / best_g);
      else
        fmt::print("| {} | {} x {} | {} | {} | - | {:.3f} | - |\n", traits(s.type).name, s.rows, s.n, s.what, T, best_r);
    }
  }
  return 0;
}
