// ds4-gguf quantize --prune on the demo model (real weights): the pruned experts leave the file
// (shapes, metadata, size), the engine runs the smaller file with logits bit-identical to the
// unpruned file run with the same --prune-mask, an imatrix slice follows its expert through the
// re-indexing (the pruned file's expert matrices are byte-identical to the kept experts' of the
// unpruned re-quantization), --reuse still gives the full run's bytes, and bad masks / inputs
// get errors naming the problem.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "compute/analysis_backend.h"
#include "compute/backends.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ds4/tokenizer.h"
#include "gguf/gguf.h"
#include "model/deepseek4/model.h"
#include "quantize/expert_profile.h"
#include "quantize/prune_tensors.h"
#include "quantize/quantize.h"
#include "session/analysis.h"
#include "session/engine_impl.h"
#include "stream/layout.h"

using namespace ds4;
using namespace ds4::quantize;
namespace fs = std::filesystem;

namespace {

const std::string kDemo = std::string(DS4_SOURCE_DIR) + "/models/ds4-demo.gguf";

std::string tmp(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ds4_prune_file_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A mask for the demo model (3 hash layers, then 3 learned layers of 8 experts, k = 2) pruning
// the given experts of each learned layer.
PruneMask demo_mask(const std::vector<std::vector<int64_t>>& learned) {
  gguf::File f = gguf::File::open(kDemo);
  PruneMask m;
  m.model = file_model_key(f);
  m.method = "test";
  m.pruned.assign(6, std::vector<uint8_t>(8, 0));
  for (size_t i = 0; i < learned.size(); ++i)
    for (int64_t e : learned[i]) m.pruned[3 + i][static_cast<size_t>(e)] = 1;
  return m;
}

// Logits of every position of `ids`, with an optional prune mask applied at run time.
std::vector<float> run(const std::string& path, const std::string& mask, const std::vector<int32_t>& ids) {
  gguf::File f = gguf::File::open(path);
  const auto hp = model::deepseek4::HParams::from_gguf(f);
  auto an = session::make_analysis(f, hp, false, false, mask);
  auto model = model::deepseek4::Model::from_file(std::move(f), {});
  ThreadPool pool(2);
  auto cpu = compute::make_cpu_backend(&pool);
  std::unique_ptr<compute::Backend> wrapped;
  compute::Backend* be = cpu.get();
  if (an) wrapped = std::make_unique<compute::AnalysisBackend>(*cpu, an->stats, an->cfg), be = wrapped.get();
  model->register_weights(*be);
  std::vector<float> logits(ids.size() * static_cast<size_t>(hp.n_vocab));
  auto st = model->new_state(*be, static_cast<int64_t>(ids.size()));
  model->eval(*be, st, ids, logits.data());
  return logits;
}

QuantizeReport requantize(const std::string& out, const std::string& recipe, const std::optional<PruneMask>& mask,
                        const std::optional<Imatrix>& imx = std::nullopt, const std::string& reuse = "") {
  QuantizeOptions o;
  o.recipe = parse_recipe(recipe, "test recipe");
  o.prune = mask;
  o.imatrix = imx;
  o.reuse_path = reuse;
  o.threads = 2;
  return quantize_file(kDemo, out, o);
}

}  // namespace

TEST(PruneFile, DropsExpertsAndKeepsLogitsBitIdentical) {
  const std::vector<std::vector<int64_t>> pruned = {{0, 7}, {1, 5}, {2, 3, 4, 6}};  // 25%, 25%, 50%
  const PruneMask mask = demo_mask(pruned);
  const std::string mask_path = tmp("mask.json"), out = tmp("pruned.gguf");
  write_mask(mask_path, mask);
  const QuantizeReport rep = requantize(out, "* keep\n", mask);
  EXPECT_EQ(rep.pruned_experts, 8);

  gguf::File in = gguf::File::open(kDemo), pf = gguf::File::open(out);
  // Shapes and bytes: every expert tensor of a pruned layer holds the kept experts, in order.
  for (int l = 0; l < 6; ++l) {
    std::vector<int64_t> kept;
    for (int64_t e = 0; e < 8; ++e)
      if (l < 3 || std::find(pruned[l - 3].begin(), pruned[l - 3].end(), e) == pruned[l - 3].end()) kept.push_back(e);
    for (const char* t : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight", "ffn_gate_inp.weight",
                          "exp_probs_b.bias"}) {
      const std::string name = fmt::format("blk.{}.{}", l, t);
      const auto* a = in.find_tensor(name);
      const auto* b = pf.find_tensor(name);
      if (!a) {
        EXPECT_FALSE(b) << name;
        continue;
      }
      ASSERT_TRUE(b) << name;
      const size_t dim = a->ne.size() - 1;  // the expert dimension is the last one
      ASSERT_EQ(a->ne[dim], 8u) << name;
      EXPECT_EQ(b->ne[dim], kept.size()) << name;
      const size_t unit = a->n_bytes / 8;
      ASSERT_EQ(b->n_bytes, unit * kept.size()) << name;
      for (size_t i = 0; i < kept.size(); ++i)
        EXPECT_EQ(0, std::memcmp(b->data + i * unit, a->data + static_cast<size_t>(kept[i]) * unit, unit)) << name << " " << i;
    }
  }
  const auto per = pf.get_int_array("deepseek4.expert_count_per_layer");
  ASSERT_TRUE(per);
  EXPECT_EQ(*per, (std::vector<int64_t>{8, 8, 8, 6, 6, 4}));
  EXPECT_EQ(pf.get_int("deepseek4.expert_count"), 8);
  // Such a file never streams: on a GPU it stays resident (and takes the resident default
  // chunk) without the streaming layout, which cannot describe it, being read.
  EXPECT_TRUE(stream::experts_pruned_per_layer(pf));
  EXPECT_FALSE(stream::experts_pruned_per_layer(in));
  EngineOptions gpu;
  gpu.backend = "cuda";
  EXPECT_FALSE(session::device_streams_experts(pf, gpu));
  // Size: against the same recipe without --prune, the file is smaller by the reported bytes
  // (8 of 48 experts' gate/up/down matrices, router rows and biases), up to the pruning
  // metadata and alignment padding (< 4 KiB here).
  const std::string unpruned = tmp("unpruned.gguf");
  requantize(unpruned, "* keep\n", std::nullopt);
  const int64_t saved = static_cast<int64_t>(fs::file_size(unpruned)) - static_cast<int64_t>(fs::file_size(out));
  EXPECT_GT(rep.pruned_bytes, 500000u);
  EXPECT_NEAR(static_cast<double>(saved), static_cast<double>(rep.pruned_bytes), 4096.0);

