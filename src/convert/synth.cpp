// Synthetic Flash-layout GGUF writer. Each tensor's bytes come from its own random stream
// (seed x tensor index), so a tensor's content does not depend on which others are holes.
#include "convert/synth.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "convert/hf_config.h"
#include "convert/metadata.h"
#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf.h"

namespace ds4::convert {

namespace {

// splitmix64: small, fast, and good enough for test data.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  // Irwin-Hall(4) approximation of a standard normal: cheap, bounded, unit variance.
  float normal() { return (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7320508f; }
};

void put_f16(uint8_t* p, float x) {
  uint16_t h = fp32_to_fp16(x);
  std::memcpy(p, &h, 2);
}

// Fills `rows` rows of a tensor of plan `p` into out.
void fill_rows(const TensorPlan& p, uint64_t rows, Rng& rng, std::vector<uint8_t>& out, const ModelShape& s) {
  const uint64_t ne0 = p.ne[0];
  const auto& tr = traits(p.type);
  const size_t rb = row_bytes(tr, ne0);
  out.resize(rb * rows);
  const float std_w = 1.0f / std::sqrt(static_cast<float>(ne0));
  switch (p.type) {
    case GgmlType::F32: {
      const bool norm = p.name.find("norm") != std::string::npos;
      const bool scale = p.name.find("_scale") != std::string::npos;
      for (uint64_t i = 0; i < rows * ne0; ++i) {
        float v = norm ? 1.0f + 0.1f * rng.normal() : scale ? 0.5f + rng.uniform() : 0.5f * rng.normal();
        std::memcpy(out.data() + 4 * i, &v, 4);
      }
      return;
    }
    case GgmlType::F16:
      for (uint64_t i = 0; i < rows * ne0; ++i) put_f16(out.data() + 2 * i, std_w * rng.normal());
      return;
    case GgmlType::I32: {
      // tid2eid: each row (token) lists n_experts_used distinct experts (partial Fisher-Yates).
      std::vector<int32_t> perm(s.n_experts);
      for (uint64_t r = 0; r < rows; ++r) {
        std::iota(perm.begin(), perm.end(), 0);
        for (uint64_t k = 0; k < ne0; ++k) {
          uint64_t j = k + rng.next() % (s.n_experts - k);
          std::swap(perm[k], perm[j]);
          std::memcpy(out.data() + 4 * (r * ne0 + k), &perm[k], 4);
        }
      }
      return;
    }
    default:
      break;
  }
  // Quantized blocks: random payload, then sane f16 scales (spec §4 field offsets).
  for (size_t i = 0; i + 8 <= out.size(); i += 8) {
    uint64_t v = rng.next();
    std::memcpy(out.data() + i, &v, 8);
  }
  for (size_t i = out.size() / 8 * 8; i < out.size(); ++i) out[i] = static_cast<uint8_t>(rng.next());
  const size_t nblocks = out.size() / tr.block_bytes;
  for (size_t b = 0; b < nblocks; ++b) {
    uint8_t* blk = out.data() + b * tr.block_bytes;
    const float jitter = 0.5f + rng.uniform();
    switch (p.type) {
      case GgmlType::Q8_0:  // {f16 d; i8 q[32]}: |q| ~ 73 rms
        put_f16(blk, jitter * std_w / 73.0f);
        break;
      case GgmlType::Q4_K:  // {f16 d; f16 dmin; scales[12]; qs[128]}
        put_f16(blk, jitter * std_w / 250.0f);
        put_f16(blk + 2, jitter * std_w / 500.0f);
        break;
      case GgmlType::Q2_K:  // {scales[16]; qs[64]; f16 d; f16 dmin}
        put_f16(blk + 80, jitter * std_w / 10.0f);
        put_f16(blk + 82, jitter * std_w / 20.0f);
        break;
      case GgmlType::IQ2_XXS:  // {f16 d; u16 qs[32]}
        put_f16(blk, jitter * std_w / 60.0f);
        break;
      default:
        fail("synth: no generator for type {}", tr.name);
    }
  }
}

bool is_expert(const TensorPlan& p) { return p.role == Role::ExpertGateUp || p.role == Role::ExpertDown; }

}  // namespace

SynthReport synth(const SynthOptions& o) {
  if (o.layers == 0) fail("synth: --layers must be at least 1");
  ModelShape shape = flash_shape(o.layers);
  std::vector<TensorPlan> plan = plan_tensors(shape, o.recipe);
  SynthReport rep;

  gguf::Writer w(o.out_path);
  add_model_metadata(w, shape);
  add_vocab_metadata(w, byte_vocab(shape.vocab), shape);
  w.add_kv("ds4.synthetic.seed", gguf::Value::u64(o.seed));
  for (const auto& p : plan) w.add_tensor(p.name, p.type, p.ne);
  w.write_header();

  std::vector<uint8_t> buf;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& p = plan[i];
    const auto& tr = traits(p.type);
    uint64_t rows = 1;
    for (size_t d = 1; d < p.ne.size(); ++d) rows *= p.ne[d];
    const uint64_t total = rows * row_bytes(tr, p.ne[0]);
    if (o.sparse == Sparse::All || (o.sparse == Sparse::Experts && is_expert(p))) {
      w.skip_tensor_data(total);
      continue;
    }
    Rng rng{o.seed * 0x100000001B3ull + i};
    const uint64_t step = std::max<uint64_t>(1, (uint64_t{1} << 24) / row_bytes(tr, p.ne[0]));  // ~16 MB
    for (uint64_t r0 = 0; r0 < rows; r0 += step) {
      const uint64_t nr = std::min(step, rows - r0);
      fill_rows(p, nr, rng, buf, shape);
      w.write_tensor_data(buf);
      rep.written_bytes += buf.size();
    }
  }
  w.finish();
  rep.n_tensors = plan.size();
  struct stat st {};
  if (::stat(o.out_path.c_str(), &st) == 0) rep.file_bytes = static_cast<uint64_t>(st.st_size);
  return rep;
}

}  // namespace ds4::convert
