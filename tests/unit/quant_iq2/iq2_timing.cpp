// Standalone throughput measurement for the IQ2_XXS codec (not a test): dequantize and
// IQ2_XXS x Q8_K dot (scalar, AVX2, and ggml's own AVX2 build for context), single thread,
// over a 16384 x 4096 weight matrix of random blocks (17 MB: beyond L2; it may fit a large
// L3, so this measures decode speed more than DRAM bandwidth), plus quantization speed
// (ours and ggml's) on 64 rows of 4096.
// Prints GB/s of IQ2_XXS weight bytes consumed.  Usage: iq2_timing [repeats [rows]]
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
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
  const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 16384, cols = 4096, nb = cols / 256;
  std::mt19937 rng(1);
  // Random grid/sign/scale bits with model-like f16 scales: the kernels' speed does not depend
  // on the values, and quantizing 67M weights would take minutes.
  std::vector<BlockIQ2_XXS> w(rows * nb);
  {
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> scale(0.f, 0.005f);
    for (auto& b : w) {
      auto* raw = reinterpret_cast<uint8_t*>(&b);
      for (size_t i = 0; i < sizeof b; ++i) raw[i] = static_cast<uint8_t>(byte(rng));
      b.d = ds4::fp32_to_fp16(scale(rng));
    }
  }
  const double weight_bytes = static_cast<double>(w.size() * sizeof(BlockIQ2_XXS));

  const int64_t qrows = 64;
  const auto wf = ds4::test::gaussian(rng, qrows * cols, 0.02f);
  std::vector<float> imatrix(cols, 1.f);
  std::vector<BlockIQ2_XXS> wq(qrows * nb);
  quantize_iq2_xxs(wf.data(), wq.data(), 1, cols, imatrix.data());  // builds our search tables first
  const double tq = best_seconds(1, [&] { quantize_iq2_xxs(wf.data(), wq.data(), qrows, cols, imatrix.data()); });
  const auto& ggml = ds4::test::GgmlIq2::get();
  ggml.quantize_rows(wf.data(), wq.data(), 1, cols, imatrix.data());  // builds ggml's tables first
  const double tq_ggml = best_seconds(1, [&] { ggml.quantize_rows(wf.data(), wq.data(), qrows, cols, imatrix.data()); });

  const auto x = ds4::test::gaussian(rng, cols, 1.f);
  std::vector<BlockQ8_K> q8(nb);
  ds4::test::GgmlIq2::get().quantize_q8_K_ref(x.data(), q8.data(), cols);

  std::vector<float> out(cols), y(rows);
  // ggml's AVX2 kernel from its haswell CPU backend, for comparison only.
  const std::string path = ds4::test::ggml_lib_dir() + "/libggml-cpu-haswell.so";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  using DotFn = void (*)(int, float*, size_t, const void*, size_t, const void*, size_t, int);
  DotFn ggml_dot = h ? reinterpret_cast<DotFn>(dlsym(h, "ggml_vec_dot_iq2_xxs_q8_K")) : nullptr;
  if (h) reinterpret_cast<void (*)()>(dlsym(h, "ggml_cpu_init"))();

  // Each kernel runs over the matrix in slices of 256 rows (about 1 MB); a slice's time is
  // its best over all rounds, and a kernel's time the sum over slices. Slices are short next
  // to a scheduler time slice, so preemption on a shared machine rarely spoils all rounds.
  const int64_t slice = std::min<int64_t>(256, rows), nslices = rows / slice;
  enum { kDeq, kScalar, kAvx2, kGgml, kKernels };
  std::vector<double> best(kKernels * nslices, 1e30);
  auto run = [&](int kernel, int64_t r0) {
    for (int64_t r = r0; r < r0 + slice; ++r) {
      const BlockIQ2_XXS* row = w.data() + r * nb;
      switch (kernel) {
        case kDeq: dequantize_row_iq2_xxs(row, out.data(), cols); break;
        case kScalar: y[r] = vec_dot_iq2_xxs_q8_K_scalar(row, q8.data(), cols); break;
        case kAvx2: y[r] = vec_dot_iq2_xxs_q8_K_avx2(row, q8.data(), cols); break;
        default: ggml_dot(static_cast<int>(cols), &y[r], 0, row, 0, q8.data(), 0, 1); break;
      }
    }
  };
  for (int round = 0; round < repeats; ++round)
    for (int kernel = 0; kernel < kKernels; ++kernel) {
      if (kernel == kGgml && !ggml_dot) continue;
      for (int64_t s = 0; s < nslices; ++s) {
        double& b = best[kernel * nslices + s];
        b = std::min(b, best_seconds(1, [&] { run(kernel, s * slice); }));
      }
    }
  auto total = [&](int kernel) {
    double t = 0;
    for (int64_t s = 0; s < nslices; ++s) t += best[kernel * nslices + s];
    return t;
  };
  const double t_deq = total(kDeq), t_scalar = total(kScalar), t_avx2 = total(kAvx2);
  const double t_ggml = ggml_dot ? total(kGgml) : 0;
  std::printf("IQ2_XXS %lld x %lld (%.1f MB), single thread, best of %d rounds per 256-row slice\n", static_cast<long long>(rows),
              static_cast<long long>(cols), weight_bytes / 1e6, repeats);
  std::printf("quantize (imatrix)  : %8.3f s   %7.2f Mweights/s (ggml: %.2f Mweights/s)\n", tq,
              qrows * cols / tq / 1e6, qrows * cols / tq_ggml / 1e6);
  std::printf("dequantize          : %8.3f ms  %7.2f GB/s in, %6.2f GB/s f32 out\n", t_deq * 1e3,
              weight_bytes / t_deq / 1e9, rows * cols * 4.0 / t_deq / 1e9);
  std::printf("dot scalar          : %8.3f ms  %7.2f GB/s\n", t_scalar * 1e3, weight_bytes / t_scalar / 1e9);
  std::printf("dot avx2            : %8.3f ms  %7.2f GB/s\n", t_avx2 * 1e3, weight_bytes / t_avx2 / 1e9);
  if (t_ggml > 0) std::printf("dot ggml avx2 (ref) : %8.3f ms  %7.2f GB/s\n", t_ggml * 1e3, weight_bytes / t_ggml / 1e9);
  return 0;
}
