#pragma once
// Loads llama.cpp v0.5.0's prebuilt libggml-base.so (npm @node-llama-cpp/linux-x64@3.22.1,
// installed by scripts/setup.sh) with dlopen, so tests can call ggml's own codecs and GGUF
// reader as an independent oracle. Nothing from it is linked into DwarfStar itself.
#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace ds4::test {

inline std::string ggml_lib_dir() {
  return std::string(DS4_NPM_DIR) + "/@node-llama-cpp/linux-x64/bins/linux-x64";
}

inline void* ggml_base_handle() {
  static void* handle = [] {
    std::string path = ggml_lib_dir() + "/libggml-base.so";
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw std::runtime_error("cannot dlopen " + path + ": " + dlerror() + " (run scripts/setup.sh)");
    return h;
  }();
  return handle;
}

// Typed symbol lookup: auto f = ggml_fn<void (*)(const void*, float*, int64_t)>("dequantize_row_q8_0");
template <class Fn>
Fn ggml_fn(const char* name) {
  void* p = dlsym(ggml_base_handle(), name);
  if (!p) throw std::runtime_error(std::string("libggml-base.so has no symbol ") + name);
  return reinterpret_cast<Fn>(p);
}

}  // namespace ds4::test
