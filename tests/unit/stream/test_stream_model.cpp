// Streaming is bit-identical to resident mode: logits of a prefill and of token-by-token greedy
// decoding, compared byte for byte, on the committed fixtures (quant_small's flash-q2 GGUF,
// mixed_small converted to f32, the demo model) and a mixed-precision synthetic model, across
// budgets that force misses (1 slot up to everything), both policies, prefetch on/off, both
// I/O engines, GGUF and packed sources (kept or freed). Also the engine's guards.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "convert/convert_hf.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "model/deepseek4/model.h"
#include "session/engine_impl.h"
#include "stream/pack.h"
#include "stream/provider.h"
#include "stream_fixture.h"
#include "stream_run.h"

using namespace ds4;
using namespace ds4::model::deepseek4;
namespace fs = std::filesystem;

namespace {

using Run = test::StreamRun;

Run run(const std::string& path, stream::ExpertProvider* xp, const std::vector<int32_t>& toks, int steps) {
  Options o;
  o.experts = xp;
  o.max_batch = 16;  // the prompt runs in chunks: batched acquires of several tokens
  return test::run_deepseek4(path, o, toks, steps);
}

void expect_identical(const Run& a, const Run& b, const std::string& what) {
  ASSERT_EQ(a.prefill.size(), b.prefill.size());
  EXPECT_EQ(std::memcmp(a.prefill.data(), b.prefill.data(), a.prefill.size() * 4), 0) << what << ": prefill logits";
  EXPECT_EQ(a.greedy, b.greedy) << what << ": greedy continuation";
  EXPECT_EQ(std::memcmp(a.decode.data(), b.decode.data(), a.decode.size() * 4), 0) << what << ": decode logits";
}

struct Variant {
  std::string name;
  int source;  // 0 GGUF, 1 packed (kept), 2 packed with the GGUF freed
  int64_t slots;
  stream::PolicyKind policy;
  bool prefetch;
  stream::IoKind io;
  bool record_reads;
};

void check_model(const std::string& name, const std::string& src, int64_t n_tokens, int steps) {
  const std::string p = test::tmp_file(name + ".gguf");
  fs::copy_file(src, p, fs::copy_options::overwrite_existing);  // never touch the committed file
  fs::remove(p + ".experts");
  const auto vocab = gguf::File::open(p).find_tensor("token_embd.weight")->ne[1];
  std::mt19937 rng(7);
  std::vector<int32_t> toks(static_cast<size_t>(n_tokens));
  for (auto& t : toks) t = static_cast<int32_t>(rng() % vocab);
  const Run resident = run(p, nullptr, toks, steps);

  using stream::IoKind;
  using stream::PolicyKind;
  const std::vector<Variant> variants = {
      {"gguf 1 slot lru no-prefetch pread", 0, 1, PolicyKind::Lru, false, IoKind::Pread, false},
      {"gguf 3 slots hot prefetch uring", 0, 3, PolicyKind::Hot, true, IoKind::Auto, false},
      {"gguf all hot prefetch", 0, 0, PolicyKind::Hot, true, IoKind::Auto, false},
      {"packed 2 slots lru prefetch record-reads", 1, 2, PolicyKind::Lru, true, IoKind::Auto, true},
      {"packed 5 slots hot prefetch pread", 1, 5, PolicyKind::Hot, true, IoKind::Pread, false},
      {"freed 4 slots hot prefetch", 2, 4, PolicyKind::Hot, true, IoKind::Auto, false},
  };
  for (const auto& v : variants) {
    if (v.source == 1 && !fs::exists(p + ".experts")) stream::pack_experts(p, p + ".experts", true);
    if (v.source == 2) {
      fs::remove(p + ".experts");
      stream::pack_experts(p, p + ".experts", false);
    }
    stream::ProviderOptions o;
    o.budget_slots = v.slots;
    o.policy = v.policy;
    o.prefetch_hash = o.prefetch_lookahead = o.protect = v.prefetch;
    o.io = v.io;
    o.record_reads = v.record_reads;
    o.store.verify_reads = true;
    o.store.packed_path = v.source == 0 ? "-" : "";
    gguf::File f = gguf::File::open(p);
    auto xp = stream::ExpertProvider::open(f, o);
    ASSERT_EQ(xp->store().packed(), v.source > 0) << v.name;
    const Run streamed = run(p, xp.get(), toks, steps);
    expect_identical(resident, streamed, name + ": " + v.name);
    const auto st = xp->stats();
    if (v.slots > 0) {
      EXPECT_GT(st.misses, static_cast<uint64_t>(xp->layout().n_layer)) << v.name;  // misses forced
      EXPECT_GT(st.evictions, 0u) << v.name;
    }
    if (v.prefetch && v.slots > 0 && xp->n_hash_layers() > 0) {
      EXPECT_GT(st.prefetch_issued[stream::kPrefetchHash], 0u) << v.name;
    }
  }
}

}  // namespace

