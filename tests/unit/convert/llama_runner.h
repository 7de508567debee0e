#pragma once
// Runs a GGUF through llama.cpp v0.5.0 (the prebuilt libllama from npm @node-llama-cpp, dlopened)
// and returns float32 logits for every position: an independent engine to check converted
// files against. The parameter structs are taken from llama_*_default_params() into oversized
// buffers and only a few fields are changed, at the byte offsets of the v0.5.0 llama.h
// llama_context_params (checked against the defaults before use, see set_context_fields);
// llama_batch is the long-stable 7-field struct.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../common/ggml_lib.h"

namespace ds4::test {

// Context settings that change llama.cpp's numerics. The defaults of llama.cpp v0.5.0 are an F16
// KV cache (every DeepSeek V4 cache: raw/SWA, CSA, HCA and indexer rows) and flash attention
// "auto" (on for the CPU backend).
struct LlamaOptions {
  enum class Kv { F16, F32 };
  Kv kv = Kv::F16;
  int32_t flash_attn = -1;  // LLAMA_FLASH_ATTN_TYPE_AUTO -1, DISABLED 0, ENABLED 1
  int32_t n_threads = 2;
  // When set, receives the indexer's selected compressed rows of each ratio-4 layer: the graph
  // tensor llama.cpp names "lid_top_k-<layer>", [n_tokens][top_k] int32 row indices (in no
  // particular order), keyed by that name. Read through the scheduler's eval callback.
  std::map<std::string, std::vector<int32_t>>* top_k = nullptr;
};

class LlamaRunner {
 public:
  LlamaRunner() {
    const std::string dir = ggml_lib_dir();
    ggml_ = dlopen((dir + "/libggml.v0.5.0.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!ggml_) throw std::runtime_error(std::string("dlopen libggml: ") + dlerror());
    llama_ = dlopen((dir + "/libllama.v0.5.0.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!llama_) throw std::runtime_error(std::string("dlopen libllama: ") + dlerror());
    void* base = dlopen((dir + "/libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!base) throw std::runtime_error(std::string("dlopen libggml-base: ") + dlerror());
    get_name_ = fn<const char* (*)(const void*)>(base, "ggml_get_name");
    get_data_ = fn<void* (*)(const void*)>(base, "ggml_get_data");
    nelements_ = fn<int64_t (*)(const void*)>(base, "ggml_nelements");
    nbytes_ = fn<size_t (*)(const void*)>(base, "ggml_nbytes");
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
                            int32_t* n_vocab_out, const LlamaOptions& opt = {}) {
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
    set_context_fields(cp, opt);
    Capture cap{this, opt.top_k, n};
    if (opt.top_k) {
      opt.top_k->clear();
      bool (*cb)(void*, bool, void*) = &Capture::eval;
      void* ud = &cap;
      std::memcpy(cp.bytes + kOffCbEval, &cb, sizeof cb);
      std::memcpy(cp.bytes + kOffCbEvalData, &ud, sizeof ud);
    }
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
    if (cap.error) throw std::runtime_error(cap.error);
    return out;
  }

 private:
  // Byte offsets in the v0.5.0 llama_context_params (x86-64): nine 32-bit counts, five enums,
  // seven floats + yarn_orig_ctx + defrag_thold, then cb_eval and its user data (8-byte
  // pointers at 88 and 96), then type_k, type_v. Computed with offsetof() on that release's
  // include/llama.h; the default values found there are checked so that a different layout
  // fails loudly instead of silently setting the wrong fields.
  static constexpr size_t kOffNThreads = 28, kOffNThreadsBatch = 32, kOffFlashAttn = 52, kOffCbEval = 88,
                          kOffCbEvalData = 96, kOffTypeK = 104, kOffTypeV = 108;
  // ggml_backend_sched_eval_callback: asked first (ask = true) whether a node is wanted, then
  // called with the computed node. Only ggml's exported accessors are used on the tensor.
  struct Capture {
    LlamaRunner* self;
    std::map<std::string, std::vector<int32_t>>* out;
    uint32_t n_tokens;
    const char* error = nullptr;
    static bool eval(void* t, bool ask, void* ud) {
      auto* c = static_cast<Capture*>(ud);
      const std::string name = c->self->get_name_(t);
      const bool want = name.rfind("lid_top_k-", 0) == 0 && name.find(' ') == std::string::npos;
      if (ask) return want;
      if (!want) return true;
      const int64_t n = c->self->nelements_(t);
      if (c->self->nbytes_(t) != static_cast<size_t>(n) * 4 || n % c->n_tokens != 0) {
        c->error = "lid_top_k is not an int32 [n_tokens][k] tensor";
        return false;
      }
      auto& v = (*c->out)[name];
      v.resize(static_cast<size_t>(n));
      std::memcpy(v.data(), c->self->get_data_(t), v.size() * 4);
      return true;
    }
  };
  struct Params;
  static int32_t get_i32(const Params& p, size_t off) {
    int32_t v;
    std::memcpy(&v, p.bytes + off, 4);
    return v;
  }
  static void set_i32(Params& p, size_t off, int32_t v) { std::memcpy(p.bytes + off, &v, 4); }
  static void set_context_fields(Params& cp, const LlamaOptions& opt) {
    constexpr int32_t kGgmlF32 = 0, kGgmlF16 = 1;
    if (get_i32(cp, kOffTypeK) != kGgmlF16 || get_i32(cp, kOffTypeV) != kGgmlF16 || get_i32(cp, kOffFlashAttn) != -1 ||
        get_i32(cp, kOffNThreads) != 4 || get_i32(cp, kOffNThreadsBatch) != 4)
      throw std::runtime_error("llama_context_default_params has an unexpected layout (not llama.cpp v0.5.0?)");
    const int32_t t = opt.kv == LlamaOptions::Kv::F32 ? kGgmlF32 : kGgmlF16;
    set_i32(cp, kOffTypeK, t);
    set_i32(cp, kOffTypeV, t);
    set_i32(cp, kOffFlashAttn, opt.flash_attn);
    set_i32(cp, kOffNThreads, opt.n_threads);
    set_i32(cp, kOffNThreadsBatch, opt.n_threads);
  }
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
  const char* (*get_name_)(const void*) = nullptr;
  void* (*get_data_)(const void*) = nullptr;
  int64_t (*nelements_)(const void*) = nullptr;
  size_t (*nbytes_)(const void*) = nullptr;
};

}  // namespace ds4::test
