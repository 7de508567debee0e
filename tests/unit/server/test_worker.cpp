// The inference worker over a fake byte-level model: prefix reuse, stop sequences, max
// tokens, DSML tool calls (events, argument deltas, recorded block, greedy structure),
// cancellation and queue withdrawal.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "chat/markers.h"
#include "server/metrics.h"
#include "server/worker.h"

namespace ds4::server {
namespace {

constexpr int32_t kEos = 256;

// Token = one byte (id = byte value), plus EOS = 256. "Generation" replays `script` and then
// EOS. Records each sampling call's temperature override and the tokens evaluated.
class FakeModel : public InferenceModel {
 public:
  std::string script;
  // When set, generation replays these multi-byte tokens (ids 1000 + i) instead of `script`.
  std::vector<std::string> pieces;
  std::vector<std::optional<float>> temperatures;
  int64_t evaluated = 0;
  std::atomic<int> sampled{0};
  int sample_delay_ms = 0;

  int64_t n_ctx() const override { return 1 << 16; }
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string piece(int32_t id) const override {
    if (id >= 1000) return pieces.at(static_cast<size_t>(id - 1000));
    return id == kEos ? std::string() : std::string(1, static_cast<char>(id));
  }
  bool is_stop(int32_t id) const override { return id == kEos; }
  std::string model_name() const override { return "fake"; }
  const std::vector<int32_t>& tokens() const override { return tokens_; }
  SyncStats sync(std::span<const int32_t> t, const std::atomic<bool>*) override {
    size_t common = 0;
    while (common < tokens_.size() && common < t.size() && tokens_[common] == t[common]) ++common;
    tokens_.assign(t.begin(), t.end());
    evaluated += static_cast<int64_t>(t.size() - common);
    pos_ = 0;
    return SyncStats{static_cast<int64_t>(common), static_cast<int64_t>(t.size() - common), false, 0};
  }
  void set_sampler(const SamplerConfig&) override {}
  int32_t sample(const SampleOptions& o) override {
    if (sample_delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sample_delay_ms));
    temperatures.push_back(o.temperature);
    ++sampled;
    if (!pieces.empty()) return pos_ < pieces.size() ? static_cast<int32_t>(1000 + pos_++) : kEos;
    return pos_ < script.size() ? static_cast<unsigned char>(script[pos_++]) : kEos;
  }
  Logprobs logprobs(int32_t chosen, int32_t n_top) const override {
    Logprobs lp;
    lp.chosen = {chosen, -0.5f};
    for (int i = 0; i < n_top; ++i) lp.top.push_back({chosen, -0.5f});
    return lp;
  }
  void append(int32_t id) override {
    tokens_.push_back(id);
    ++evaluated;
  }

 private:
  std::vector<int32_t> tokens_;
  size_t pos_ = 0;
};

struct Harness {
  FakeModel model;
  Metrics metrics;
  SharedToolCache tools{16};
  std::unique_ptr<Worker> worker;
  Harness() { worker = std::make_unique<Worker>(model, WorkerOptions{}, metrics, tools); }

