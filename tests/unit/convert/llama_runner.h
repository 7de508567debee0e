#pragma once
// Runs a GGUF through llama.cpp v0.5.0 (the prebuilt libllama from npm @node-llama-cpp, dlopened)
// and returns float32 logits for every position: an independent engine to check converted
// files against. Only the llama.h entry points whose layout is stable are used: the parameter
// structs are taken from llama_*_default_params() into oversized buffers and only their leading
// fields (n_ctx, n_batch, n_ubatch) are changed; llama_batch is the long-stable 7-field struct.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../common/ggml_lib.h"

namespace ds4::test {

class LlamaRunner {
 public:
  LlamaRunner() {
    const std::string dir = ggml_lib_dir();
    ggml_ = dlopen((dir + "/libggml.v0.5.0.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!ggml_) throw std::runtime_error(std::string("dlopen libggml: ") + dlerror());
    llama_ = dlopen((dir + "/libllama.v0.5.0.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!llama_) throw std::runtime_error(std::string("dlopen libllama: ") + dlerror());
    static bool backends = [&] {
      fn<void (*)(const char*)>(ggml_, "ggml_backend_load_all_from_path")(dir.c_str());
      fn<void (*)(void (*)(int, const char*, void*), void*)>(llama_, "llama_log_set")(
          [](int level, const char* text, void*) {
            if (level >= 4 /* GGML_LOG_LEVEL_ERROR */) std::fputs(text, stderr);
          },
          nullptr);
      fn<void (*)()>(llama_, "llama_backend_init")();
      return true;
    }();
    (void)backends;
  }

  // Logits [n_tokens][n_vocab] for `tokens` at positions 0..n-1: one batch (prefill) or one
  // token per llama_decode call (incremental).
  std::vector<float> logits(const std::string& gguf, const std::vector<int32_t>& tokens, bool incremental,
                            int32_t* n_vocab_out) {
    Params mp{};
    mp = fn<Params (*)()>(llama_, "llama_model_default_params")();
    void* model = fn<void* (*)(const char*, Params)>(llama_, "llama_model_load_from_file")(gguf.c_str(), mp);
    if (!model) throw std::runtime_error("llama.cpp could not load " + gguf);
    const void* vocab = fn<const void* (*)(const void*)>(llama_, "llama_model_get_vocab")(model);
    const int32_t n_vocab = fn<int32_t (*)(const void*)>(llama_, "llama_vocab_n_tokens")(vocab);
    *n_vocab_out = n_vocab;

    Params cp{};
    cp = fn<Params (*)()>(llama_, "llama_context_default_params")();
    const uint32_t n = static_cast<uint32_t>(tokens.size());
    uint32_t n_ctx = ((n + 255) / 256) * 256;
    std::memcpy(cp.bytes + 0, &n_ctx, 4);  // n_ctx
    std::memcpy(cp.bytes + 4, &n, 4);      // n_batch
    std::memcpy(cp.bytes + 8, &n, 4);      // n_ubatch
    void* ctx = fn<void* (*)(void*, Params)>(llama_, "llama_init_from_model")(model, cp);
    if (!ctx) {
      fn<void (*)(void*)>(llama_, "llama_model_free")(model);
      throw std::runtime_error("llama.cpp could not create a context for " + gguf);
    }
    std::vector<float> out(static_cast<size_t>(n) * n_vocab);
    auto decode = [&](uint32_t first, uint32_t count) {
      Batch b = fn<Batch (*)(int32_t, int32_t, int32_t)>(llama_, "llama_batch_init")(static_cast<int32_t>(count), 0, 1);
      b.n_tokens = static_cast<int32_t>(count);
      for (uint32_t i = 0; i < count; ++i) {
        b.token[i] = tokens[first + i];
        b.pos[i] = static_cast<int32_t>(first + i);
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
      }
      int rc = fn<int32_t (*)(void*, Batch)>(llama_, "llama_decode")(ctx, b);
      if (rc == 0) {
        for (uint32_t i = 0; i < count; ++i) {
          const float* l = fn<float* (*)(void*, int32_t)>(llama_, "llama_get_logits_ith")(ctx, static_cast<int32_t>(i));
          std::memcpy(out.data() + static_cast<size_t>(first + i) * n_vocab, l, sizeof(float) * n_vocab);
        }
      }
      fn<void (*)(Batch)>(llama_, "llama_batch_free")(b);
      if (rc != 0) throw std::runtime_error("llama_decode failed with " + std::to_string(rc));
    };
    try {
      if (incremental) {
        for (uint32_t i = 0; i < n; ++i) decode(i, 1);
      } else {
        decode(0, n);
      }
    } catch (...) {
      fn<void (*)(void*)>(llama_, "llama_free")(ctx);
      fn<void (*)(void*)>(llama_, "llama_model_free")(model);
      throw;
    }
    fn<void (*)(void*)>(llama_, "llama_free")(ctx);
    fn<void (*)(void*)>(llama_, "llama_model_free")(model);
    return out;
  }

 private:
  // Larger than llama_model_params / llama_context_params of any recent llama.h; returned and
  // passed by value (in memory on x86-64), so the library reads only its own prefix.
  struct Params {
    alignas(8) unsigned char bytes[1024];
  };
  struct Batch {
    int32_t n_tokens;
    int32_t* token;
    float* embd;
    int32_t* pos;
    int32_t* n_seq_id;
    int32_t** seq_id;
    int8_t* logits;
  };
  template <class F>
  static F fn(void* h, const char* name) {
    void* p = dlsym(h, name);
    if (!p) throw std::runtime_error(std::string("missing symbol ") + name);
    return reinterpret_cast<F>(p);
  }
  void* ggml_ = nullptr;
  void* llama_ = nullptr;
};

}  // namespace ds4::test