TEST(StreamModel, QuantSmallFlashQ2Fixture) {
  check_model("m_quant_small", DS4_FIXTURES_DIR "/deepseek4/quant_small/model-flash-q2.gguf", 40, 6);
}

TEST(StreamModel, MixedSmallFixture) {
  const std::string out = test::tmp_file("m_mixed_small_src.gguf");
  convert::ConvertOptions c;
  c.hf_dir = DS4_FIXTURES_DIR "/deepseek4/mixed_small";
  c.out_path = out;
  c.recipe = convert::Recipe::F32;
  c.threads = 2;
  convert::convert_hf(c);
  check_model("m_mixed_small", out, 40, 6);
}

TEST(StreamModel, DemoModel) { check_model("m_demo", DS4_SOURCE_DIR "/models/ds4-demo.gguf", 24, 6); }

TEST(StreamModel, MixedPrecisionSynthetic) {
  const std::string p = test::write_stream_model("m_synth_src", test::stream_config());
  check_model("m_synth", p, 30, 6);
}

TEST(StreamModel, EngineGuardsAndStats) {
  const std::string p = test::tmp_file("m_engine.gguf");
  fs::copy_file(DS4_SOURCE_DIR "/models/ds4-demo.gguf", p, fs::copy_options::overwrite_existing);
  fs::remove(p + ".experts");
  EngineOptions eo;
  eo.model_path = p;
  eo.threads = 2;
  eo.ssd_streaming = true;
  eo.expert_cache_host = "3";  // below one token's working set (6 layers x 2 experts)
  try {
    Engine::open(eo);
    FAIL() << "a budget below one token's working set was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("working set"), std::string::npos) << e.what();
  }
  eo.expert_cache_host = "12";
  {
    auto eng = Engine::open(eo);
    EXPECT_NE(eng->memory_plan().expert_streaming.find("12 slots"), std::string::npos)
        << eng->memory_plan().expert_streaming;
    auto s = eng->new_session();
    s->sync(std::vector<int32_t>{1, 5, 9, 13, 17, 21, 25, 29});
    EXPECT_NE(eng->expert_stats().find("misses"), std::string::npos);
  }
  // Freed experts: the engine streams from the packed file by itself, and refuses to start
  // without it.
  stream::pack_experts(p, p + ".experts", false);
  EngineOptions plain;
  plain.model_path = p;
  plain.threads = 2;
  EXPECT_FALSE(Engine::open(plain)->memory_plan().expert_streaming.empty());
  // The default chunk follows: a device backend would stream this file, so it takes 2048 rows.
  {
    EngineOptions dev = plain;
    dev.backend = "cuda";
    EXPECT_TRUE(session::device_streams_experts(gguf::File::open(p), dev));
    dev.model_path = DS4_SOURCE_DIR "/models/ds4-demo.gguf";
    const gguf::File whole = gguf::File::open(dev.model_path);
    EXPECT_FALSE(session::device_streams_experts(whole, dev));
    dev.ssd_streaming = true;
    EXPECT_TRUE(session::device_streams_experts(whole, dev));
    dev.backend = "cpu";
    EXPECT_FALSE(session::device_streams_experts(whole, dev));
  }
  fs::rename(p + ".experts", p + ".gone");
  try {
    Engine::open(plain);
    FAIL() << "a freed GGUF started without its packed file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("packed expert file"), std::string::npos) << e.what();
  }
  EngineOptions resident;
  resident.model_path = DS4_SOURCE_DIR "/models/ds4-demo.gguf";
  resident.threads = 2;
  EXPECT_TRUE(Engine::open(resident)->memory_plan().expert_streaming.empty());
  EXPECT_EQ(Engine::open(resident)->expert_stats(), "");
}

