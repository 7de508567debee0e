// Synthetic Flash-layout GGUF writer. Each tensor's bytes come from its own random stream
// (seed x tensor index), so a tensor's content does not depend on which others are holes.
#include "convert/synth.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "convert/hf_config.h"
#include "convert/metadata.h"
#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf.h"

namespace ds4::convert {

namespace {

// splitmix64: small, fast, and good enough for test data. Its state advances by a constant per
// draw, so the generator `n` draws ahead is Rng{s + n * kGamma} (ahead()): the chunks of one
// tensor are generated in parallel and still continue one another's stream exactly.
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
struct Rng {
  uint64_t s;
  Rng ahead(uint64_t n) const { return Rng{s + n * kGamma}; }
  uint64_t next() {
    uint64_t z = (s += kGamma);
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

// Draws fill_rows makes for `rows` rows of plan p (it must change with fill_rows).
uint64_t draws_for(const TensorPlan& p, uint64_t rows) {
  const uint64_t ne0 = p.ne[0];
  switch (p.type) {
    case GgmlType::F32: {
      const bool norm = p.name.find("norm") != std::string::npos;
      const bool scale = p.name.find("_scale") != std::string::npos;
      return rows * ne0 * (!norm && scale ? 1 : 4);  // uniform(): 1 draw, normal(): 4
    }
    case GgmlType::F16: return rows * ne0 * 4;
    case GgmlType::I32: return rows * ne0;
    default: {
      const auto& tr = traits(p.type);
      const uint64_t bytes = row_bytes(tr, ne0) * rows;
      return bytes / 8 + bytes % 8 + bytes / tr.block_bytes;
    }
  }
}

uint64_t tensor_rows(const TensorPlan& p) {
  uint64_t rows = 1;
  for (size_t d = 1; d < p.ne.size(); ++d) rows *= p.ne[d];
  return rows;
}

bool is_expert(const TensorPlan& p) { return p.role == Role::ExpertGateUp || p.role == Role::ExpertDown; }

// The generator state piece k (of `step` rows each before it) of plan p starts from.
Rng piece_rng(const TensorPlan& p, Rng first, uint64_t step, uint64_t k) { return first.ahead(k * draws_for(p, step)); }

}  // namespace

std::vector<uint8_t> synth_tensor_bytes(const TensorPlan& p, uint64_t state, uint64_t step, bool jump,
                                        const ModelShape& shape) {
  const uint64_t rows = tensor_rows(p);
  std::vector<uint8_t> all, piece;
  Rng carried{state};
  for (uint64_t r0 = 0, k = 0; r0 < rows; r0 += step, ++k) {
    Rng jumped = piece_rng(p, Rng{state}, step, k);
    fill_rows(p, std::min(step, rows - r0), jump ? jumped : carried, piece, shape);
    all.insert(all.end(), piece.begin(), piece.end());
  }
  return all;
}

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

  // The file in order as pieces: a hole, or up to ~16 MB of one tensor's rows with the generator
  // state its rows start from. Groups of pieces are generated on every core while the previous
  // group is written (one sequential writer), so the bytes are those of one generator per tensor.
  struct Piece {
    const TensorPlan* p = nullptr;
    uint64_t rows = 0, hole = 0;
    Rng rng{0};
    std::vector<uint8_t>* buf = nullptr;  // one of the two groups' buffers, reused (no fresh pages)
    std::exception_ptr error;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& p = plan[i];
    const auto& tr = traits(p.type);
    const uint64_t rows = tensor_rows(p);
    const uint64_t total = rows * row_bytes(tr, p.ne[0]);
    if (o.sparse == Sparse::All || (o.sparse == Sparse::Experts && is_expert(p))) {
      Piece hole;
      hole.p = &p;
      hole.hole = total;
      pieces.push_back(std::move(hole));
      continue;
    }
    const Rng rng{o.seed * 0x100000001B3ull + i};
    const uint64_t step = std::max<uint64_t>(1, (uint64_t{1} << 24) / row_bytes(tr, p.ne[0]));  // ~16 MB
    for (uint64_t r0 = 0, k = 0; r0 < rows; r0 += step, ++k) {
      Piece pc;
      pc.p = &p;
      pc.rows = std::min(step, rows - r0);
      pc.rng = piece_rng(p, rng, step, k);
      pieces.push_back(std::move(pc));
    }
  }
  const size_t group = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  std::vector<std::vector<uint8_t>> bufs(2 * group);  // group g's pieces use half g % 2
  auto generate = [&](size_t a, size_t b) {
    std::vector<std::thread> th;
    for (size_t k = a; k < b; ++k) {
      if (pieces[k].hole) continue;
      pieces[k].buf = &bufs[(a / group) % 2 * group + (k - a)];
      auto work = [&pc = pieces[k], &shape] {
        try {
          fill_rows(*pc.p, pc.rows, pc.rng, *pc.buf, shape);
        } catch (...) {
          pc.error = std::current_exception();
        }
      };
      try {
        th.emplace_back(work);
      } catch (...) {
        work();  // no thread to be had: generate it here
      }
    }
    for (auto& t : th) t.join();
  };
  std::future<void> next = std::async(std::launch::async, generate, 0, std::min(group, pieces.size()));
  for (size_t a = 0; a < pieces.size(); a += group) {
    next.get();
    const size_t b = std::min(a + group, pieces.size());
    if (b < pieces.size()) next = std::async(std::launch::async, generate, b, std::min(b + group, pieces.size()));
    for (size_t k = a; k < b; ++k) {
      Piece& pc = pieces[k];
      if (pc.error) {
        if (next.valid()) next.wait();  // its threads reference `pieces`
        std::rethrow_exception(pc.error);
      }
      if (pc.hole) {
        w.skip_tensor_data(pc.hole);
        continue;
      }
      w.write_tensor_data(*pc.buf);
      rep.written_bytes += pc.buf->size();
    }
  }
  w.finish();
  rep.n_tensors = plan.size();
  struct stat st {};
  if (::stat(o.out_path.c_str(), &st) == 0) rep.file_bytes = static_cast<uint64_t>(st.st_size);
  return rep;
}

}  // namespace ds4::convert
