// convert-hf round trips on the committed transformers fixtures. The expected values come from
// the safetensors file read here with a few lines of independent code (not the converter's
// reader), mapped by a name table written from spec §3; the GGUF side is read back with our
// GGUF reader and cross-checked with llama.cpp's own (libggml-base) reader.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "convert/convert_hf.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "ggml_gguf.h"

namespace fs = std::filesystem;
using ds4::GgmlType;

namespace {

std::string fixture(const std::string& name) { return std::string(DS4_FIXTURES_DIR) + "/deepseek4/" + name; }

fs::path temp_dir() {
  fs::path p = fs::temp_directory_path() / ("ds4_convert_test_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Minimal independent safetensors reading: F32 and I64 only (what the fixtures hold).
struct HfTensor {
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<float> f;
  std::vector<int64_t> i;
};

std::map<std::string, HfTensor> read_hf(const std::string& path) {
  auto bytes = slurp(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  auto header = nlohmann::json::parse(std::string(bytes.begin() + 8, bytes.begin() + 8 + n));
  const uint8_t* data = bytes.data() + 8 + n;
  std::map<std::string, HfTensor> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    HfTensor t;
    t.dtype = it.value()["dtype"];
    t.shape = it.value()["shape"].get<std::vector<uint64_t>>();
    uint64_t b = it.value()["data_offsets"][0], e = it.value()["data_offsets"][1];
    if (t.dtype == "F32") {
      t.f.resize((e - b) / 4);
      std::memcpy(t.f.data(), data + b, e - b);
    } else if (t.dtype == "I64") {
      t.i.resize((e - b) / 8);
      std::memcpy(t.i.data(), data + b, e - b);
    } else {
      ADD_FAILURE() << "fixture dtype " << t.dtype;
    }
    out[it.key()] = std::move(t);
  }
  return out;
}

// GGUF name -> the HF name transformers 5.17 save_pretrained gives it (spec §3 HF column with
// "model." prefixes). For expert tensors, "{e}" stands for the expert index.
std::string hf_name_for(const std::string& gguf) {
  static const std::map<std::string, std::string> global = {
      {"token_embd.weight", "model.embed_tokens.weight"}, {"output.weight", "head.weight"},
      {"output_norm.weight", "model.norm.weight"},        {"output_hc_fn.weight", "model.hc_head.hc_fn"},
      {"output_hc_base.weight", "model.hc_head.hc_base"}, {"output_hc_scale.weight", "model.hc_head.hc_scale"},
  };
  static const std::map<std::string, std::string> layer = {
      {"hc_attn_fn.weight", "hc_attn_fn"},
      {"hc_attn_base.weight", "hc_attn_base"},
      {"hc_attn_scale.weight", "hc_attn_scale"},
      {"hc_ffn_fn.weight", "hc_ffn_fn"},
      {"hc_ffn_base.weight", "hc_ffn_base"},
      {"hc_ffn_scale.weight", "hc_ffn_scale"},
      {"attn_norm.weight", "attn_norm.weight"},
      {"ffn_norm.weight", "ffn_norm.weight"},
      {"attn_q_a.weight", "attn.wq_a.weight"},
      {"attn_q_a_norm.weight", "attn.q_norm.weight"},
      {"attn_q_b.weight", "attn.wq_b.weight"},
      {"attn_kv.weight", "attn.wkv.weight"},
      {"attn_kv_a_norm.weight", "attn.norm.weight"},
      {"attn_sinks.weight", "attn.attn_sink"},
      {"attn_output_a.weight", "attn.wo_a.weight"},
      {"attn_output_b.weight", "attn.wo_b.weight"},
      {"attn_compressor_ape.weight", "attn.compressor.ape"},
      {"attn_compressor_kv.weight", "attn.compressor.wkv.weight"},
      {"attn_compressor_gate.weight", "attn.compressor.wgate.weight"},
      {"attn_compressor_norm.weight", "attn.compressor.norm.weight"},
      {"indexer.attn_q_b.weight", "attn.indexer.wq_b.weight"},
      {"indexer.proj.weight", "attn.indexer.weights_proj.weight"},
      {"indexer_compressor_ape.weight", "attn.indexer.compressor.ape"},
      {"indexer_compressor_kv.weight", "attn.indexer.compressor.wkv.weight"},
      {"indexer_compressor_gate.weight", "attn.indexer.compressor.wgate.weight"},
      {"indexer_compressor_norm.weight", "attn.indexer.compressor.norm.weight"},
      {"ffn_gate_inp.weight", "ffn.gate.weight"},
      {"exp_probs_b.bias", "ffn.gate.bias"},
      {"ffn_gate_tid2eid.weight", "ffn.gate.tid2eid"},
      {"ffn_gate_exps.weight", "ffn.experts.{e}.w1.weight"},
      {"ffn_up_exps.weight", "ffn.experts.{e}.w3.weight"},
      {"ffn_down_exps.weight", "ffn.experts.{e}.w2.weight"},
      {"ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight"},
      {"ffn_up_shexp.weight", "ffn.shared_experts.w3.weight"},
      {"ffn_down_shexp.weight", "ffn.shared_experts.w2.weight"},
  };
  if (auto it = global.find(gguf); it != global.end()) return it->second;
  EXPECT_EQ(gguf.rfind("blk.", 0), 0u) << gguf;
  size_t dot = gguf.find('.', 4);
  std::string il = gguf.substr(4, dot - 4), suffix = gguf.substr(dot + 1);
  auto it = layer.find(suffix);
  if (it == layer.end()) {
    ADD_FAILURE() << "unexpected GGUF tensor " << gguf;
    return "";
  }
  return "model.layers." + il + "." + it->second;
}

std::string with_expert(std::string s, uint64_t e) {
  size_t p = s.find("{e}");
  if (p != std::string::npos) s.replace(p, 3, std::to_string(e));
  return s;
}

float f16_to_f32(uint16_t h) {
  float out;
  ds4::test::ggml_fn<void (*)(const uint16_t*, float*, int64_t)>("ggml_fp16_to_fp32_row")(&h, &out, 1);
  return out;
}

// Decodes n values of row data with ggml's own routines (independent of ds4::quant).
std::vector<float> ggml_decode(GgmlType t, const uint8_t* p, int64_t n) {
  std::vector<float> out(n);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(out.data(), p, n * 4);
      break;
    case GgmlType::F16:
      ds4::test::ggml_fn<void (*)(const void*, float*, int64_t)>("ggml_fp16_to_fp32_row")(p, out.data(), n);
      break;
    case GgmlType::Q8_0:
      ds4::test::ggml_fn<void (*)(const void*, float*, int64_t)>("dequantize_row_q8_0")(p, out.data(), n);
      break;
    default:
      ADD_FAILURE() << "no decoder for type " << static_cast<int>(t);
  }
  return out;
}

// Allowed |decoded - original| for one value of type t, given the block's max |value|.
// F32: exact. F16: round-to-nearest, relative 2^-11 (+ subnormal step 2^-25).
// Q8_0: d = amax/127 rounded to f16, q = round(x/d): error <= d/2 plus |q|*|d error| <= amax*(1/254 + 2^-11).
double tolerance(GgmlType t, float x, float block_amax) {
  switch (t) {
    case GgmlType::F32: return 0.0;
    case GgmlType::F16: return std::fabs(x) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
    case GgmlType::Q8_0: return block_amax * (1.0 / 254 + std::ldexp(1.0, -11) + 1e-6) + 1e-12;
    default: return 0.0;
  }
}

struct CheckStats {
  size_t tensors = 0;
  size_t values = 0;
  std::set<std::string> hf_used;
};

// Checks every tensor of `gguf_path` against the HF fixture `name`.
void check_against_hf(const std::string& name, const std::string& gguf_path, CheckStats& st) {
  auto hf = read_hf(fixture(name) + "/model.safetensors");
  auto f = ds4::gguf::File::open(gguf_path);
  for (const auto& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    const std::string pattern = hf_name_for(t.name);
    const bool expert = t.ne.size() == 3;
    const uint64_t slabs = expert ? t.ne[2] : 1;
    const uint64_t ne0 = t.ne[0];
    const uint64_t rows = t.ne.size() >= 2 ? t.ne[1] : 1;
    const auto& tr = ds4::traits(t.type);
    const size_t rb = ds4::row_bytes(tr, ne0);
    for (uint64_t e = 0; e < slabs; ++e) {
      const std::string hname = with_expert(pattern, e);
      auto it = hf.find(hname);
      if (it == hf.end()) {
        ADD_FAILURE() << "no HF tensor " << hname;
        continue;
      }
      const HfTensor& h = it->second;
      EXPECT_TRUE(st.hf_used.insert(hname).second) << hname << " used twice";
      // HF [out, in] is GGUF [in, out]: same bytes order, reversed dims.
      std::vector<uint64_t> want(t.ne.rbegin() + (expert ? 1 : 0), t.ne.rend());
      ASSERT_EQ(h.shape, want) << hname;
      if (t.type == GgmlType::I32) {
        ASSERT_EQ(h.dtype, "I64");
        for (size_t k = 0; k < h.i.size(); ++k) {
          int32_t v;
          std::memcpy(&v, t.data + 4 * k, 4);
          ASSERT_EQ(v, h.i[k]) << "element " << k;
        }
        st.values += h.i.size();
        continue;
      }
      ASSERT_EQ(h.dtype, "F32");
      for (uint64_t r = 0; r < rows; ++r) {
        const uint8_t* row = t.data + (e * rows + r) * rb;
        auto dec = ggml_decode(t.type, row, static_cast<int64_t>(ne0));
        for (uint64_t c = 0; c < ne0; c += tr.block_elems) {
          float amax = 0;
          for (uint64_t k = c; k < c + tr.block_elems; ++k) amax = std::max(amax, std::fabs(h.f[r * ne0 + k]));
          for (uint64_t k = c; k < c + tr.block_elems; ++k) {
            const float x = h.f[r * ne0 + k];
            const double tol = tolerance(t.type, x, amax);
            if (!(std::fabs(dec[k] - x) <= tol)) {
              ADD_FAILURE() << hname << " row " << r << " col " << k << ": " << dec[k] << " vs " << x << " (tol " << tol
                            << ")";
              return;
            }
          }
        }
      }
      st.values += h.f.size();
    }
    ++st.tensors;
  }
  for (const auto& [n, _] : hf) EXPECT_TRUE(st.hf_used.count(n)) << "HF tensor " << n << " not in the GGUF";
}

// llama.cpp's reader must accept the file and see the same table.
void check_with_ggml(const std::string& gguf_path) {
  auto ours = ds4::gguf::File::open(gguf_path);
  ds4::test::GgmlGguf g(gguf_path);
  ASSERT_TRUE(g.ok()) << "libggml-base gguf_init_from_file rejected " << gguf_path;
  ASSERT_EQ(g.n_tensors(), static_cast<int64_t>(ours.tensors().size()));
  EXPECT_EQ(g.data_offset(), ours.data_offset());
  for (int64_t i = 0; i < g.n_tensors(); ++i) {
    const auto& t = ours.tensors()[i];
    EXPECT_EQ(g.tensor_name(i), t.name);
    EXPECT_EQ(g.tensor_type(i), static_cast<int>(t.type)) << t.name;
    EXPECT_EQ(g.tensor_offset(i), t.offset) << t.name;
    EXPECT_EQ(g.tensor_size(i), t.n_bytes) << t.name;
  }
  const uint32_t blocks = g.u32("deepseek4.block_count");
  EXPECT_EQ(g.arr_n("deepseek4.swiglu_clamp_exp"), blocks);  // llama.cpp needs exactly block_count
  EXPECT_EQ(g.u32("deepseek4.expert_gating_func"), 4u);
  EXPECT_EQ(g.arr_n("tokenizer.ggml.tokens"), g.u32("deepseek4.vocab_size"));
}

class ConvertRoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(ConvertRoundTrip, F32ConversionIsExact) {
  const std::string name = GetParam();
  const std::string out = (temp_dir() / (name + "_f32.gguf")).string();
  ds4::convert::ConvertOptions o;
  o.hf_dir = fixture(name);
  o.out_path = out;
  o.recipe = ds4::convert::Recipe::F32;
  auto rep = ds4::convert::convert_hf(o);
  CheckStats st;
  check_against_hf(name, out, st);
  EXPECT_EQ(st.tensors, rep.n_tensors);
  EXPECT_GT(st.values, 0u);
  check_with_ggml(out);
  fs::remove(out);
}

TEST_P(ConvertRoundTrip, Q8_0ConversionWithinQuantizationError) {
  const std::string name = GetParam();
  const std::string out = (temp_dir() / (name + "_q8.gguf")).string();
  ds4::convert::ConvertOptions o;
  o.hf_dir = fixture(name);
  o.out_path = out;
  o.recipe = ds4::convert::Recipe::Q8_0;
  ds4::convert::convert_hf(o);
  CheckStats st;
  check_against_hf(name, out, st);
  EXPECT_EQ(st.hf_used.size(), read_hf(fixture(name) + "/model.safetensors").size());
  check_with_ggml(out);
  auto f = ds4::gguf::File::open(out);
  // Q8_0 needs rows of a multiple of 32; swa_tiny's q_lora_rank 16 keeps attn_q_b in F16.
  const auto* qb = f.find_tensor("blk.0.attn_q_b.weight");
  EXPECT_EQ(qb->type, qb->ne[0] % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16);
  EXPECT_EQ(f.find_tensor("blk.0.attn_kv.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_exps.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.0.hc_attn_fn.weight")->type, GgmlType::F16);
  EXPECT_EQ(f.find_tensor("blk.0.attn_norm.weight")->type, GgmlType::F32);
  fs::remove(out);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConvertRoundTrip, ::testing::Values("swa_tiny", "mixed_small", "flash_geom"));

TEST(ConvertHf, FlashGeomMetadata) {
  const std::string out = (temp_dir() / "fg_meta.gguf").string();
  ds4::convert::ConvertOptions o{fixture("flash_geom"), out, ds4::convert::Recipe::F16, 0, {}};
  ds4::convert::convert_hf(o);
  auto f = ds4::gguf::File::open(out);
  EXPECT_EQ(f.get_string("general.architecture"), "deepseek4");
  EXPECT_EQ(f.get_uint("deepseek4.block_count"), 3u);
  EXPECT_EQ(f.get_int_array("deepseek4.attention.compress_ratios"), (std::vector<int64_t>{0, 4, 128}));
  EXPECT_EQ(f.get_uint("deepseek4.hash_layer_count"), 2u);
  EXPECT_EQ(f.get_uint("deepseek4.rope.dimension_count"), 64u);
  EXPECT_EQ(f.get_uint("deepseek4.attention.key_length"), 512u);
  EXPECT_EQ(f.get_uint("deepseek4.attention.sliding_window"), 128u);
  EXPECT_EQ(f.get_uint("deepseek4.attention.indexer.top_k"), 16u);
  EXPECT_EQ(f.get_uint("deepseek4.expert_used_count"), 2u);
  EXPECT_EQ(f.get_float("deepseek4.rope.scaling.factor"), 16.0);
  EXPECT_EQ(f.get_uint("deepseek4.rope.scaling.original_context_length"), 65536u);
  EXPECT_EQ(f.get_float("deepseek4.attention.compress_rope_freq_base"), 160000.0);
  EXPECT_EQ(f.get_float("deepseek4.expert_weights_scale"), 1.5);
  EXPECT_EQ(f.get_float_array("deepseek4.swiglu_clamp_exp"), (std::vector<double>{10, 10, 10}));
  // f16 recipe: matrices F16, vectors F32, hash table I32.
  EXPECT_EQ(f.find_tensor("blk.1.attn_compressor_kv.weight")->type, GgmlType::F16);
  EXPECT_EQ(f.find_tensor("blk.1.attn_sinks.weight")->type, GgmlType::F32);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_gate_tid2eid.weight")->type, GgmlType::I32);
  EXPECT_EQ(f.find_tensor("blk.2.exp_probs_b.bias")->ne, (std::vector<uint64_t>{4}));
  EXPECT_EQ(f.find_tensor("blk.1.indexer_compressor_ape.weight")->ne, (std::vector<uint64_t>{256, 4}));
  EXPECT_EQ(f.find_tensor("blk.2.attn_compressor_ape.weight")->ne, (std::vector<uint64_t>{512, 128}));
  EXPECT_EQ(f.find_tensor("blk.0.attn_output_a.weight")->ne, (std::vector<uint64_t>{512, 64}));
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down_exps.weight")->ne, (std::vector<uint64_t>{32, 64, 4}));
  EXPECT_EQ(f.find_tensor("blk.1.exp_probs_b.bias"), nullptr);  // hash layer: no selection bias
  fs::remove(out);
}

TEST(ConvertHf, KQuantRecipeOnShortRowsFailsCleanly) {
  const std::string out = (temp_dir() / "fg_q2.gguf").string();
  ds4::convert::ConvertOptions o{fixture("flash_geom"), out, ds4::convert::Recipe::FlashQ2, 0, {}};
  try {
    ds4::convert::convert_hf(o);
    FAIL() << "flash-q2 accepted 64-wide expert rows";
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 256"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

// Writes a safetensors file from (name, dtype, shape, raw bytes) entries.
struct RawTensor {
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};
void write_safetensors(const std::string& path, const std::map<std::string, RawTensor>& ts) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [n, t] : ts) {
    h[n] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  std::ofstream out(path, std::ios::binary);
  uint64_t n = hs.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << hs;
  for (const auto& [_, t] : ts) out.write(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
}

std::map<std::string, RawTensor> raw_fixture(const std::string& name) {
  std::map<std::string, RawTensor> out;
  for (auto& [n, t] : read_hf(fixture(name) + "/model.safetensors")) {
    RawTensor r{t.dtype, t.shape, {}};
    if (t.dtype == "F32") r.bytes.assign(reinterpret_cast<const uint8_t*>(t.f.data()), reinterpret_cast<const uint8_t*>(t.f.data() + t.f.size()));
    else r.bytes.assign(reinterpret_cast<const uint8_t*>(t.i.data()), reinterpret_cast<const uint8_t*>(t.i.data() + t.i.size()));
    out[n] = std::move(r);
  }
  return out;
}

void expect_convert_error(const std::map<std::string, RawTensor>& ts, const std::string& needle) {
  fs::path dir = temp_dir() / "bad_ckpt";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fixture("swa_tiny") + "/config.json", dir / "config.json");
  write_safetensors((dir / "model.safetensors").string(), ts);
  ds4::convert::ConvertOptions o{dir.string(), (dir / "out.gguf").string(), ds4::convert::Recipe::F32, 0, {}};
  try {
    ds4::convert::convert_hf(o);
    ADD_FAILURE() << "converted a bad checkpoint; expected: " << needle;
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "out.gguf"));
}

TEST(ConvertHf, RejectsInconsistentCheckpoints) {
  auto good = raw_fixture("swa_tiny");
  {
    auto ts = good;
    ts.erase("model.layers.1.attn.wkv.weight");
    expect_convert_error(ts, "no tensor for GGUF blk.1.attn_kv.weight");
  }
  {
    auto ts = good;
    ts.erase("model.layers.0.ffn.experts.3.w2.weight");
    expect_convert_error(ts, "expert 3 of GGUF blk.0.ffn_down_exps.weight is missing");
  }
  {
    auto ts = good;
    ts["model.layers.0.ffn.gate.bias"] = RawTensor{"F32", {4}, std::vector<uint8_t>(16, 0)};  // hash layer has none
    expect_convert_error(ts, "does not belong");
  }
  {
    auto ts = good;
    ts["model.layers.1.attn.attn_sink"].shape = {1, 2};
    expect_convert_error(ts, "has shape [1, 2], expected [2]");
  }
  {
    auto ts = good;
    ts["model.layers.7.attn.attn_sink"] = good["model.layers.1.attn.attn_sink"];
    expect_convert_error(ts, "layer 7, but config.json has 2 layers");
  }
  {
    auto ts = good;
    auto& t = ts["model.layers.0.ffn.gate.tid2eid"];
    int64_t bad = 9;  // 4 experts
    std::memcpy(t.bytes.data() + 8 * 5, &bad, 8);
    expect_convert_error(ts, "= 9 is not an expert id");
  }
  {
    auto ts = good;
    auto& t = ts["model.layers.1.attn.wq_a.weight"];
    float nan = std::nanf("");
    std::memcpy(t.bytes.data() + 4 * 3, &nan, 4);
    expect_convert_error(ts, "blk.1.attn_q_a.weight");
  }
  {
    auto ts = good;
    ts["model.layers.1.attn.wq_a.scale"] = RawTensor{"F32", {1}, std::vector<uint8_t>(4, 0)};
    expect_convert_error(ts, "has a block-scale tensor 'model.layers.1.attn.wq_a.scale' but dtype F32");
  }
}


// Converts `ts` (with swa_tiny's config) and returns the GGUF's tensor bytes by name.
std::map<std::string, std::vector<uint8_t>> convert_tensors(const std::map<std::string, RawTensor>& ts,
                                                            const std::string& sub, bool sharded) {
  fs::path dir = temp_dir() / sub;
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fixture("swa_tiny") + "/config.json", dir / "config.json");
  if (!sharded) {
    write_safetensors((dir / "model.safetensors").string(), ts);
  } else {
    // Two shards and an index, the way large checkpoints are stored.
    std::map<std::string, RawTensor> a, b;
    nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
    size_t k = 0;
    for (const auto& [n, t] : ts) {
      const bool first = (k++ % 2) == 0;
      (first ? a : b)[n] = t;
      index["weight_map"][n] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    write_safetensors((dir / "model-00001-of-00002.safetensors").string(), a);
    write_safetensors((dir / "model-00002-of-00002.safetensors").string(), b);
    std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  }
  ds4::convert::ConvertOptions o{dir.string(), (dir / "out.gguf").string(), ds4::convert::Recipe::F32, 0, {}};
  ds4::convert::convert_hf(o);
  auto f = ds4::gguf::File::open((dir / "out.gguf").string());
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& t : f.tensors()) out[t.name].assign(t.data, t.data + t.n_bytes);
  return out;
}

TEST(ConvertHf, ShardedCheckpointGivesTheSameTensors) {
  auto ts = raw_fixture("swa_tiny");
  EXPECT_EQ(convert_tensors(ts, "single", false), convert_tensors(ts, "sharded", true));
}

// transformers' in-memory module names with stacked experts ([E, 2I, H] gate_up, [E, H, I]
// down) must give the same file as the official per-expert names.
TEST(ConvertHf, TransformersModuleNamesAndStackedExperts) {
  auto official = raw_fixture("swa_tiny");
  std::map<std::string, RawTensor> modules;
  const std::vector<std::pair<std::string, std::string>> rename = {
      {"attn.wq_a.weight", "self_attn.q_a_proj.weight"},   {"attn.q_norm.weight", "self_attn.q_a_norm.weight"},
      {"attn.wq_b.weight", "self_attn.q_b_proj.weight"},   {"attn.wkv.weight", "self_attn.kv_proj.weight"},
      {"attn.norm.weight", "self_attn.kv_norm.weight"},    {"attn.attn_sink", "self_attn.sinks"},
      {"attn.wo_a.weight", "self_attn.o_a_proj.weight"},   {"attn.wo_b.weight", "self_attn.o_b_proj.weight"},
      {"attn_norm.weight", "input_layernorm.weight"},      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"hc_attn_fn", "attn_hc.fn"},                        {"hc_attn_base", "attn_hc.base"},
      {"hc_attn_scale", "attn_hc.scale"},                  {"hc_ffn_fn", "ffn_hc.fn"},
      {"hc_ffn_base", "ffn_hc.base"},                      {"hc_ffn_scale", "ffn_hc.scale"},
      {"ffn.gate.weight", "mlp.gate.weight"},              {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn.gate.tid2eid", "mlp.gate.tid2eid"},            {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
      {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
  };
  const uint64_t E = 4, I = 16, H = 32;  // swa_tiny
  for (int il = 0; il < 2; ++il) {
    const std::string p = "model.layers." + std::to_string(il) + ".";
    for (const auto& [from, to] : rename)
      if (official.count(p + from)) modules[p + to] = official.at(p + from);
    RawTensor gate_up{"F32", {E, 2 * I, H}, {}}, down{"F32", {E, H, I}, {}};
    for (uint64_t e = 0; e < E; ++e) {
      const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
      for (const char* w : {"w1", "w3"}) {
        const auto& b = official.at(x + w + ".weight").bytes;
        gate_up.bytes.insert(gate_up.bytes.end(), b.begin(), b.end());
      }
      const auto& b = official.at(x + "w2.weight").bytes;
      down.bytes.insert(down.bytes.end(), b.begin(), b.end());
    }
    modules[p + "mlp.experts.gate_up_proj"] = gate_up;
    modules[p + "mlp.experts.down_proj"] = down;
  }
  modules["model.embed_tokens.weight"] = official.at("model.embed_tokens.weight");
  modules["lm_head.weight"] = official.at("head.weight");
  modules["model.norm.weight"] = official.at("model.norm.weight");
  modules["model.hc_head.hc_fn"] = official.at("model.hc_head.hc_fn");
  modules["model.hc_head.hc_base"] = official.at("model.hc_head.hc_base");
  modules["model.hc_head.hc_scale"] = official.at("model.hc_head.hc_scale");
  EXPECT_EQ(convert_tensors(modules, "modules", false), convert_tensors(official, "official", false));
}

}  // namespace
