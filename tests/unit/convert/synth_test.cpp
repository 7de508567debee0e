// `synth`: the 43-layer published Flash table, checked tensor by tensor against the shapes and
// types of spec §3 written out literally below, read back by our GGUF reader and llama.cpp's.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "convert/qwen35moe_convert.h"
#include "convert/synth.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "ggml_gguf.h"

namespace fs = std::filesystem;
using ds4::GgmlType;

namespace {

struct Expect {
  GgmlType type;
  std::vector<uint64_t> ne;
};

// Spec §1.1: ratio(il) = 0 for il < 2, else 4 for even il and 128 for odd il.
uint32_t flash_ratio(uint32_t il) { return il < 2 ? 0 : (il % 2 == 0 ? 4 : 128); }

// Spec §3.1 / §3.2 for the published files; `experts` is the routed-expert type pair.
std::map<std::string, Expect> flash_table(uint32_t layers, GgmlType gate_up, GgmlType down) {
  const auto F16 = GgmlType::F16, F32 = GgmlType::F32, Q8 = GgmlType::Q8_0, I32 = GgmlType::I32;
  std::map<std::string, Expect> t = {
      {"token_embd.weight", {F16, {4096, 129280}}},  {"output_hc_fn.weight", {F16, {16384, 4}}},
      {"output_hc_base.weight", {F32, {4}}},         {"output_hc_scale.weight", {F32, {1}}},
      {"output_norm.weight", {F32, {4096}}},         {"output.weight", {Q8, {4096, 129280}}},
  };
  for (uint32_t il = 0; il < layers; ++il) {
    auto k = [&](const char* s) { return "blk." + std::to_string(il) + "." + s; };
    t[k("hc_attn_fn.weight")] = {F16, {16384, 24}};
    t[k("hc_attn_base.weight")] = {F32, {24}};
    t[k("hc_attn_scale.weight")] = {F32, {3}};
    t[k("attn_norm.weight")] = {F32, {4096}};
    t[k("attn_q_a.weight")] = {Q8, {4096, 1024}};
    t[k("attn_q_a_norm.weight")] = {F32, {1024}};
    t[k("attn_q_b.weight")] = {Q8, {1024, 32768}};
    t[k("attn_kv.weight")] = {Q8, {4096, 512}};
    t[k("attn_kv_a_norm.weight")] = {F32, {512}};
    t[k("attn_sinks.weight")] = {F32, {64}};
    t[k("attn_output_a.weight")] = {Q8, {4096, 8192}};
    t[k("attn_output_b.weight")] = {Q8, {8192, 4096}};
    const uint32_t r = flash_ratio(il);
    if (r == 4) {
      t[k("attn_compressor_ape.weight")] = {F16, {1024, 4}};
      t[k("attn_compressor_kv.weight")] = {F16, {4096, 1024}};
      t[k("attn_compressor_gate.weight")] = {F16, {4096, 1024}};
      t[k("attn_compressor_norm.weight")] = {F32, {512}};
      t[k("indexer.attn_q_b.weight")] = {F16, {1024, 8192}};
      t[k("indexer.proj.weight")] = {F16, {4096, 64}};
      t[k("indexer_compressor_ape.weight")] = {F16, {256, 4}};
      t[k("indexer_compressor_kv.weight")] = {F16, {4096, 256}};
      t[k("indexer_compressor_gate.weight")] = {F16, {4096, 256}};
      t[k("indexer_compressor_norm.weight")] = {F32, {128}};
    } else if (r == 128) {
      t[k("attn_compressor_ape.weight")] = {F16, {512, 128}};
      t[k("attn_compressor_kv.weight")] = {F16, {4096, 512}};
      t[k("attn_compressor_gate.weight")] = {F16, {4096, 512}};
      t[k("attn_compressor_norm.weight")] = {F32, {512}};
    }
    t[k("hc_ffn_fn.weight")] = {F16, {16384, 24}};
    t[k("hc_ffn_base.weight")] = {F32, {24}};
    t[k("hc_ffn_scale.weight")] = {F32, {3}};
    t[k("ffn_norm.weight")] = {F32, {4096}};
    t[k("ffn_gate_inp.weight")] = {F16, {4096, 256}};
    if (il >= 3) t[k("exp_probs_b.bias")] = {F32, {256}};
    else t[k("ffn_gate_tid2eid.weight")] = {I32, {6, 129280}};
    t[k("ffn_gate_exps.weight")] = {gate_up, {4096, 2048, 256}};
    t[k("ffn_up_exps.weight")] = {gate_up, {4096, 2048, 256}};
    t[k("ffn_down_exps.weight")] = {down, {2048, 4096, 256}};
    t[k("ffn_gate_shexp.weight")] = {Q8, {4096, 2048}};
    t[k("ffn_up_shexp.weight")] = {Q8, {4096, 2048}};
    t[k("ffn_down_shexp.weight")] = {Q8, {2048, 4096}};
  }
  return t;
}

std::string temp_path(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ds4_synth_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

void check_table(const std::string& path, const std::map<std::string, Expect>& want) {
  auto f = ds4::gguf::File::open(path);
  ASSERT_EQ(f.tensors().size(), want.size());
  for (const auto& t : f.tensors()) {
    auto it = want.find(t.name);
    ASSERT_NE(it, want.end()) << "unexpected tensor " << t.name;
    EXPECT_EQ(t.type, it->second.type) << t.name;
    EXPECT_EQ(t.ne, it->second.ne) << t.name;
  }
}

}  // namespace

TEST(ConvertSynth, SparseFlashQ2With43LayersMatchesTheSpecTable) {
  const std::string out = temp_path("flash_q2_43.gguf");
  ds4::convert::SynthOptions o;
  o.out_path = out;
  o.recipe = ds4::convert::Recipe::FlashQ2;
  o.layers = 43;
  o.sparse = ds4::convert::Sparse::All;
  auto rep = ds4::convert::synth(o);
  auto want = flash_table(43, GgmlType::IQ2_XXS, GgmlType::Q2_K);
  EXPECT_EQ(rep.n_tensors, want.size());
  check_table(out, want);

  // Per-expert byte counts from spec §3.2 notes.
  auto f = ds4::gguf::File::open(out);
  EXPECT_EQ(f.find_tensor("blk.10.ffn_gate_exps.weight")->n_bytes, 256ull * 2162688);
  EXPECT_EQ(f.find_tensor("blk.10.ffn_down_exps.weight")->n_bytes, 256ull * 2752512);
  // The published q2 file is "about 81 GB" (spec §3.2): within 5% of 81e9 bytes... in GiB.
  EXPECT_GT(f.file_size(), 80ull << 30);
  EXPECT_LT(f.file_size(), 82ull << 30);

  // Metadata as ds4 / llama.cpp read it.
  EXPECT_EQ(f.get_uint("deepseek4.block_count"), 43u);
  auto ratios = *f.get_int_array("deepseek4.attention.compress_ratios");
  ASSERT_EQ(ratios.size(), 43u);
  for (uint32_t il = 0; il < 43; ++il) EXPECT_EQ(ratios[il], flash_ratio(il)) << il;
  EXPECT_EQ(f.get_uint("deepseek4.hash_layer_count"), 3u);
  EXPECT_EQ(f.get_uint("deepseek4.expert_count"), 256u);
  EXPECT_EQ(f.get_uint("deepseek4.expert_used_count"), 6u);
  EXPECT_EQ(f.get_uint("deepseek4.attention.indexer.top_k"), 512u);
  EXPECT_EQ(f.get_float("deepseek4.rope.scaling.factor"), 16.0);
  EXPECT_EQ(f.get_float("deepseek4.attention.compress_rope_freq_base"), 160000.0);
  EXPECT_EQ(f.get_float_array("deepseek4.swiglu_clamp_exp")->size(), 43u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")->size(), 129280u);

  // Holes: the file occupies almost nothing on disk.
  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 64ull << 20);

  ds4::test::GgmlGguf g(out);
  ASSERT_TRUE(g.ok()) << "libggml-base rejected the synthetic file";
  EXPECT_EQ(g.n_tensors(), static_cast<int64_t>(want.size()));
  EXPECT_EQ(g.arr_n("deepseek4.swiglu_clamp_exp"), 43u);
  for (int64_t i = 0; i < g.n_tensors(); ++i) {
    EXPECT_EQ(g.tensor_offset(i), f.tensors()[i].offset);
    EXPECT_EQ(g.tensor_size(i), f.tensors()[i].n_bytes);
  }
  std::filesystem::remove(out);
}

TEST(ConvertSynth, Q4PresetUsesQ4KExperts) {
  const std::string out = temp_path("flash_q4_5.gguf");
  ds4::convert::SynthOptions o;
  o.out_path = out;
  o.recipe = ds4::convert::Recipe::FlashQ4;
  o.layers = 5;
  o.sparse = ds4::convert::Sparse::All;
  ds4::convert::synth(o);
  check_table(out, flash_table(5, GgmlType::Q4_K, GgmlType::Q4_K));
  auto f = ds4::gguf::File::open(out);
  EXPECT_EQ(f.find_tensor("blk.4.ffn_up_exps.weight")->n_bytes, 256ull * 4718592);
  std::filesystem::remove(out);
}

namespace {

// Qwen3.6-35B-A3B's text model, from its config.json: hidden 2048, 40 layers (3 Gated DeltaNet
// + 1 gated attention, repeated), attention 16 heads x 256 on 2 KV heads, DeltaNet 16 key / 32
// value heads of 128, conv kernel 4, 256 experts of width 512 (8 used) + a shared expert of 512,
// vocabulary 248320. Names and ggml shapes as llama.cpp's qwen35moe loader reads them
// (docs/FORMATS.md); types: the qwen36-q4 preset's Q4_K matrices and experts, Q6_K output, F32
// routers, DeltaNet alpha/beta, shared-expert gate, conv kernel, norms and vectors.
std::map<std::string, Expect> qwen36_table(uint32_t layers) {
  const auto F32 = GgmlType::F32, Q4 = GgmlType::Q4_K, Q6 = GgmlType::Q6_K;
  std::map<std::string, Expect> t = {
      {"token_embd.weight", {Q4, {2048, 248320}}},
      {"output_norm.weight", {F32, {2048}}},
      {"output.weight", {Q6, {2048, 248320}}},
  };
  for (uint32_t il = 0; il < layers; ++il) {
    auto k = [&](const char* s) { return "blk." + std::to_string(il) + "." + s; };
    t[k("attn_norm.weight")] = {F32, {2048}};
    t[k("post_attention_norm.weight")] = {F32, {2048}};
    if ((il + 1) % 4 != 0) {
      t[k("attn_qkv.weight")] = {Q4, {2048, 2 * 16 * 128 + 32 * 128}};
      t[k("attn_gate.weight")] = {Q4, {2048, 32 * 128}};
      t[k("ssm_beta.weight")] = {F32, {2048, 32}};
      t[k("ssm_alpha.weight")] = {F32, {2048, 32}};
      t[k("ssm_conv1d.weight")] = {F32, {4, 8192}};
      t[k("ssm_dt.bias")] = {F32, {32}};
      t[k("ssm_a")] = {F32, {32}};
      t[k("ssm_norm.weight")] = {F32, {128}};
      t[k("ssm_out.weight")] = {Q4, {4096, 2048}};
    } else {
      t[k("attn_q.weight")] = {Q4, {2048, 16 * 256 * 2}};  // query and output gate per head
      t[k("attn_k.weight")] = {Q4, {2048, 2 * 256}};
      t[k("attn_v.weight")] = {Q4, {2048, 2 * 256}};
      t[k("attn_output.weight")] = {Q4, {16 * 256, 2048}};
      t[k("attn_q_norm.weight")] = {F32, {256}};
      t[k("attn_k_norm.weight")] = {F32, {256}};
    }
    t[k("ffn_gate_inp.weight")] = {F32, {2048, 256}};
    t[k("ffn_gate_exps.weight")] = {Q4, {2048, 512, 256}};
    t[k("ffn_up_exps.weight")] = {Q4, {2048, 512, 256}};
    t[k("ffn_down_exps.weight")] = {Q4, {512, 2048, 256}};
    t[k("ffn_gate_inp_shexp.weight")] = {F32, {2048}};
    t[k("ffn_gate_shexp.weight")] = {Q4, {2048, 512}};
    t[k("ffn_up_shexp.weight")] = {Q4, {2048, 512}};
    t[k("ffn_down_shexp.weight")] = {Q4, {512, 2048}};
  }
  return t;
}

}  // namespace

TEST(ConvertSynth, Qwen36Q4With40LayersMatchesThePublishedShapes) {
  const std::string out = temp_path("qwen36_q4_40.gguf");
  ds4::convert::QwenSynthOptions o;
  o.out_path = out;
  o.layers = 40;
  o.sparse = ds4::convert::Sparse::All;
  const auto rep = ds4::convert::synth_qwen36(o);
  const auto want = qwen36_table(40);
  EXPECT_EQ(rep.n_tensors, want.size());
  check_table(out, want);

  auto f = ds4::gguf::File::open(out);
  // A Q4_K expert of 2048 x 512 is 512 rows of 8 blocks of 144 bytes.
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_exps.weight")->n_bytes, 256ull * 512 * 8 * 144);
  // Same order as the published Q4_K_S file (20.8 GB, the issue): ours is all Q4_K.
  EXPECT_GT(f.file_size(), 18ull << 30);
  EXPECT_LT(f.file_size(), 21ull << 30);

  EXPECT_EQ(f.get_string("general.architecture"), "qwen35moe");
  for (const auto& [key, v] : std::map<std::string, uint64_t>{{"block_count", 40},
                                                              {"context_length", 262144},
                                                              {"embedding_length", 2048},
                                                              {"attention.head_count", 16},
                                                              {"attention.head_count_kv", 2},
                                                              {"attention.key_length", 256},
                                                              {"attention.value_length", 256},
                                                              {"rope.dimension_count", 64},
                                                              {"expert_count", 256},
                                                              {"expert_used_count", 8},
                                                              {"expert_feed_forward_length", 512},
                                                              {"expert_shared_feed_forward_length", 512},
                                                              {"ssm.conv_kernel", 4},
                                                              {"ssm.state_size", 128},
                                                              {"ssm.group_count", 16},
                                                              {"ssm.time_step_rank", 32},
                                                              {"ssm.inner_size", 4096},
                                                              {"full_attention_interval", 4}})
    EXPECT_EQ(f.get_uint("qwen35moe." + key), v) << key;
  EXPECT_EQ(f.get_float("qwen35moe.rope.freq_base"), 1e7);
  EXPECT_EQ(f.get_int_array("qwen35moe.rope.dimension_sections"), (std::vector<int64_t>{11, 11, 10, 0}));
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen35");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")->size(), 248320u);

  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 64ull << 20);

  ds4::test::GgmlGguf g(out);
  ASSERT_TRUE(g.ok()) << "libggml-base rejected the synthetic file";
  EXPECT_EQ(g.n_tensors(), static_cast<int64_t>(want.size()));
  EXPECT_EQ(g.arr_n("qwen35moe.attention.recurrent_layers"), 40u);
  for (int64_t i = 0; i < g.n_tensors(); ++i) {
    EXPECT_EQ(g.tensor_offset(i), f.tensors()[i].offset);
    EXPECT_EQ(g.tensor_size(i), f.tensors()[i].n_bytes);
  }
  std::filesystem::remove(out);
}