  // The engine: the pruned file's logits equal the unpruned file's under the same mask, bit for bit,
  // at every position of a prefill; and they differ from the unmasked run (the mask matters).
  const Tokenizer tok = Tokenizer::from_gguf(in);
  const auto ids = tok.encode("And Jacob went on his way, and the angels of God met him. And when Jacob saw them", false);
  const auto masked = run(kDemo, mask_path, ids), small = run(out, "", ids), plain = run(kDemo, "", ids);
  ASSERT_EQ(masked.size(), small.size());
  EXPECT_EQ(0, std::memcmp(masked.data(), small.data(), masked.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(masked.data(), plain.data(), masked.size() * sizeof(float)));

  // Masks and profiles number experts as the unpruned file does: refused on the pruned one.
  EXPECT_NE(error_of([&] { run(out, mask_path, ids); }).find("experts were dropped from this file by pruning"),
            std::string::npos);
  // Pruning a pruned file again.
  EXPECT_NE(error_of([&] {
              QuantizeOptions o;
              o.recipe = parse_recipe("* keep\n", "r");
              o.prune = mask;
              quantize_file(out, tmp("twice.gguf"), o);
            }).find("already pruned"),
            std::string::npos);
}

TEST(PruneFile, ImatrixSlicesFollowTheirExpertsAndReuseHolds) {
  gguf::File f = gguf::File::open(kDemo);
  // Random per-expert importances for the IQ2_XXS gate experts (a different slice per expert,
  // so a slice given to the wrong expert changes its bytes).
  Imatrix imx;
  imx.datasets = {"random"};
  imx.chunk_count = 1;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.1f, 20.0f);
  for (int l = 0; l < 6; ++l) {
    const auto* t = f.find_tensor(fmt::format("blk.{}.ffn_gate_exps.weight", l));
    ImatrixEntry e;
    e.ne0 = static_cast<int64_t>(t->ne[0]);
    for (int64_t i = 0; i < e.ne0 * 8; ++i) e.sums.push_back(u(rng));
    e.counts.assign(8, 3.0);
    imx.entries[t->name] = e;
  }
  const char* recipe = "* keep\nblk.*.ffn_gate_exps.weight iq2_xxs\nblk.*.ffn_down_exps.weight q4_0\n";
  const PruneMask mask = demo_mask({{0, 7}, {1, 5}, {5, 6}});
  const std::string full = tmp("full.gguf"), pruned = tmp("pruned_imx.gguf"), again = tmp("again.gguf");
  requantize(full, recipe, std::nullopt, imx);
  const QuantizeReport r1 = requantize(pruned, recipe, mask, imx);
  EXPECT_EQ(r1.with_imatrix, 6u);
  gguf::File a = gguf::File::open(full), b = gguf::File::open(pruned);
  for (int l = 3; l < 6; ++l)
    for (const char* t : {"ffn_gate_exps.weight", "ffn_down_exps.weight"}) {
      const std::string name = fmt::format("blk.{}.{}", l, t);
      const auto* ta = a.find_tensor(name);
      const auto* tb = b.find_tensor(name);
      const size_t unit = ta->n_bytes / 8;
      std::vector<int64_t> kept;
      for (int64_t e = 0; e < 8; ++e)
        if (!mask.pruned[static_cast<size_t>(l)][static_cast<size_t>(e)]) kept.push_back(e);
      ASSERT_EQ(tb->n_bytes, unit * kept.size()) << name;
      for (size_t i = 0; i < kept.size(); ++i)
        EXPECT_EQ(0, std::memcmp(tb->data + i * unit, ta->data + static_cast<size_t>(kept[i]) * unit, unit))
            << name << " matrix " << i << " (expert " << kept[i] << ")";
    }
  // --reuse from the pruned file: nothing changed, everything reused, same bytes.
  const QuantizeReport r2 = requantize(again, recipe, mask, imx, pruned);
  EXPECT_EQ(r2.quantized, 0u);
  EXPECT_EQ(r2.reused, r2.tensors);
  std::ifstream fa(pruned, std::ios::binary), fb(again, std::ios::binary);
  const std::string ba{std::istreambuf_iterator<char>(fa), {}}, bb{std::istreambuf_iterator<char>(fb), {}};
  EXPECT_TRUE(ba == bb);
}

