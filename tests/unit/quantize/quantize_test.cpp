// ds4-gguf quantize's library path on the demo model (real trained weights, Q8_0/F16 sources):
// every re-quantized tensor equals, byte for byte, what ggml's own decoder + ggml_quantize_chunk
// (libggml-base.so of llama.cpp v0.5.0) make of the same source rows with the same per-expert
// importance weights; --reuse gives the full run's bytes and recomputes only what changed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/ggml_lib.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "quantize/quantize.h"

using namespace ds4;
using namespace ds4::quantize;
namespace fs = std::filesystem;

namespace {

const std::string kDemo = std::string(DS4_SOURCE_DIR) + "/models/ds4-demo.gguf";

std::string tmp(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ds4_quantize_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// Several encoder families, Q8_0 and F16 sources, 2-D and 3-D (per-expert) tensors.
const char* kRecipe =
    "* keep\n"
    "blk.*.ffn_gate_exps.weight iq2_xxs\n"
    "blk.*.ffn_up_exps.weight   q2_K\n"
    "blk.*.ffn_down_exps.weight q4_0\n"
    "blk.*.attn_q_b.weight      q4_K\n"
    "blk.*.attn_kv.weight       q6_K\n"
    "blk.*.attn_output_b.weight q3_K   layers=0-1\n"
    "blk.*.attn_output_b.weight q5_K   layers=last:2\n"
    "blk.*.ffn_gate_inp.weight  q8_0\n"     // F16 source
    "blk.*.ffn_up_shexp.weight  iq4_nl\n"
    "output.weight              iq4_xs\n";

// An imatrix with random sums for some of the recipe's tensors (experts with count 0 included,
// which llama-quantize turns into all-ones weights), none for others.
Imatrix random_imatrix(const gguf::File& f, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 50.0f);
  Imatrix m;
  m.datasets = {"random"};
  m.chunk_count = 1;
  m.chunk_size = 64;
  for (const auto& t : f.tensors()) {
    const bool want = t.name.find("_exps.") != std::string::npos || t.name.find("attn_q_b") != std::string::npos ||
                      t.name.find("ffn_up_shexp") != std::string::npos || t.name == "output.weight";
    if (!want) continue;
    ImatrixEntry e;
    e.ne0 = static_cast<int64_t>(t.ne[0]);
    const int64_t nmat = t.ne.size() == 3 ? static_cast<int64_t>(t.ne[2]) : 1;
    for (int64_t i = 0; i < e.ne0 * nmat; ++i) e.sums.push_back(u(rng));
    for (int64_t i = 0; i < nmat; ++i) e.counts.push_back(i == 3 ? 0 : 1 + static_cast<int>(rng() % 100));
    m.entries[t.name] = e;
  }
  return m;
}

using Chunk = size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t, const float*);
using Rows = void (*)(const void*, float*, int64_t);

// ggml's encoding of one source tensor under `to`, per expert with its imatrix slice.
std::vector<uint8_t> ggml_encode(const gguf::TensorInfo& t, GgmlType to, const Imatrix* im) {
  static auto chunk = test::ggml_fn<Chunk>("ggml_quantize_chunk");
  static auto deq_q8 = test::ggml_fn<Rows>("dequantize_row_q8_0");
  static auto deq_f16 = test::ggml_fn<Rows>("ggml_fp16_to_fp32_row");
  const int64_t ne0 = static_cast<int64_t>(t.ne[0]), rows = static_cast<int64_t>(t.ne[1]);
  const int64_t nmat = t.ne.size() == 3 ? static_cast<int64_t>(t.ne[2]) : 1;
  const size_t src_rb = row_bytes(traits(t.type), ne0), dst_rb = row_bytes(traits(to), ne0);
  std::vector<float> f(static_cast<size_t>(rows * ne0));
  std::vector<uint8_t> out(dst_rb * rows * nmat);
  for (int64_t m = 0; m < nmat; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* src = t.data + (m * rows + r) * src_rb;
      if (t.type == GgmlType::Q8_0) deq_q8(src, f.data() + r * ne0, ne0);
      else if (t.type == GgmlType::F16) deq_f16(src, f.data() + r * ne0, ne0);
      else throw std::runtime_error("unexpected source type");
    }
    std::vector<float> w;
    auto it = im ? im->entries.find(t.name) : decltype(im->entries.end()){};
    if (im && it != im->entries.end()) {
      const float count = static_cast<float>(it->second.counts[m]);
      w.assign(ne0, 1.0f);
      if (count > 0)
        for (int64_t j = 0; j < ne0; ++j) w[j] = static_cast<float>(it->second.sums[m * ne0 + j]) / count;
    } else if (to == GgmlType::IQ2_XXS) {
      w.assign(ne0, 1.0f);  // convert-hf's choice when there is no imatrix (ggml requires one)
    }
    const size_t n = chunk(static_cast<int>(to), f.data(), out.data() + m * rows * dst_rb, 0, rows, ne0,
                           w.empty() ? nullptr : w.data());
    if (n != rows * dst_rb) throw std::runtime_error("ggml_quantize_chunk wrote an unexpected size");
  }
  return out;
}