  std::shared_ptr<Job> job(const std::string& prompt, bool chat, int64_t max_tokens = 1000) {
    auto j = std::make_shared<Job>();
    j->req.api = ApiKind::Chat;
    if (chat) j->req.conversation = chat::Conversation{};
    j->prompt_text = prompt;
    j->prompt = model.encode(prompt, true);
    j->max_tokens = max_tokens;
    return j;
  }
  std::vector<GenEvent> run(const std::shared_ptr<Job>& j) {
    EXPECT_TRUE(worker->submit(j));
    j->wait_finished();
    std::vector<GenEvent> evs;
    j->wait_events(evs, std::chrono::milliseconds(0));
    return evs;
  }
};

std::string joined(const std::vector<GenEvent>& evs, GenEvent::Kind k) {
  std::string s;
  for (const auto& e : evs) {
    if (e.kind == k) s += e.text;
  }
  return s;
}

TEST(ServerWorker, RawTextStopSequenceAndPrefixReuse) {
  Harness h;
  h.model.script = "hello STOP world";
  auto j = h.job("PROMPT", false);
  j->req.stop = {"STOP"};
  auto evs = h.run(j);
  EXPECT_EQ(joined(evs, GenEvent::Kind::Text), "hello ");
  ASSERT_EQ(evs.back().kind, GenEvent::Kind::Done);
  EXPECT_EQ(evs.back().finish, Finish::StopSequence);
  EXPECT_EQ(evs.back().stop_sequence, "STOP");
  EXPECT_EQ(evs.back().usage.prompt_tokens, 6);
  EXPECT_EQ(evs.back().usage.cached_tokens, 0);
  EXPECT_EQ(evs.back().usage.completion_tokens, 10);  // through the 'P' of STOP

  // The next prompt extends what the session holds: prompt + sampled tokens (the last one
  // sampled was never evaluated).
  h.model.script = "ok";
  auto j2 = h.job("PROMPThello STOP and more", false);
  auto evs2 = h.run(j2);
  EXPECT_EQ(evs2.back().usage.cached_tokens, 6 + 9);
  EXPECT_EQ(evs2.back().finish, Finish::Stop);
  EXPECT_EQ(joined(evs2, GenEvent::Kind::Text), "ok");
}

TEST(ServerWorker, MaxTokens) {
  Harness h;
  h.model.script = "abcdefgh";
  auto evs = h.run(h.job("p", false, 3));
  EXPECT_EQ(joined(evs, GenEvent::Kind::Text), "abc");
  EXPECT_EQ(evs.back().finish, Finish::Length);
  EXPECT_EQ(evs.back().usage.completion_tokens, 3);
}

TEST(ServerWorker, ReasoningThenToolCall) {
  Harness h;
  const std::string block =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Par\"is</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">3</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  h.model.script = "hmm</think>Sure." + block + "IGNORED";
  auto j = h.job("<｜User｜>q<｜Assistant｜><think>", true);
  j->starts_in_reasoning = true;
  auto evs = h.run(j);
  EXPECT_EQ(joined(evs, GenEvent::Kind::Reasoning), "hmm");
  EXPECT_EQ(joined(evs, GenEvent::Kind::Text), "Sure.");
  std::string id, args, end_args;
  for (const auto& e : evs) {
    if (e.kind == GenEvent::Kind::ToolStart) {
      id = e.tool_id;
      EXPECT_EQ(e.tool_name, "get");
    }
    if (e.kind == GenEvent::Kind::ToolArgs) args += e.text;
    if (e.kind == GenEvent::Kind::ToolEnd) end_args = e.text;
  }
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(id.size(), 5u + 24u);
  EXPECT_EQ(end_args, "{\"city\": \"Par\\\"is\", \"n\": 3}");
  EXPECT_EQ(args, end_args);
  // Values stream while generated: one delta per value character here (byte tokens).
  int arg_events = 0;
  for (const auto& e : evs) arg_events += e.kind == GenEvent::Kind::ToolArgs;
  EXPECT_GE(arg_events, 6 + 4);
  EXPECT_EQ(evs.back().finish, Finish::ToolCalls);
  EXPECT_EQ(evs.back().usage.reasoning_tokens, static_cast<int64_t>(std::string("hmm</think>").size()));
  // Generation stopped at the end of the block.
  EXPECT_EQ(evs.back().usage.completion_tokens,
            static_cast<int64_t>(std::string("hmm</think>Sure.").size() + block.size()));
  // The sampled block is recorded for replay under the call id.
  EXPECT_EQ(h.tools.get_all({id}), std::optional<std::string>(block));
  // Greedy (temperature 0) exactly while inside structure. Not greedy: everything up to the
  // complete opening tag (a block cannot be known before it), and each parameter value
  // together with its closing tag (the value's end is only known once the tag is complete).
  size_t greedy = 0;
  for (const auto& t : h.model.temperatures) greedy += t.has_value() && *t == 0.0f;
  size_t lead = std::string("hmm</think>Sure.").size() + std::string("\n\n<｜DSML｜tool_calls>").size();
  size_t total = h.model.temperatures.size();
  EXPECT_EQ(total, lead + block.size() - std::string("\n\n<｜DSML｜tool_calls>").size());
  std::string pattern;
  for (const auto& t : h.model.temperatures) pattern += t.has_value() && *t == 0.0f ? '1' : '0';
  const size_t close = chat::mark::kParamClose.size();
  EXPECT_EQ(greedy, total - lead - (std::string("Par\"is").size() + close) - (1 + close)) << pattern;
}

// The DSML parser is fed one character at a time; what one token produced still goes out as
// one event per kind (one SSE delta per token, not per character).
TEST(ServerWorker, OneEventPerTokenAndKind) {
  Harness h;
  h.model.pieces = {"Think", "ing done", "</think>", "Hello", " world, ", "this is", " text.",
                    "\n\n<｜DSML｜tool_calls>\n", "<｜DSML｜invoke name=\"get\">\n",
                    "<｜DSML｜parameter name=\"city\" string=\"true\">", "Par", "is and",
                    " more</｜DSML｜parameter>\n", "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"};
  auto j = h.job("<｜User｜>q<｜Assistant｜><think>", true);
  j->starts_in_reasoning = true;
  auto evs = h.run(j);
  auto texts = [&](GenEvent::Kind k) {
    std::vector<std::string> out;
    for (const auto& e : evs) {
      if (e.kind == k) out.push_back(e.text);
    }
    return out;
  };
  EXPECT_EQ(texts(GenEvent::Kind::Reasoning), (std::vector<std::string>{"Think", "ing done"}));
  EXPECT_EQ(texts(GenEvent::Kind::Text), (std::vector<std::string>{"Hello", " world, ", "this is", " text."}));
  // The header token opens the value, each value token is one delta, the closing tag's token
  // adds the quote to its text, the last token closes the object.
  EXPECT_EQ(texts(GenEvent::Kind::ToolArgs),
            (std::vector<std::string>{"{\"city\": \"", "Par", "is and", " more\"", "}"}));
  EXPECT_EQ(texts(GenEvent::Kind::ToolEnd), (std::vector<std::string>{"{\"city\": \"Paris and more\"}"}));
  EXPECT_EQ(evs.back().finish, Finish::ToolCalls);
  EXPECT_EQ(evs.back().usage.completion_tokens, static_cast<int64_t>(h.model.pieces.size()));
}

TEST(ServerWorker, StreamedValuesWithTagLikeTextAndEscapes) {
  Harness h;
  // A value containing "</" (a prefix of the closing tag), a partial "</｜DSML" that is not
  // the tag, a newline, a backslash and non-ASCII: the streamed deltas must concatenate to
  // exactly the parsed arguments JSON.
  const std::string value = "x</p> a</\xEF\xBD\x9C" "DSML\xEF\xBD\x9C" "par y\n\\ \xC3\xBC\xF0\x9F\x98\x80";
  h.model.script = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"w\">\n<｜DSML｜parameter name=\"c\" string=\"true\">" + value +
                   "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"o\" string=\"false\">{\"k\": [1, 2]}</｜DSML｜parameter>\n"
                   "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  auto j = h.job("<｜User｜>q<｜Assistant｜></think>", true);
  auto evs = h.run(j);
  std::string args, end_args;
  for (const auto& e : evs) {
    if (e.kind == GenEvent::Kind::ToolArgs) args += e.text;
    if (e.kind == GenEvent::Kind::ToolEnd) end_args = e.text;
  }
  ASSERT_FALSE(end_args.empty());
  EXPECT_EQ(args, end_args);
  // JSON escapes only what JSON requires; non-ASCII stays as is (the chat module's decoder).
  EXPECT_EQ(end_args, "{\"c\": \"x</p> a</\xEF\xBD\x9C" "DSML\xEF\xBD\x9C" "par y\\n\\\\ \xC3\xBC\xF0\x9F\x98\x80\", \"o\": {\"k\": [1, 2]}}");
  EXPECT_EQ(evs.back().finish, Finish::ToolCalls);
}

TEST(ServerWorker, CancelStopsBeforeTheNextToken) {
  Harness h;
  h.model.script = std::string(500, 'x');
  h.model.sample_delay_ms = 2;
  auto j = h.job("p", false);
  std::atomic<int>* sampled = &h.model.sampled;
  j->client_gone = [sampled] { return sampled->load() >= 5; };
  auto evs = h.run(j);
  EXPECT_EQ(evs.back().finish, Finish::Cancelled);
  EXPECT_EQ(h.model.sampled.load(), 5);  // polled before each token
  EXPECT_EQ(evs.back().usage.completion_tokens, 5);
}

TEST(ServerWorker, WithdrawQueuedJob) {
  Harness h;
  h.model.script = std::string(200, 'y');
  h.model.sample_delay_ms = 2;
  auto busy = h.job("a", false);
  ASSERT_TRUE(h.worker->submit(busy));
  auto queued = h.job("b", false);
  ASSERT_TRUE(h.worker->submit(queued));
  EXPECT_TRUE(h.worker->withdraw(queued));
  EXPECT_TRUE(queued->finished());
  std::vector<GenEvent> evs;
  queued->wait_events(evs, std::chrono::milliseconds(0));
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].finish, Finish::Cancelled);
  busy->cancel = true;
  busy->wait_finished();
  EXPECT_FALSE(h.worker->withdraw(busy));
}

