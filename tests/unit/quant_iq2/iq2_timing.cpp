// Standalone throughput measurement for the IQ2_XXS codec (not a test): dequantize and
// IQ2_XXS x Q8_K dot (scalar, AVX2, and ggml's own AVX2 build for context), single thread,
// over a 2048 x 4096 weight matrix (17.3 MB, larger than the last-level cache of most CPUs).
// Prints GB/s of IQ2_XXS weight bytes consumed.  Usage: iq2_timing [repeats]
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ggml_iq2.h"
#include "quant/blocks.h"
#include "quant/iq2_xxs.h"

using namespace ds4::quant;

namespace {

template <class F>
double best_seconds(int repeats, F&& f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = s < best ? s : best;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 5;
  const int64_t rows = 2048, cols = 4096, nb = cols / 256;
  std::mt19937 rng(1);
  const auto wf = ds4::test::gaussian(rng, rows * cols, 0.02f);
  std::vector<BlockIQ2_XXS> w(rows * nb);
  std::vector<float> imatrix(cols, 1.f);
  const auto tq0 = std::chrono::steady_clock::now();
  quantize_iq2_xxs(wf.data(), w.data(), rows, cols, imatrix.data());
  const double tq = std::chrono::duration<double>(std::chrono::steady_clock::now() - tq0).count();
  const double weight_bytes = static_cast<double>(w.size() * sizeof(BlockIQ2_XXS));

  const auto x = ds4::test::gaussian(rng, cols, 1.f);
  std::vector<BlockQ8_K> q8(nb);
  ds4::test::GgmlIq2::get().quantize_q8_K_ref(x.data(), q8.data(), cols);

  std::vector<float> out(cols);
  const double t_deq = best_seconds(repeats, [&] {
    for (int64_t r = 0; r < rows; ++r) dequantize_row_iq2_xxs(w.data() + r * nb, out.data(), cols);
  });
  std::vector<float> y(rows);
  const double t_scalar = best_seconds(repeats, [&] {
    for (int64_t r = 0; r < rows; ++r) y[r] = vec_dot_iq2_xxs_q8_K_scalar(w.data() + r * nb, q8.data(), cols);
  });
  const double t_avx2 = best_seconds(repeats, [&] {
    for (int64_t r = 0; r < rows; ++r) y[r] = vec_dot_iq2_xxs_q8_K_avx2(w.data() + r * nb, q8.data(), cols);
  });
  // ggml's AVX2 kernel from its haswell CPU backend, for comparison only.
  const std::string path = ds4::test::ggml_lib_dir() + "/libggml-cpu-haswell.so";
  double t_ggml = 0;
  if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    reinterpret_cast<void (*)()>(dlsym(h, "ggml_cpu_init"))();
    auto dot = reinterpret_cast<void (*)(int, float*, size_t, const void*, size_t, const void*, size_t, int)>(
        dlsym(h, "ggml_vec_dot_iq2_xxs_q8_K"));
    t_ggml = best_seconds(repeats, [&] {
      for (int64_t r = 0; r < rows; ++r) dot(static_cast<int>(cols), &y[r], 0, w.data() + r * nb, 0, q8.data(), 0, 1);
    });
  }
  std::printf("IQ2_XXS %lld x %lld (%.1f MB), single thread, best of %d\n", static_cast<long long>(rows),
              static_cast<long long>(cols), weight_bytes / 1e6, repeats);
  std::printf("quantize (imatrix)  : %8.3f s   %7.2f Mweights/s\n", tq, rows * cols / tq / 1e6);
  std::printf("dequantize          : %8.3f ms  %7.2f GB/s in, %6.2f GB/s f32 out\n", t_deq * 1e3,
              weight_bytes / t_deq / 1e9, rows * cols * 4.0 / t_deq / 1e9);
  std::printf("dot scalar          : %8.3f ms  %7.2f GB/s\n", t_scalar * 1e3, weight_bytes / t_scalar / 1e9);
  std::printf("dot avx2            : %8.3f ms  %7.2f GB/s\n", t_avx2 * 1e3, weight_bytes / t_avx2 / 1e9);
  if (t_ggml > 0) std::printf("dot ggml avx2 (ref) : %8.3f ms  %7.2f GB/s\n", t_ggml * 1e3, weight_bytes / t_ggml / 1e9);
  return 0;
}
