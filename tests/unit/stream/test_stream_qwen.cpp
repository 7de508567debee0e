// Routed-expert streaming on qwen35moe is bit-identical to resident mode: logits of a chunked
// prefill and of token-by-token greedy decoding, compared byte for byte, on random qwen35moe
// checkpoints converted by convert-hf (F32 experts, and Q4_K experts under the flash-q4 recipe
// of the qwen36-q4 preset, where batches of 3+ tokens per expert take the blocked kernel),
// across budgets that force misses and evictions, both policies, lookahead prefetch on/off,
// both I/O engines, GGUF and packed sources. Also the engine path (--ssd-streaming).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "convert/convert_hf.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "model/qwen35moe/model.h"
#include "stream/pack.h"
#include "stream/provider.h"
#include "stream_fixture.h"
#include "unit/model/qwen35moe_checkpoint.h"

using namespace ds4;
namespace fs = std::filesystem;
namespace qm = ds4::model::qwen35moe;

namespace {

struct Run {
  std::vector<float> prefill;  // [n][vocab]
  std::vector<float> decode;   // greedy steps' logits
  std::vector<int32_t> greedy;
};

int32_t argmax(const float* v, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[b]) b = i;
  return static_cast<int32_t>(b);
}

Run run(const std::string& path, stream::ExpertProvider* xp, const std::vector<int32_t>& toks, int steps) {
  qm::Options o;
  o.experts = xp;
  o.max_batch = 16;  // the prompt runs in chunks: batched acquires of several tokens
  auto m = qm::Model::from_file(gguf::File::open(path), o);
  ThreadPool pool(2);
  auto be = compute::make_cpu_backend(&pool);
  m->register_weights(*be);
  const int64_t V = m->hparams().n_vocab;
  Run r;
  r.prefill.resize(toks.size() * static_cast<size_t>(V));
  qm::State st = m->new_state(*be, static_cast<int64_t>(toks.size()) + steps + 1);
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

void expect_identical(const Run& a, const Run& b, const std::string& what) {
  ASSERT_EQ(a.prefill.size(), b.prefill.size());
  EXPECT_EQ(std::memcmp(a.prefill.data(), b.prefill.data(), a.prefill.size() * 4), 0) << what << ": prefill logits";
  EXPECT_EQ(a.greedy, b.greedy) << what << ": greedy continuation";
  ASSERT_EQ(a.decode.size(), b.decode.size());
  EXPECT_EQ(std::memcmp(a.decode.data(), b.decode.data(), a.decode.size() * 4), 0) << what << ": decode logits";
}

// A converted random checkpoint (4 layers: DeltaNet x3 + full attention, 16 experts, top 4).
std::string qwen_file(const std::string& name, test::QwenTiny c, convert::Recipe recipe) {
  const std::string hf = test::tmp_file(name + "_hf");
  test::write_qwen_checkpoint(hf, c, 33);
  convert::ConvertOptions o;
  o.hf_dir = hf;
  o.out_path = test::tmp_file(name + ".gguf");
  o.recipe = recipe;
  o.threads = 2;
  convert::convert_hf(o);
  fs::remove(o.out_path + ".experts");
  return o.out_path;
}

test::QwenTiny tiny(int hidden, int expert_ff) {
  test::QwenTiny c;
  c.hidden = hidden;
  c.expert_ff = expert_ff;
  c.experts = 16;
  c.top_k = 4;
  return c;
}

struct Variant {
  std::string name;
  int source;  // 0 GGUF, 1 packed (kept)
  int64_t slots;
  stream::PolicyKind policy;
  bool prefetch;
  stream::IoKind io;
};

void check_model(const std::string& name, const std::string& p, int64_t n_tokens, int steps, GgmlType expert_type) {
  const gguf::File f0 = gguf::File::open(p);
  ASSERT_EQ(f0.find_tensor("blk.0.ffn_gate_exps.weight")->type, expert_type);
  const auto vocab = f0.find_tensor("token_embd.weight")->ne[1];
  std::mt19937 rng(11);
  std::vector<int32_t> toks(static_cast<size_t>(n_tokens));
  for (auto& t : toks) t = static_cast<int32_t>(rng() % vocab);
  const Run resident = run(p, nullptr, toks, steps);

  using stream::IoKind;
  using stream::PolicyKind;
  const std::vector<Variant> variants = {
      {"gguf 1 slot lru no-prefetch pread", 0, 1, PolicyKind::Lru, false, IoKind::Pread},
      {"gguf 5 slots hot prefetch", 0, 5, PolicyKind::Hot, true, IoKind::Auto},
      {"gguf all hot prefetch", 0, 0, PolicyKind::Hot, true, IoKind::Auto},
      {"packed 3 slots lru prefetch", 1, 3, PolicyKind::Lru, true, IoKind::Auto},
  };
  for (const auto& v : variants) {
    if (v.source == 1 && !fs::exists(p + ".experts")) stream::pack_experts(p, p + ".experts", true);
    stream::ProviderOptions o;
    o.budget_slots = v.slots;
    o.policy = v.policy;
    o.prefetch_hash = o.prefetch_lookahead = o.protect = v.prefetch;
    o.io = v.io;
    o.store.verify_reads = true;
    o.store.packed_path = v.source == 0 ? "-" : "";
    gguf::File f = gguf::File::open(p);
    auto xp = stream::ExpertProvider::open(f, o);
    ASSERT_EQ(xp->store().packed(), v.source > 0) << v.name;
    EXPECT_EQ(xp->n_hash_layers(), 0) << v.name;  // qwen35moe routes every layer by its router
    const Run streamed = run(p, xp.get(), toks, steps);
    expect_identical(resident, streamed, name + ": " + v.name);
    const auto st = xp->stats();
    if (v.slots > 0) {
      EXPECT_GT(st.misses, static_cast<uint64_t>(xp->layout().n_layer)) << v.name;  // misses forced
      EXPECT_GT(st.evictions, 0u) << v.name;
    }
    if (v.prefetch && v.slots > 0) {
      // Decode hands layer il+1's guesses to the provider; those not cached are read ahead,
      // or dropped when no slot is free before their layer comes.
      const int k = stream::kPrefetchLookahead;
      EXPECT_GT(st.prefetch_issued[k] + st.prefetch_dropped[k], 0u) << v.name;
    }
  }
  // A streamed run that is not identical must be detectable: the comparison sees one flipped
  // expert weight (so the equality above is not vacuous).
  {
    const std::string q = test::tmp_file(name + "_flipped.gguf");
    fs::copy_file(p, q, fs::copy_options::overwrite_existing);
    const gguf::TensorInfo* t = f0.find_tensor("blk.0.ffn_down_exps.weight");
    {
      std::fstream io(q, std::ios::in | std::ios::out | std::ios::binary);
      // Every expert of layer 0: whichever the router picks reads a changed byte.
      const uint64_t per = t->n_bytes / t->ne[2];
      for (uint64_t e = 0; e < t->ne[2]; ++e) {
        io.seekg(static_cast<std::streamoff>(t->file_offset + e * per + 7));
        char b = 0;
        io.read(&b, 1);
        b = static_cast<char>(b ^ 0x40);
        io.seekp(static_cast<std::streamoff>(t->file_offset + e * per + 7));
        io.write(&b, 1);
      }
    }
    stream::ProviderOptions o;
    o.store.packed_path = "-";
    gguf::File f = gguf::File::open(q);
    auto xp = stream::ExpertProvider::open(f, o);
    const Run changed = run(q, xp.get(), toks, steps);
    EXPECT_NE(std::memcmp(resident.prefill.data(), changed.prefill.data(), resident.prefill.size() * 4), 0);
  }
}

}  // namespace