void expect_ggml_bytes(const std::string& out, const Imatrix* im, size_t expect_quantized) {
  auto src = gguf::File::open(kDemo);
  auto q = gguf::File::open(out);
  size_t quantized = 0;
  for (const auto& t : src.tensors()) {
    const auto* o = q.find_tensor(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    ASSERT_EQ(o->ne, t.ne) << t.name;
    if (o->type == t.type) {
      EXPECT_EQ(0, std::memcmp(o->data, t.data, t.n_bytes)) << t.name << " was to be copied";
      continue;
    }
    ++quantized;
    const auto want = ggml_encode(t, o->type, im);
    ASSERT_EQ(want.size(), o->n_bytes) << t.name;
    EXPECT_EQ(0, std::memcmp(want.data(), o->data, want.size()))
        << t.name << " (" << traits(t.type).name << " -> " << traits(o->type).name << ") differs from ggml";
  }
  EXPECT_EQ(quantized, expect_quantized);
}

QuantizeOptions opts(const std::string& recipe_text) {
  QuantizeOptions o;
  o.recipe = parse_recipe(recipe_text, "test");
  o.threads = 2;
  return o;
}

}  // namespace

TEST(Quantize, ByteIdenticalToGgmlWithoutImatrix) {
  const std::string out = tmp("plain.gguf");
  auto rep = quantize_file(kDemo, out, opts(kRecipe));
  // 6 layers x (3 expert tensors + q_b + kv + gate_inp + up_shexp) + 4 output_b + output.
  EXPECT_EQ(rep.quantized, 6u * 7 + 4 + 1);
  EXPECT_EQ(rep.with_imatrix, 0u);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  expect_ggml_bytes(out, nullptr, rep.quantized);
}

TEST(Quantize, ByteIdenticalToGgmlWithImatrixPerExpert) {
  auto src = gguf::File::open(kDemo);
  const std::string ip = tmp("random.imatrix.gguf");
  write_imatrix(ip, random_imatrix(src, 7));
  QuantizeOptions o = opts(kRecipe);
  o.imatrix = read_imatrix(ip);  // through the file, as the CLI does
  o.imatrix_path = ip;
  const std::string out = tmp("imx.gguf");
  auto rep = quantize_file(kDemo, out, o);
  EXPECT_EQ(rep.with_imatrix, 6u * 5 + 1);  // 3 expert tensors, q_b, up_shexp per layer, output
  expect_ggml_bytes(out, &*o.imatrix, rep.quantized);
  // The imatrix changes the bytes (otherwise the test above would prove nothing about slices).
  const std::string plain = tmp("plain2.gguf");
  quantize_file(kDemo, plain, opts(kRecipe));
  auto a = gguf::File::open(out), b = gguf::File::open(plain);
  const auto* ta = a.find_tensor("blk.3.ffn_down_exps.weight");
  const auto* tb = b.find_tensor("blk.3.ffn_down_exps.weight");
  EXPECT_NE(0, std::memcmp(ta->data, tb->data, ta->n_bytes));
  EXPECT_EQ(a.get_string("quantize.imatrix.file"), ip);
}

