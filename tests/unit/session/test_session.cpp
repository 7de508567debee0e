// Engine and Session basics: open, info, memory plan, sync reuse, context overflow,
// cancellation, progress, sampling and generation.
#include <atomic>

#include "gguf/gguf.h"
#include "session_fixture.h"

namespace ds4::test {
namespace {

TEST(Engine, OpensTheChatModelAndReportsItsIdentity) {
  auto e = open_engine();
  const auto& in = e->info();
  EXPECT_EQ(in.architecture, "deepseek4");
  EXPECT_EQ(in.n_vocab, 264);
  EXPECT_EQ(in.n_layer, 4);
  EXPECT_EQ(in.n_ctx_train, 4096);
  EXPECT_EQ(in.n_ctx, 4096);
  ASSERT_TRUE(in.has_tokenizer);
  EXPECT_EQ(in.bos_id, 256);
  EXPECT_EQ(in.eos_id, 257);
  EXPECT_EQ(in.stop_ids, (std::vector<int32_t>{257, 258}));  // EOS, <｜User｜>
  EXPECT_EQ(in.model_id.size(), 16u);
  EXPECT_EQ(e->tokenizer().encode("hi", false), (std::vector<int32_t>{'h', 'i'}));
  // Another model file (other random weights) has another identity.
  EXPECT_NE(open_engine(512, 2)->info().model_id, in.model_id);
}

TEST(Engine, ErrorsNameTheProblem) {
  EngineOptions o;
  o.model_path = "/nonexistent/model.gguf";
  try {
    Engine::open(o);
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("/nonexistent/model.gguf: model file not found"), std::string::npos);
  }
  o.model_path = chat_model_path();
  o.backend = "cuda";
  try {
    Engine::open(o);
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("no CUDA support"), std::string::npos) << err.what();
  }
}

// The FLOP count by hand from the synthetic model's shapes (chat_model.h, SynthConfig defaults:
// d 64, 4 heads of 64, q rank 32, 2 output groups of rank 32, 4 hyper-connection streams, experts
// 2 of 8 of width 32, one shared expert, indexer 4 heads of 32 with top-k 4, window 8, ratios
// 0/4/8/4, vocab 264), not from the tensor table the plan walks.
TEST(Engine, FlopCountFollowsTheShapes) {
  auto e = open_engine();
  const FlopCount& f = e->memory_plan().flops;
  const double hc = 2 * (4 * 64) * 24;                    // hc_attn_fn, hc_ffn_fn: [4 d, (2 + 4) 4]
  const double attn = 64 * 32 + 32 * 256 + 64 * 64 + 128 * 64 + 64 * 64;  // q_a, q_b, kv, out_a, out_b
  const double ffn = 64 * 8 + 2 * 3 * 64 * 32 + 3 * 64 * 32;  // router, 2 experts, the shared one
  const double layer = hc + attn + ffn;
  const double csa = 2 * 64 * 128 + (32 * 128 + 64 * 4 + 2 * 64 * 64);  // compressor (2 lanes), indexer
  const double hca = 2 * 64 * 64;                                       // compressor (1 lane)
  const double matrices = 4 * layer + 2 * csa + hca + (4 * 64) * 4;     // + output_hc_fn
  EXPECT_DOUBLE_EQ(f.matrix_per_token, 2 * matrices);
  EXPECT_DOUBLE_EQ(f.head, 2.0 * 64 * 264);
  ASSERT_TRUE(f.attention_counted());
  const double row = 4.0 * 4 * 64;  // a score and a weighted sum for each of 4 heads of 64
  EXPECT_DOUBLE_EQ(f.attention(2), 4 * 3 * row);  // 3 window rows in each layer, nothing compressed yet
  // pos 15: 8 window rows each; CSA 4 rows (= top-k: no indexer), HCA 2.
  EXPECT_DOUBLE_EQ(f.attention(15), (8 + 12 + 10 + 12) * row);
  // pos 63: CSA has 16 rows, keeps top-k 4 and scores all 16 (4 indexer heads of 32); HCA 8.
  EXPECT_DOUBLE_EQ(f.attention(63), (8 + 12 + 16 + 12) * row + 2 * (2.0 * 4 * 32 * 16));
  EXPECT_DOUBLE_EQ(f.prompt(14, 2), 2 * f.matrix_per_token + f.attention(14) + f.attention(15) + f.head);
}

// max_batch 0 is the backend's default, which options() reports; a negative one is an error.
TEST(Engine, MaxBatchZeroIsTheBackendsDefault) {
  EXPECT_EQ(default_max_batch("cpu"), 512);
  EXPECT_EQ(default_max_batch("cuda"), 4096);
  EXPECT_EQ(default_max_batch("cuda", true), 2048);  // streaming: the scratch would shrink the gpu tier
  EXPECT_EQ(default_max_batch("cpu", true), 512);
  EngineOptions o;
  o.model_path = chat_model_path();
  o.threads = 2;
  EXPECT_EQ(o.max_batch, 0);
  EXPECT_EQ(Engine::open(o)->options().max_batch, 512);
  o.max_batch = 7;
  EXPECT_EQ(Engine::open(o)->options().max_batch, 7);
  o.max_batch = -1;
  try {
    Engine::open(o);
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("max_batch -1 must be at least 1"), std::string::npos) << err.what();
  }
}