TEST(StreamQwen, F32Experts) {
  const std::string p = qwen_file("q_f32", tiny(32, 16), convert::Recipe::F32);
  check_model("q_f32", p, 40, 6, GgmlType::F32);
}

TEST(StreamQwen, Q4KExperts) {
  // n_in of every expert matrix is 256: the flash-q4 recipe gives Q4_K (as the published
  // Qwen3.6 Q4_K_S files); 40 tokens over 16 experts, top 4, put 3+ tokens on most experts.
  const std::string p = qwen_file("q_q4k", tiny(256, 256), convert::Recipe::FlashQ4);
  check_model("q_q4k", p, 40, 6, GgmlType::Q4_K);
}

TEST(StreamQwen, EngineStreamsWithTheSameLogits) {
  const std::string p = qwen_file("q_engine", tiny(32, 16), convert::Recipe::F32);
  std::mt19937 rng(5);
  std::vector<int32_t> toks(30);
  for (auto& t : toks) t = static_cast<int32_t>(rng() % 256);
  auto logits = [&](const EngineOptions& eo) {
    auto eng = Engine::open(eo);
    auto s = eng->new_session();
    s->eval(toks);
    auto l = s->logits();
    return std::make_pair(std::vector<float>(l.begin(), l.end()), eng->memory_plan().expert_streaming);
  };
  EngineOptions eo;
  eo.model_path = p;
  eo.threads = 2;
  eo.ctx_size = 256;
  eo.max_batch = 8;
  const auto [resident, none] = logits(eo);
  EXPECT_TRUE(none.empty()) << none;
  eo.ssd_streaming = true;
  eo.expert_cache_host = "3";  // below one token's working set: 4 layers x 4 experts
  try {
    Engine::open(eo);
    FAIL() << "a budget below one token's working set was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("working set"), std::string::npos) << e.what();
  }
  eo.expert_cache_host = "20";
  const auto [streamed, line] = logits(eo);
  EXPECT_NE(line.find("20 slots"), std::string::npos) << line;
  ASSERT_EQ(resident.size(), streamed.size());
  EXPECT_EQ(std::memcmp(resident.data(), streamed.data(), resident.size() * 4), 0);
}