TEST(Quantize, UniformWeightsAreGgmlsWeightedSearchWithOnes) {
  // --uniform-weights: every re-quantized tensor equals ggml_quantize_chunk with an all-ones
  // importance vector (ggml ignores it for Q8_0), and differs from the reference rounding.
  auto src = gguf::File::open(kDemo);
  Imatrix ones;
  for (const auto& t : src.tensors()) {
    if (t.ne.size() < 2 || t.type == GgmlType::I32) continue;
    ImatrixEntry e;
    e.ne0 = static_cast<int64_t>(t.ne[0]);
    const int64_t nmat = t.ne.size() == 3 ? static_cast<int64_t>(t.ne[2]) : 1;
    e.sums.assign(static_cast<size_t>(e.ne0 * nmat), 1.0);
    e.counts.assign(static_cast<size_t>(nmat), 1.0);
    ones.entries[t.name] = e;
  }
  QuantizeOptions o = opts(kRecipe);
  o.uniform_weights = true;
  const std::string out = tmp("uniform.gguf"), plain = tmp("plain3.gguf");
  auto rep = quantize_file(kDemo, out, o);
  EXPECT_EQ(rep.with_imatrix, 0u);
  expect_ggml_bytes(out, &ones, rep.quantized);
  quantize_file(kDemo, plain, opts(kRecipe));
  auto a = gguf::File::open(out), b = gguf::File::open(plain);
  for (const char* n : {"blk.3.ffn_up_exps.weight", "blk.3.ffn_down_exps.weight"}) {
    const auto* ta = a.find_tensor(n);
    const auto* tb = b.find_tensor(n);
    EXPECT_NE(0, std::memcmp(ta->data, tb->data, ta->n_bytes)) << n;  // Q2_K, Q4_0: weighted search
  }
  const auto* ga = a.find_tensor("blk.3.ffn_gate_exps.weight");  // IQ2_XXS: all ones either way
  const auto* gb = b.find_tensor("blk.3.ffn_gate_exps.weight");
  EXPECT_EQ(0, std::memcmp(ga->data, gb->data, ga->n_bytes));
}

TEST(Quantize, ReuseIsByteIdenticalAndRecomputesOnlyChanges) {
  const std::string old = tmp("old.gguf"), full = tmp("full.gguf"), reused = tmp("reused.gguf");
  quantize_file(kDemo, old, opts(kRecipe));
  const std::string changed = std::string(kRecipe) + "blk.*.ffn_gate_exps.weight q4_K layers=2\n";
  auto rf = quantize_file(kDemo, full, opts(changed));
  QuantizeOptions o = opts(changed);
  o.reuse_path = old;
  auto rr = quantize_file(kDemo, reused, o);
  EXPECT_EQ(rr.quantized, 1u);
  EXPECT_EQ(rr.reused, rr.tensors - 1);
  EXPECT_EQ(rf.quantized, 6u * 7 + 4 + 1);
  EXPECT_EQ(slurp(full), slurp(reused));
  auto f = gguf::File::open(reused);
  EXPECT_EQ(f.find_tensor("blk.2.ffn_gate_exps.weight")->type, GgmlType::Q4_K);

  // An imatrix slice change recomputes exactly the tensors whose weights changed.
  auto src = gguf::File::open(kDemo);
  Imatrix im = random_imatrix(src, 1);
  QuantizeOptions a = opts(kRecipe);
  a.imatrix = im;
  const std::string with_a = tmp("with_a.gguf");
  quantize_file(kDemo, with_a, a);
  im.entries["blk.4.ffn_up_exps.weight"].sums[5] += 1.0;
  QuantizeOptions b = opts(kRecipe);
  b.imatrix = im;
  b.reuse_path = with_a;
  const std::string with_b = tmp("with_b.gguf"), with_b_full = tmp("with_b_full.gguf");
  auto rb = quantize_file(kDemo, with_b, b);
  EXPECT_EQ(rb.quantized, 1u);
  b.reuse_path.clear();
  quantize_file(kDemo, with_b_full, b);
  EXPECT_EQ(slurp(with_b), slurp(with_b_full));
}

TEST(Quantize, BadInput) {
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string out = tmp("bad.gguf");
  // A recipe naming a tensor the model lacks.
  EXPECT_NE(error_of([&] { quantize_file(kDemo, out, opts("* keep\nblk.0.ffn_gate_expz.weight q4_K\n")); })
                .find("unknown tensor 'blk.0.ffn_gate_expz.weight'"),
            std::string::npos);
  // A type the rows cannot take (routed experts: no silent fallback).
  EXPECT_NE(error_of([&] { quantize_file(kDemo, out, opts("* keep\nblk.*.ffn_down_exps.weight q2_K\n")); })
                .find("ne0 = 128"),
            std::string::npos);
  // An imatrix of another shape (another model's), and no output left behind.
  Imatrix im;
  im.datasets = {"x"};
  ImatrixEntry e;
  e.ne0 = 512;
  e.sums.assign(512 * 8, 1.0);
  e.counts.assign(8, 1.0);
  im.entries["blk.0.ffn_up_exps.weight"] = e;
  QuantizeOptions o = opts(kRecipe);
  o.imatrix = im;
  EXPECT_NE(error_of([&] { quantize_file(kDemo, out, o); }).find("an imatrix of another model"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  // --reuse of a file that has no hashes.
  QuantizeOptions r = opts(kRecipe);
  r.reuse_path = kDemo;
  EXPECT_NE(error_of([&] { quantize_file(kDemo, out, r); }).find("nothing can be reused"), std::string::npos);
}