// max_tokens beyond the context is capped to the room left (as llama-server does); hitting
// that cap says so: finish "length", not "stop" (docs/SERVER.md).
TEST(ServerWorker, MaxTokensBeyondTheContextEndsWithLength) {
  Harness h;
  h.model.script = "abcdefghij";  // would run 10 tokens, then EOS
  auto j = h.job(std::string((1 << 16) - 4, 'p'), false, /*max_tokens=*/int64_t{1} << 40);
  auto evs = h.run(j);
  ASSERT_EQ(evs.back().kind, GenEvent::Kind::Done);
  EXPECT_EQ(evs.back().finish, Finish::Length);
  EXPECT_EQ(evs.back().usage.completion_tokens, 4);
  EXPECT_EQ(joined(evs, GenEvent::Kind::Text), "abcd");
}

}  // namespace
}  // namespace ds4::server

TEST(Metrics, ExpertCountersInPrometheusFormat) {
  ds4::ExpertCounters c;
  c.tokens = 7, c.hits = 40, c.misses = 2, c.bytes_read = 123456, c.prefetch_useful = 5, c.stall_seconds = 0.25;
  c.cache_budget_bytes = 1 << 20, c.cache_bytes = 4096;
  const std::string o = ds4::server::expert_prometheus(c);
  for (const char* want : {"# TYPE ds4_expert_hits_total counter\nds4_expert_hits_total 40\n",
                           "ds4_expert_tokens_total 7\n", "ds4_expert_misses_total 2\n",
                           "ds4_expert_read_bytes_total 123456\n", "ds4_expert_prefetch_useful_total 5\n",
                           "ds4_expert_stall_seconds_total 0.25\n",
                           "# TYPE ds4_expert_cache_budget_bytes gauge\nds4_expert_cache_budget_bytes 1048576\n",
                           "ds4_expert_cache_bytes 4096\n"})
    EXPECT_NE(o.find(want), std::string::npos) << want << "\nin:\n" << o;
}
