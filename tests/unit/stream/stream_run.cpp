#include "stream_run.h"

#include <cstring>
#include <span>

#include "compute/backend.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"

namespace ds4::test {

int32_t argmax(const float* v, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[b]) b = i;
  return static_cast<int32_t>(b);
}

StreamRun run_deepseek4(const std::string& path, const model::deepseek4::Options& o, const std::vector<int32_t>& toks,
                        int steps) {
  auto m = model::deepseek4::Model::from_file(gguf::File::open(path), o);
  ThreadPool pool(2);
  auto be = compute::make_cpu_backend(&pool);
  m->register_weights(*be);
  const int64_t V = m->hparams().n_vocab;
  StreamRun r;
  r.prefill.resize(toks.size() * static_cast<size_t>(V));
  auto st = m->new_state(*be, static_cast<int64_t>(toks.size()) + steps + 1);
  m->eval(*be, st, toks, r.prefill.data());
  int32_t next = argmax(r.prefill.data() + (toks.size() - 1) * V, V);
  for (int s = 0; s < steps; ++s) {
    r.greedy.push_back(next);
    std::vector<float> lg(static_cast<size_t>(V));
    m->eval(*be, st, std::span(&next, 1), lg.data());
    r.decode.insert(r.decode.end(), lg.begin(), lg.end());
    next = argmax(lg.data(), V);
  }
  return r;
}

bool same_bits(const StreamRun& a, const StreamRun& b) {
  return a.prefill.size() == b.prefill.size() && a.decode.size() == b.decode.size() && a.greedy == b.greedy &&
         std::memcmp(a.prefill.data(), b.prefill.data(), a.prefill.size() * sizeof(float)) == 0 &&
         std::memcmp(a.decode.data(), b.decode.data(), a.decode.size() * sizeof(float)) == 0;
}

}  // namespace ds4::test