TEST(PruneFile, BadMasks) {
  const std::string out = tmp("bad.gguf");
  // A hash-routed layer.
  PruneMask hash = demo_mask({});
  hash.pruned[1][3] = 1;
  EXPECT_NE(error_of([&] { requantize(out, "* keep\n", hash); }).find("layer 1 is hash-routed"), std::string::npos);
  // Fewer experts left than each token uses (k = 2).
  const PruneMask few = demo_mask({{0, 1, 2, 3, 4, 5, 6}});
  EXPECT_NE(error_of([&] { requantize(out, "* keep\n", few); }).find("keeps 1 experts, fewer than the 2"), std::string::npos);
  // Another model's mask.
  PruneMask other = demo_mask({{0}});
  other.model.n_expert = 16;
  for (auto& l : other.pruned) l.resize(16, 0);
  EXPECT_NE(error_of([&] { requantize(out, "* keep\n", other); }).find("mask for another model"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));  // nothing written on error
  // A mask file that is not one.
  const std::string junk = tmp("junk.json");
  std::ofstream(junk) << "{\"format\": \"ds4-expert-profile\"}";
  EXPECT_NE(error_of([&] { read_mask(junk); }), "");
}

TEST(PruneFile, EngineRefusesBadPerLayerCounts) {
  // A file whose expert_count_per_layer disagrees with its tensors, or prunes a hash layer.
  const PruneMask mask = demo_mask({{0, 7}});
  const std::string out = tmp("counts.gguf");
  requantize(out, "* keep\n", mask);
  gguf::File f = gguf::File::open(out);
  for (const auto& [counts, want] : std::vector<std::pair<std::vector<uint32_t>, std::string>>{
           {{8, 8, 8, 8, 8, 8}, "blk.3.ffn_gate_inp.weight"},  // tensors hold 6: shape mismatch
           {{8, 6, 8, 6, 8, 8}, "layer 1 is hash-routed"},
           {{8, 8, 8, 1, 8, 8}, "must be in [expert_used_count = 2"},
           {{8, 8, 8}, "has 3 entries"}}) {
    const std::string bad = tmp("counts_bad.gguf");
    {
      gguf::Writer w(bad);
      for (const auto& kv : f.metadata()) {
        if (kv.key == "deepseek4.expert_count_per_layer") {
          std::vector<gguf::Value> v;
          for (uint32_t c : counts) v.push_back(gguf::Value::u32(c));
          w.add_kv(kv.key, gguf::Value::array(gguf::ValueType::U32, v));
        } else {
          w.add_kv(kv.key, kv.value);
        }
      }
      for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne);
      w.write_header();
      for (const auto& t : f.tensors()) w.write_tensor_data({t.data, t.n_bytes});
      w.finish();
    }
    const std::string err = error_of([&] { model::deepseek4::Model::load(bad); });
    EXPECT_NE(err.find(want), std::string::npos) << err;
  }
}