// The plan's figures against the vectors a session really holds (sizes counted here from the
// State's own fields after evaluating 64 tokens: a multiple of every compress ratio).
TEST(Engine, MemoryPlanMatchesTheStateItDescribes) {
  auto e = open_engine();
  const auto& p = e->memory_plan();
  // Independent arithmetic from the synthetic model's shape (chat_model.h): 4 layers, window 8,
  // head_dim 64, ratios 0/4/8/4, indexer dim 32, vocab 264.
  const uint64_t fixed = 264 + 4 * 8 * 64 + 2 * (8 * 128) + 2 * (8 * 64) + 2 * (8 * 64) + 2 * (8 * 128) + 2 * (8 * 64);
  EXPECT_EQ(p.state_fixed_bytes, fixed * 4);
  // Per token: the id, 64/4 + 32/4 (CSA), 64/8 (HCA), 64/4 + 32/4 (CSA) floats = 57 x 4 bytes.
  EXPECT_EQ(p.state_bytes_per_token, 57u * 4);
  EXPECT_EQ(p.state_bytes_at_ctx, p.state_fixed_bytes + 57u * 4 * 4096);
  EXPECT_GT(p.weights_bytes, 0u);
  EXPECT_GE(p.file_bytes, p.weights_bytes);
  EXPECT_FALSE(p.describe().empty());
}

// The weight bytes one decode token reads, by another route from the file's tensor table: all
// the weights, less the routed experts a token does not use (all but k of each layer's n) and
// all but one row of the embedding and of the hash-routing tables.
TEST(Engine, DecodeBytesPerTokenCountsTheUsedExpertsAndOneEmbeddingRow) {
  auto e = open_engine();
  const auto& p = e->memory_plan();
  const auto f = gguf::File::open(chat_model_path());
  const double k = static_cast<double>(f.get_uint("deepseek4.expert_used_count").value());
  double unused = 0;
  int expert_tensors = 0, by_row = 0;
  for (const auto& t : f.tensors()) {
    if (t.name.ends_with("_exps.weight")) {
      ASSERT_EQ(t.ne.size(), 3u) << t.name;
      unused += static_cast<double>(t.n_bytes) * (1.0 - k / static_cast<double>(t.ne[2]));
      ++expert_tensors;
    } else if (t.name == "token_embd.weight" || t.name.ends_with("tid2eid.weight")) {
      unused += static_cast<double>(t.n_bytes) * (1.0 - 1.0 / static_cast<double>(t.ne.back()));
      ++by_row;
    }
  }
  EXPECT_EQ(expert_tensors, 3 * 4);  // gate, up, down of each of the 4 layers
  EXPECT_GE(by_row, 1);
  EXPECT_NEAR(static_cast<double>(p.decode_bytes_per_token), static_cast<double>(p.weights_bytes) - unused, 1.0);
  EXPECT_LT(p.decode_bytes_per_token, p.weights_bytes);
  EXPECT_NE(p.describe().find("read per decode token"), std::string::npos);
}

TEST(Session, SyncEvaluatesOnlyWhatIsNew) {
  auto e = open_engine();
  auto s = e->new_session();
  const auto a = random_tokens(20, 1), b = random_tokens(10, 2);
  auto r = s->sync(a);
  EXPECT_EQ(r.reused, 0);
  EXPECT_EQ(r.evaluated, 20);
  auto ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  r = s->sync(ab);
  EXPECT_EQ(r.reused, 20);
  EXPECT_EQ(r.replayed, 0);
  EXPECT_EQ(r.evaluated, 10);
  EXPECT_EQ(s->tokens(), ab);
  r = s->sync(ab);  // nothing new
  EXPECT_EQ(r.evaluated + r.replayed, 0);

  auto fresh = e->new_session();
  fresh->eval(ab);
  EXPECT_EQ(to_vec(s->logits()), to_vec(fresh->logits()));  // chunking is batch-invariant (backend.h)
}

TEST(Session, SyncToADivergingPromptReplaysFromTheNearestCheckpoint) {
  auto e = open_engine();
  SessionOptions so;
  so.checkpoint_interval = 16;
  auto s = e->new_session(so);
  const auto a = random_tokens(40, 3);
  s->sync(a);  // checkpoints at 16, 32 and 40 (end of call)
  auto c = std::vector<int32_t>(a.begin(), a.begin() + 35);
  c.push_back(7);
  c.push_back(9);
  auto r = s->sync(c);
  EXPECT_EQ(r.reused, 35);
  EXPECT_EQ(r.replayed, 3);  // from the checkpoint at 32
  EXPECT_EQ(r.evaluated, 2);
  auto fresh = e->new_session(so);
  fresh->eval(c);
  EXPECT_EQ(to_vec(s->logits()), to_vec(fresh->logits()));
}

