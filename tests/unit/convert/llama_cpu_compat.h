#pragma once
// llama.cpp v0.5.0's CPU backend cannot run a deepseek4 GGUF whose attn_output_a (the grouped
// low-rank output projection) is not F32: context creation aborts with
// "GGML_ASSERT(*cur_backend_id != -1)" in ggml_backend_sched_split_graph, for F16, Q8_0 and
// every quantized type alike (found by converting one tensor family at a time; every other
// tensor may be F16 or quantized). To compare logits with llama.cpp on quantized files, the
// tests run both engines on a copy whose attn_output_a tensors are decoded to F32 (with our
// decoders, bit-exact with ggml's: tests/unit/quant*), everything else unchanged.
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quant/quant.h"

namespace ds4::test {

// Copies `in` to `out` with every non-F32, non-I32 tensor whose name contains `pattern` decoded
// to F32 (an empty pattern decodes the whole file).
inline void with_f32_tensors(const std::string& in, const std::string& out, const std::string& pattern) {
  const auto f = gguf::File::open(in);
  gguf::Writer w(out);
  for (const auto& kv : f.metadata()) w.add_kv(kv.key, kv.value);
  auto decode = [&pattern](const gguf::TensorInfo& t) {
    return t.type != GgmlType::F32 && t.type != GgmlType::I32 && t.name.find(pattern) != std::string::npos;
  };
  for (const auto& t : f.tensors()) w.add_tensor(t.name, decode(t) ? GgmlType::F32 : t.type, t.ne);
  w.write_header();
  for (const auto& t : f.tensors()) {
    if (!decode(t)) {
      w.write_tensor_data({t.data, t.n_bytes});
      continue;
    }
    std::vector<float> v(t.n_elements());
    const uint64_t rows = t.n_elements() / t.ne[0], rb = t.n_bytes / rows;
    for (uint64_t r = 0; r < rows; ++r)
      quant::dequantize_row(t.type, t.data + r * rb, v.data() + r * t.ne[0], static_cast<int64_t>(t.ne[0]));
    w.write_tensor_data({reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4});
  }
  w.finish();
}

inline void with_f32_attn_output_a(const std::string& in, const std::string& out) {
  with_f32_tensors(in, out, "attn_output_a.weight");
}

}  // namespace ds4::test
