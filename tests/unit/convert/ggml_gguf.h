#pragma once
// ggml's own GGUF reader (llama.cpp v0.5.0 libggml-base, dlopened) as an independent check that
// files we write are accepted by llama.cpp and laid out as we believe.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "../../common/ggml_lib.h"

namespace ds4::test {

struct GgmlGguf {
  struct InitParams {
    bool no_alloc;
    void** ctx;
  };
  using Init = void* (*)(const char*, InitParams);
  void* ctx = nullptr;

  explicit GgmlGguf(const std::string& path) {
    auto init = ggml_fn<Init>("gguf_init_from_file");
    ctx = init(path.c_str(), InitParams{true, nullptr});
  }
  ~GgmlGguf() {
    if (ctx) ggml_fn<void (*)(void*)>("gguf_free")(ctx);
  }
  GgmlGguf(const GgmlGguf&) = delete;
  GgmlGguf& operator=(const GgmlGguf&) = delete;

  bool ok() const { return ctx != nullptr; }
  int64_t n_tensors() const { return ggml_fn<int64_t (*)(const void*)>("gguf_get_n_tensors")(ctx); }
  int64_t n_kv() const { return ggml_fn<int64_t (*)(const void*)>("gguf_get_n_kv")(ctx); }
  std::string tensor_name(int64_t i) const {
    return ggml_fn<const char* (*)(const void*, int64_t)>("gguf_get_tensor_name")(ctx, i);
  }
  int tensor_type(int64_t i) const { return ggml_fn<int (*)(const void*, int64_t)>("gguf_get_tensor_type")(ctx, i); }
  size_t tensor_offset(int64_t i) const {
    return ggml_fn<size_t (*)(const void*, int64_t)>("gguf_get_tensor_offset")(ctx, i);
  }
  size_t tensor_size(int64_t i) const { return ggml_fn<size_t (*)(const void*, int64_t)>("gguf_get_tensor_size")(ctx, i); }
  size_t data_offset() const { return ggml_fn<size_t (*)(const void*)>("gguf_get_data_offset")(ctx); }
  int64_t find_key(const char* k) const { return ggml_fn<int64_t (*)(const void*, const char*)>("gguf_find_key")(ctx, k); }
  uint32_t u32(const char* k) const {
    int64_t id = find_key(k);
    if (id < 0) throw std::runtime_error(std::string("ggml: no key ") + k);
    return ggml_fn<uint32_t (*)(const void*, int64_t)>("gguf_get_val_u32")(ctx, id);
  }
  size_t arr_n(const char* k) const {
    int64_t id = find_key(k);
    if (id < 0) throw std::runtime_error(std::string("ggml: no key ") + k);
    return ggml_fn<size_t (*)(const void*, int64_t)>("gguf_get_arr_n")(ctx, id);
  }
};

}  // namespace ds4::test