TEST(Session, ContextOverflowNamesTheExcessAndLeavesTheStateAlone) {
  auto e = open_engine();
  SessionOptions so;
  so.n_ctx = 32;
  auto s = e->new_session(so);
  s->eval(random_tokens(30, 4));
  const auto before = to_vec(s->logits());
  try {
    s->eval(random_tokens(5, 5));
    FAIL();
  } catch (const ContextOverflow& err) {
    EXPECT_EQ(err.n_ctx(), 32);
    EXPECT_EQ(err.requested(), 35);
    EXPECT_EQ(err.over_by(), 3);
    EXPECT_EQ(std::string(err.what()), "context overflow: 35 tokens do not fit the 32-token context (3 over)");
  }
  EXPECT_EQ(s->n_past(), 30);
  EXPECT_EQ(to_vec(s->logits()), before);
  EXPECT_THROW(s->eval(std::vector<int32_t>{1, 264}), Error);  // id outside the vocabulary
  EXPECT_EQ(s->n_past(), 30);
}

TEST(Session, CancellationStopsBetweenChunksAndProgressCounts) {
  auto e = open_engine(/*max_batch=*/8);
  auto s = e->new_session();
  std::atomic<bool> stop{false};
  std::vector<std::pair<int64_t, int64_t>> seen;
  EvalOptions eo;
  eo.cancel = &stop;
  eo.progress = [&](int64_t done, int64_t total) {
    seen.emplace_back(done, total);
    if (done >= 16) stop = true;
  };
  auto r = s->eval(random_tokens(50, 6), eo);
  EXPECT_TRUE(r.cancelled);
  EXPECT_EQ(s->n_past(), 16);
  EXPECT_EQ(r.evaluated, 16);
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{{8, 50}, {16, 50}}));
  // The state is usable: continue, and match an uninterrupted evaluation.
  const auto all = random_tokens(50, 6);
  stop = false;
  s->sync(all);
  auto fresh = e->new_session();
  fresh->eval(all);
  EXPECT_EQ(to_vec(s->logits()), to_vec(fresh->logits()));
}

TEST(Session, GreedyGenerationFollowsTheArgmaxAndSeededSamplingRepeats) {
  auto e = open_engine();
  const auto prompt = random_tokens(12, 7);
  auto run = [&](SamplerConfig sc, std::vector<float>* first_logits) {
    auto s = e->new_session();
    s->eval(prompt);
    if (first_logits) *first_logits = to_vec(s->logits());
    s->set_sampler(sc);
    std::vector<int32_t> out;
    GenerateOptions go;
    go.max_tokens = 16;
    go.stop_at_stop_tokens = false;
    go.logprobs_top_n = 3;
    auto g = s->generate(go, [&](const GeneratedToken& t) {
      out.push_back(t.id);
      EXPECT_EQ(t.logprobs.chosen.id, t.id);
      EXPECT_EQ(t.logprobs.top.size(), 3u);
      return true;
    });
    EXPECT_EQ(g.n_generated, 16);
    EXPECT_EQ(g.reason, StopReason::MaxTokens);
    EXPECT_EQ(s->n_past(), 12 + 16);  // every generated token was evaluated
    return out;
  };
  SamplerConfig greedy;
  greedy.temperature = 0;
  std::vector<float> l0;
  const auto g1 = run(greedy, &l0);
  EXPECT_EQ(g1[0], argmax(l0));
  // Greedy continuation = argmax at every step, checked by re-evaluating the sequence.
  auto s = e->new_session();
  auto seq = prompt;
  for (size_t i = 0; i < g1.size(); ++i) {
    s->sync(seq);
    EXPECT_EQ(argmax(s->logits()), g1[i]) << "step " << i;
    seq.push_back(g1[i]);
  }
  SamplerConfig seeded;
  seeded.seed = 1234;
  seeded.min_p = 0;  // a random model's flat distribution: let many tokens compete
  const auto a = run(seeded, nullptr), b = run(seeded, nullptr);
  EXPECT_EQ(a, b);
  seeded.seed = 99;
  EXPECT_NE(run(seeded, nullptr), a);
}

TEST(Session, GenerationStopsAtStopTokensWithoutEvaluatingThem) {
  auto e = open_engine();
  auto s = e->new_session();
  s->eval(random_tokens(5, 8));
  SampleOptions force_eos;
  force_eos.adjust_logits = [](std::span<float> l) { l[257] = 1e9f; };
  GenerateOptions go;
  go.sample = force_eos;
  int calls = 0;
  auto g = s->generate(go, [&](const GeneratedToken& t) {
    ++calls;
    EXPECT_TRUE(t.is_stop);
    EXPECT_EQ(t.id, 257);
    return true;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(g.reason, StopReason::StopToken);
  EXPECT_EQ(s->n_past(), 5);
  std::atomic<bool> stop{true};
  go = {};
  go.cancel = &stop;
  EXPECT_EQ(s->generate(go, [](const GeneratedToken&) { return true; }).reason, StopReason::Cancelled);
  EXPECT_THROW(e->new_session()->generate(go, [](const GeneratedToken&) { return true; }), Error);
}

}  // namespace
}  // namespace ds4::test
