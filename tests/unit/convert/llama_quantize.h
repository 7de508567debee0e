#pragma once
// llama.cpp v0.5.0's own quantizer (llama_model_quantize from the npm libllama, dlopened by
// LlamaRunner's libraries), to make the GGUFs a user gets from `llama-quantize`. Only the
// thread count, file type and allow_requantize are set, in a copy of
// llama_model_quantize_default_params() whose v0.5.0 defaults are checked first
// (int32 nthread, int32 ftype = 7, int32 output/token types = GGML_TYPE_COUNT (43), bool
// allow_requantize = false, bool quantize_output_tensor = true).
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "llama_runner.h"

namespace ds4::test {

// LLAMA_FTYPE_MOSTLY_* values of llama.h.
enum class LlamaFtype : int32_t {
  Q4_0 = 2, Q8_0 = 7, Q5_0 = 8, Q2_K = 10, Q3_K_S = 11, Q3_K_M = 12, Q3_K_L = 13, Q4_K_S = 14, Q4_K_M = 15,
  Q5_K_S = 16, Q5_K_M = 17, Q6_K = 18, IQ4_NL = 25, IQ3_S = 26, IQ3_M = 27, IQ4_XS = 30, MXFP4_MOE = 38,
};

inline void llama_quantize(const std::string& in, const std::string& out, LlamaFtype ftype) {
  LlamaRunner runner;  // loads libggml / libllama and initialises the backends
  void* llama = dlopen((ggml_lib_dir() + "/libllama.v0.5.0.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!llama) throw std::runtime_error("libllama is not loaded");
  struct Params {
    alignas(8) unsigned char bytes[512];
  };
  auto defaults = reinterpret_cast<Params (*)()>(dlsym(llama, "llama_model_quantize_default_params"));
  auto quantize = reinterpret_cast<uint32_t (*)(const char*, const char*, const Params*)>(dlsym(llama, "llama_model_quantize"));
  if (!defaults || !quantize) throw std::runtime_error("libllama lacks llama_model_quantize");
  Params p = defaults();
  int32_t v[4];
  std::memcpy(v, p.bytes, sizeof v);
  if (v[1] != 7 || v[2] != 43 || v[3] != 43 || p.bytes[16] != 0 || p.bytes[17] != 1)
    throw std::runtime_error("llama_model_quantize_default_params has an unexpected layout (not llama.cpp v0.5.0?)");
  const int32_t nthread = 2, ft = static_cast<int32_t>(ftype);
  std::memcpy(p.bytes + 0, &nthread, 4);
  std::memcpy(p.bytes + 4, &ft, 4);
  p.bytes[16] = 1;  // allow_requantize
  dlclose(llama);
  if (quantize(in.c_str(), out.c_str(), &p) != 0) throw std::runtime_error("llama_model_quantize failed for " + out);
}

}  // namespace ds4::test
