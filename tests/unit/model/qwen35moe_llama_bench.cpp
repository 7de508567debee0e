// CPU speed of llama.cpp v0.5.0 (npm libllama, tests/unit/convert/llama_runner.h) on a qwen35moe
// GGUF, for docs/BENCHMARKS.md next to `ds4-bench` on the same file: a prefill of N random
// tokens in one batch, and N' tokens decoded one llama_decode call each from an empty context.
// Usage: qwen35moe_llama_bench MODEL.gguf [N=256] [N_DECODE=16] [THREADS=2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../convert/llama_runner.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: qwen35moe_llama_bench MODEL.gguf [N=256] [N_DECODE=16] [THREADS=2]\n");
    return 2;
  }
  const int n = argc > 2 ? std::atoi(argv[2]) : 256, nd = argc > 3 ? std::atoi(argv[3]) : 16;
  ds4::test::LlamaOptions lo;
  lo.n_threads = argc > 4 ? std::atoi(argv[4]) : 2;
  ds4::test::LlamaRunner llama;
  std::vector<int32_t> toks(static_cast<size_t>(n));
  uint64_t x = 1;
  for (auto& t : toks) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((x >> 33) % 256);
  }
  int32_t nv = 0;
  using C = std::chrono::steady_clock;
  // Load + context creation + one token, subtracted below (llama.cpp repacks Q4_K weights for
  // its CPU kernels at load, which takes seconds and is not inference speed).
  auto t0 = C::now();
  llama.logits(argv[1], std::vector<int32_t>(1, toks[0]), false, &nv, lo);
  const double base = std::chrono::duration<double>(C::now() - t0).count();
  t0 = C::now();
  llama.logits(argv[1], toks, false, &nv, lo);
  const double pre = std::chrono::duration<double>(C::now() - t0).count();
  toks.resize(static_cast<size_t>(nd));
  t0 = C::now();
  llama.logits(argv[1], toks, true, &nv, lo);
  const double dec = std::chrono::duration<double>(C::now() - t0).count();
  std::printf("llama.cpp: load + 1 token %.2f s; prefill %d tokens %.2f s -> %.2f t/s after load; decode %d tokens "
              "%.2f s -> %.2f t/s after load\n",
              base, n, pre, (n - 1) / (pre - base), nd, dec, (nd - 1) / (dec - base));
  return 0;
}