// The residency plan (stream/planner.h) as the engine applies it: resident when it fits,
// --ssd-streaming sizing the cache from the memory given, and the refusals with their figures.
TEST(StreamModel, ResidencyPlanOnTheDemoModel) {
  auto base = [] {
    EngineOptions eo;
    eo.model_path = DS4_SOURCE_DIR "/models/ds4-demo.gguf";
    eo.threads = 2;
    eo.ctx_size = 512;
    return eo;
  };
  auto error_of = [](const EngineOptions& eo) -> std::string {
    try {
      Engine::open(eo);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EngineOptions eo = base();
  eo.host_memory_gib = 64;
  {
    auto eng = Engine::open(eo);
    EXPECT_NE(eng->memory_plan().residency.find("resident, chosen automatically"), std::string::npos)
        << eng->memory_plan().residency;
    EXPECT_TRUE(eng->memory_plan().expert_streaming.empty());
    EXPECT_NE(eng->memory_plan().describe().find("residency"), std::string::npos);
  }
  eo.ssd_streaming = true;  // no budget given: every expert fits in 64 GiB, so all of them are cached
  std::string every_expert;
  {
    auto eng = Engine::open(eo);
    const std::string& r = eng->memory_plan().residency;
    EXPECT_NE(r.find("streaming (--ssd-streaming)"), std::string::npos) << r;
    // "host cache X of X experts": the plan's cache is the experts' total.
    const size_t a = r.find("host cache "), b = r.find(" of ", a), c = r.find(" experts", b);
    ASSERT_TRUE(a != std::string::npos && b != std::string::npos && c != std::string::npos) << r;
    EXPECT_EQ(r.substr(a + 11, b - a - 11), r.substr(b + 4, c - b - 4)) << r;
    every_expert = eng->memory_plan().expert_streaming;
  }
  {  // the same cache as asking the provider for every expert without a plan limit
    EngineOptions all = base();
    all.ssd_streaming = true;
    all.host_memory_gib = 1000;
    EXPECT_EQ(Engine::open(all)->memory_plan().expert_streaming, every_expert);
  }
  eo.resident = true;
  EXPECT_NE(error_of(eo).find("contradict"), std::string::npos);
  eo.ssd_streaming = false;
  eo.memory_reserve_gib = 1e6;
  EXPECT_NE(error_of(eo).find("--resident: the model does not fit"), std::string::npos) << error_of(eo);
  eo.resident = false;  // auto: neither resident nor streamed fits
  EXPECT_NE(error_of(eo).find("not enough memory to run this model"), std::string::npos) << error_of(eo);
  eo.memory_reserve_gib = -1;
  EXPECT_NE(error_of(eo).find("must not be negative"), std::string::npos) << error_of(eo);
  eo = base();  // the server's sessions are all counted and printed
  eo.host_memory_gib = 64;
  eo.planned_sessions = 3;
  {
    auto eng = Engine::open(eo);
    EXPECT_NE(eng->memory_plan().residency.find("sessions 3 x"), std::string::npos) << eng->memory_plan().residency;
  }
  eo.planned_sessions = 0;
  EXPECT_NE(error_of(eo).find("planned sessions 0"), std::string::npos) << error_of(eo);
}
