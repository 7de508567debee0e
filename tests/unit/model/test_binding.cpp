// Loader validation: every way a file can disagree with spec §1/§3 must be refused with a
// ds4::Error that names the tensor or key, what was expected and what was found.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <filesystem>

#include "core/error.h"
#include "model/deepseek4/model.h"
#include "synthetic_model.h"
#include "common/test_paths.h"

using namespace ds4;
using namespace ds4::model::deepseek4;
using ds4::test::SynthConfig;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

std::string tmp_path(const std::string& name) {
  return (ds4::test::test_tmp_dir() / ("ds4_model_" + name + ".gguf")).string();
}

// Loads a file written from `c` and returns the error message ("" when it loads).
std::string load_error(const SynthConfig& c, const std::string& name) {
  std::string p = tmp_path(name);
  ds4::test::write_synthetic_model(p, c);
  std::string msg;
  try {
    Model::load(p);
  } catch (const ds4::Error& e) {
    msg = e.what();
  }
  std::filesystem::remove(p);
  return msg;
}

}  // namespace

TEST(Binding, ValidFileLoadsWithMetadataShapes) {
  SynthConfig c;
  std::string p = tmp_path("valid");
  ds4::test::write_synthetic_model(p, c);
  auto m = Model::load(p);
  const HParams& h = m->hparams();
  EXPECT_EQ(h.n_layer, 4);
  EXPECT_EQ(h.n_vocab, 96);
  EXPECT_EQ(h.compress_ratio, (std::vector<int64_t>{0, 4, 8, 4}));
  EXPECT_EQ(h.n_hash_layers, 1);
  EXPECT_FLOAT_EQ(h.expert_weights_scale, 1.5f);
  EXPECT_EQ(h.rope_compressed.yarn_factor, 16);
  EXPECT_EQ(h.rope_swa.yarn_factor, 1);  // SWA-only layers never get YaRN (trap 4)
  std::filesystem::remove(p);
}

TEST(Binding, MissingTensorIsNamed) {
  SynthConfig c;
  c.drop_tensor = "blk.1.indexer_compressor_gate.weight";
  EXPECT_THAT(load_error(c, "missing"), HasSubstr("missing tensor blk.1.indexer_compressor_gate.weight"));
}

TEST(Binding, WrongShapeNamesExpectedAndFound) {
  SynthConfig c;
  c.shape_override["blk.2.attn_compressor_ape.weight"] = {128, 8};  // ratio 8 has one lane: [64, 8]
  EXPECT_THAT(load_error(c, "shape"), AllOf(HasSubstr("blk.2.attn_compressor_ape.weight"), HasSubstr("[128, 8]"),
                                            HasSubstr("expected [64, 8]")));
}

TEST(Binding, WrongTypeNamesExpected) {
  SynthConfig c;
  c.type_override["blk.0.attn_norm.weight"] = GgmlType::Q8_0;
  EXPECT_THAT(load_error(c, "type"), AllOf(HasSubstr("blk.0.attn_norm.weight"), HasSubstr("q8_0"), HasSubstr("expected f32")));
}

TEST(Binding, ExpertGateAndUpMustShareAType) {
  SynthConfig c;
  c.n_embd = 256;
  c.expert_ff = 256;
  c.type_override["blk.2.ffn_up_exps.weight"] = GgmlType::Q8_0;
  EXPECT_THAT(load_error(c, "gateup"), HasSubstr("ffn_up_exps type q8_0 differs from ffn_gate_exps type f32"));
}

TEST(Binding, MissingMetadataKeyIsNamed) {
  SynthConfig c;
  c.drop_key = "deepseek4.attention.output_group_count";
  EXPECT_THAT(load_error(c, "key"), HasSubstr("missing required metadata key deepseek4.attention.output_group_count"));
}

TEST(Binding, OtherGatingFunctionRefused) {
  SynthConfig c;
  c.drop_key = "deepseek4.expert_gating_func";
  EXPECT_EQ(load_error(c, "gating_absent"), "");  // optional; sqrt(softplus) is implied
  SynthConfig d;
  d.gating_func = 2;  // sigmoid
  EXPECT_THAT(load_error(d, "gating"), HasSubstr("deepseek4.expert_gating_func = 2, expected 4 (sqrtsoftplus)"));
}

TEST(Binding, HashLayerCountFromKeyOrTables) {
  SynthConfig c;
  c.n_hash_layers = 2;
  c.drop_key = "deepseek4.hash_layer_count";  // inferred from the leading tid2eid tables
  std::string p = tmp_path("hash_infer");
  ds4::test::write_synthetic_model(p, c);
  EXPECT_EQ(Model::load(p)->hparams().n_hash_layers, 2);
  std::filesystem::remove(p);
  // A table on a layer the key says is not hash-routed is an inconsistent file.
  c.drop_key = "";
  c.hash_layer_key = 1;
  EXPECT_THAT(load_error(c, "hash_extra"),
              HasSubstr("tensor blk.1.ffn_gate_tid2eid.weight is present but layer 1 is not hash-routed"));
}

TEST(Binding, ShortCompressRatiosRefused) {
  SynthConfig c;
  c.ratios_key = {0, 4, 8};  // 3 entries for 4 layers
  EXPECT_THAT(load_error(c, "ratios"),
              HasSubstr("deepseek4.attention.compress_ratios has 3 entries, need at least block_count = 4"));
  c.ratios_key = {0, 4, 8, 4, 0};  // a trailing MTP entry is fine (trap 18)
  EXPECT_EQ(load_error(c, "ratios_mtp"), "");
}

TEST(Binding, Tid2eidOutOfRangeRefused) {
  SynthConfig c;
  c.edit_i32 = [](const std::string&, std::vector<int32_t>& v) { v[7] = 99; };
  EXPECT_THAT(load_error(c, "tid"), AllOf(HasSubstr("blk.0.ffn_gate_tid2eid.weight"), HasSubstr("element 7 = 99")));
}

TEST(Binding, BadTokenIdRefusedBeforeStateChanges) {
  SynthConfig c;
  std::string p = tmp_path("tok");
  ds4::test::write_synthetic_model(p, c);
  auto m = Model::load(p);
  auto be = compute::make_cpu_backend(nullptr);
  State st = m->new_state(*be, 16);
  std::vector<int32_t> toks = {1, 2, 96};
  EXPECT_THAT([&] { m->eval(*be, st, toks, nullptr); },
              ::testing::ThrowsMessage<ds4::Error>(HasSubstr("token 96 (index 2 of the batch) is outside the vocabulary")));
  EXPECT_EQ(st.n_pos, 0);
  std::filesystem::remove(p);
}
