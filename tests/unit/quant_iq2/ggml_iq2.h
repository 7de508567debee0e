#pragma once
// ggml's own IQ2_XXS / Q8_K entry points, loaded at run time, as the oracle for these tests.
// Quantize/dequantize and quantize_row_q8_K_ref come from libggml-base.so; the portable dot
// product (ggml_vec_dot_iq2_xxs_q8_K_generic, compiled without FMA) from libggml-cpu-x64.so.
#include <dlfcn.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/ggml_lib.h"

namespace ds4::test {

constexpr int kGgmlTypeIq2xxs = 16;

struct GgmlIq2 {
  void (*dequantize)(const void*, float*, int64_t);
  size_t (*quantize)(const float*, void*, int64_t, int64_t, const float*);
  void (*quantize_init)(int);
  void (*quantize_q8_K_ref)(const float*, void*, int64_t);
  void (*vec_dot_generic)(int, float*, size_t, const void*, size_t, const void*, size_t, int);

  static const GgmlIq2& get() {
    static const GgmlIq2 g = [] {
      GgmlIq2 r{};
      r.dequantize = ggml_fn<decltype(r.dequantize)>("dequantize_row_iq2_xxs");
      r.quantize = ggml_fn<decltype(r.quantize)>("quantize_iq2_xxs");
      r.quantize_init = ggml_fn<decltype(r.quantize_init)>("ggml_quantize_init");
      r.quantize_q8_K_ref = ggml_fn<decltype(r.quantize_q8_K_ref)>("quantize_row_q8_K_ref");
      ggml_base_handle();  // the CPU library resolves libggml-base.so to this loaded copy
      const std::string path = ggml_lib_dir() + "/libggml-cpu-x64.so";
      void* cpu = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!cpu) throw std::runtime_error("cannot dlopen " + path + ": " + dlerror());
      auto cpu_init = reinterpret_cast<void (*)()>(dlsym(cpu, "ggml_cpu_init"));
      r.vec_dot_generic = reinterpret_cast<decltype(r.vec_dot_generic)>(dlsym(cpu, "ggml_vec_dot_iq2_xxs_q8_K_generic"));
      if (!cpu_init || !r.vec_dot_generic) throw std::runtime_error("libggml-cpu-x64.so lacks the expected symbols");
      cpu_init();  // fills the f16 -> f32 table the portable code reads
      return r;
    }();
    return g;
  }

  // ggml's quantize_iq2_xxs needs its grid map and neighbour lists (about a second to build).
  size_t quantize_rows(const float* x, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) const {
    static const bool ready = [this] {
      quantize_init(kGgmlTypeIq2xxs);
      return true;
    }();
    (void)ready;
    return quantize(x, dst, nrows, n_per_row, imatrix);
  }

  float vec_dot(const void* w, const void* q8k, int64_t n) const {
    float s = 0;
    vec_dot_generic(static_cast<int>(n), &s, 0, w, 0, q8k, 0, 1);
    return s;
  }
};

inline std::vector<float> gaussian(std::mt19937& rng, size_t n, float sigma) {
  std::normal_distribution<float> dist(0.f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace ds4::test
