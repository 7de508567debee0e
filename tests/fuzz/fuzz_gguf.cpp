// libFuzzer entry for the GGUF reader. Run (after `make fuzz`):
//   build-fuzz/fuzz/fuzz_gguf -max_total_time=60 CORPUS_DIR tests/fixtures/gguf
// Every input must be rejected with ds4::Error or accepted with all tensor bytes readable
// (ASan checks each read) and every metadata key reachable through find().
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = ds4::gguf::File::parse({data, size}, "fuzz");
    uint64_t sum = 0;
    for (const auto& t : f.tensors()) {
      if (t.data < data || t.n_bytes > size || t.data + t.n_bytes > data + size) std::abort();
      for (uint64_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];
    }
    for (const auto& kv : f.metadata()) {
      if (f.find(kv.key) != &kv.value) std::abort();
      try {
        (void)f.get_float_array(kv.key);
      } catch (const ds4::Error&) {
      }
    }
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const ds4::Error&) {
  }
  return 0;
}