// synth generates a tensor's pieces in parallel, each from the generator state its predecessors
// would leave (draws counted per type): the bytes must be those of one generator carried
// through the pieces in order, for every type and for pieces whose byte count is not a
// multiple of 8 (the quantized tail draws).
TEST(ConvertSynth, ParallelPiecesEqualOneGeneratorCarriedThrough) {
  using ds4::convert::TensorPlan;
  const auto shape = ds4::convert::flash_shape(1);
  auto plan = [](std::string name, GgmlType type, std::vector<uint64_t> ne) {
    TensorPlan p;
    p.name = std::move(name);
    p.type = type;
    p.ne = std::move(ne);
    return p;
  };
  const std::vector<TensorPlan> plans = {
      plan("blk.0.attn_norm.weight", GgmlType::F32, {96, 5}),
      plan("blk.0.hc_attn_scale", GgmlType::F32, {3, 7}),
      plan("blk.0.hc_attn_base", GgmlType::F32, {24, 3}),
      plan("blk.0.attn_q_a.weight", GgmlType::F16, {64, 9}),
      plan("blk.0.ffn_gate_tid2eid", GgmlType::I32, {6, 11}),
      plan("blk.0.attn_q_b.weight", GgmlType::Q8_0, {64, 13}),   // 68-byte rows: pieces end mid-word
      plan("blk.0.ffn_down_exps.weight", GgmlType::Q2_K, {256, 7}),
      plan("blk.0.ffn_gate_exps.weight", GgmlType::IQ2_XXS, {256, 9}),
      plan("blk.0.ffn_up_exps.weight", GgmlType::Q4_K, {256, 5}),
  };
  for (const auto& p : plans)
    for (uint64_t step : {1, 2, 3, 4, 100}) {
      const auto one = ds4::convert::synth_tensor_bytes(p, 12345, step, false, shape);
      const auto pieces = ds4::convert::synth_tensor_bytes(p, 12345, step, true, shape);
      ASSERT_FALSE(one.empty()) << p.name;
      EXPECT_EQ(one, pieces) << p.name << ", pieces of " << step << " rows";
      // And the pieces do not repeat one another: a piece started from the first piece's state
      // would make the same bytes again.
      if (step < p.ne[1] && step * 2 <= p.ne[1]) {
        const size_t pb = one.size() / p.ne[1] * step;
        EXPECT_NE(std::vector<uint8_t>(one.begin(), one.begin() + pb),
                  std::vector<uint8_t>(one.begin() + pb, one.begin() + 2 * pb))
            << p.name;
      }
    }
}
