// Response writers: the event sequences and JSON shapes each API's clients expect (OpenAI
// chat / completions / responses, Anthropic messages), fed with hand-made GenEvents.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/writers.h"

namespace ds4::server {
namespace {

using nlohmann::json;

struct Sse {
  std::string event;
  json data;  // null for [DONE]
};

std::vector<Sse> parse_sse(const std::string& s, int* comments = nullptr) {
  std::vector<Sse> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    std::string block = s.substr(pos, end - pos);
    pos = end + 2;
    Sse e;
    bool any = false;
    size_t lp = 0;
    while (lp <= block.size()) {
      size_t le = block.find('\n', lp);
      if (le == std::string::npos) le = block.size();
      std::string line = block.substr(lp, le - lp);
      lp = le + 1;
      if (line.rfind(":", 0) == 0) {
        if (comments) ++*comments;
      } else if (line.rfind("event: ", 0) == 0) {
        e.event = line.substr(7);
      } else if (line.rfind("data: ", 0) == 0) {
        std::string d = line.substr(6);
        e.data = d == "[DONE]" ? json(nullptr) : json::parse(d);
        any = true;
      }
    }
    if (any) out.push_back(e);
  }
  return out;
}

GenEvent ev(GenEvent::Kind k, std::string text = {}) {
  GenEvent e;
  e.kind = k;
  e.text = std::move(text);
  return e;
}
GenEvent tool(GenEvent::Kind k, std::string text = {}) {
  GenEvent e = ev(k, std::move(text));
  e.tool_index = 0;
  e.tool_id = "call_X";
  e.tool_name = "get_weather";
  return e;
}
GenEvent done(Finish f) {
  GenEvent e = ev(GenEvent::Kind::Done);
  e.finish = f;
  e.usage = Usage{100, 60, 7, 2};
  return e;
}

// reasoning, text, one tool call with two argument pieces, done.
std::vector<GenEvent> tool_script() {
  return {ev(GenEvent::Kind::Reasoning, "think "), ev(GenEvent::Kind::Reasoning, "more"), ev(GenEvent::Kind::Text, "Let me see."),
          tool(GenEvent::Kind::ToolStart), tool(GenEvent::Kind::ToolArgs, "{\"city\": \"Paris\""),
          tool(GenEvent::Kind::ToolArgs, "}"), tool(GenEvent::Kind::ToolEnd, "{\"city\": \"Paris\"}"), done(Finish::ToolCalls)};
}

std::string run(ApiWriter& w, const std::vector<GenEvent>& evs) {
  std::string s = w.begin();
  for (const auto& e : evs) s += w.on_event(e);
  return s;
}

GenRequest req(ApiKind api, bool include_usage = false) {
  GenRequest r;
  r.api = api;
  r.model = "deepseek-v4-flash";
  r.stream = true;
  r.include_usage = include_usage;
  return r;
}

// The usage chunk and the final body carry llama-server's `timings` (the web page's stats line):
// rates are tokens / wall seconds, 0 when nothing was evaluated. 40 tokens in 200 ms = 200 t/s,
// 7 tokens in 350 ms = 20 t/s.
TEST(ServerWriters, ChatTimings) {
  GenRequest r = req(ApiKind::Chat, true);
  auto w = make_writer(r, "chatcmpl-1", 1000);
  GenEvent d = done(Finish::Stop);
  d.usage.prefill_evaluated = 40;
  d.usage.prefill_ms = 200;
  d.usage.generation_ms = 350;
  auto evs = parse_sse(run(*w, {ev(GenEvent::Kind::Text, "hi"), d}));
  ASSERT_GE(evs.size(), 3u);
  const json& t = evs[evs.size() - 2].data["timings"];
  EXPECT_EQ(t["cache_n"], 60);
  EXPECT_EQ(t["prompt_n"], 40);
  EXPECT_DOUBLE_EQ(t["prompt_ms"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(t["prompt_per_second"].get<double>(), 200.0);
  EXPECT_EQ(t["predicted_n"], 7);
  EXPECT_DOUBLE_EQ(t["predicted_per_second"].get<double>(), 20.0);
  EXPECT_EQ(w->final_body()["timings"], t);

  // A fully cached prompt: nothing evaluated, rate 0 (not a division by zero).
  auto w2 = make_writer(r, "chatcmpl-2", 1000);
  auto evs2 = parse_sse(run(*w2, {done(Finish::Stop)}));
  EXPECT_EQ(evs2[evs2.size() - 2].data["timings"]["prompt_per_second"], 0.0);
}

TEST(ServerWriters, ChatStreamChunks) {
  GenRequest r = req(ApiKind::Chat, true);
  auto w = make_writer(r, "chatcmpl-1", 1000);
  auto evs = parse_sse(run(*w, tool_script()));
  ASSERT_GE(evs.size(), 8u);
  EXPECT_EQ(evs[0].data["choices"][0]["delta"]["role"], "assistant");
  std::string reasoning, content, args;
  int headers = 0;
  for (const auto& e : evs) {
    if (e.data.is_null()) continue;
    EXPECT_EQ(e.data["id"], "chatcmpl-1");
    EXPECT_EQ(e.data["object"], "chat.completion.chunk");
    if (e.data["choices"].empty()) continue;
    const json& d = e.data["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      const json& tc = d["tool_calls"][0];
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) {
        ++headers;
        EXPECT_EQ(tc["id"], "call_X");
        EXPECT_EQ(tc["type"], "function");
        EXPECT_EQ(tc["function"]["name"], "get_weather");
      }
      args += tc["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, "think more");
  EXPECT_EQ(content, "Let me see.");
  EXPECT_EQ(headers, 1);
  EXPECT_EQ(args, "{\"city\": \"Paris\"}");
  // finish chunk, then the usage chunk with no choices, then [DONE].
  const auto& fin = evs[evs.size() - 3].data;
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "tool_calls");
  const auto& usage = evs[evs.size() - 2].data;
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 100);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 60);
  EXPECT_EQ(usage["usage"]["completion_tokens_details"]["reasoning_tokens"], 2);
  EXPECT_EQ(usage["usage"]["total_tokens"], 107);
  EXPECT_TRUE(evs.back().data.is_null());

  json body = w->final_body();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Let me see.");
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "think more");
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ServerWriters, ChatKeepaliveAndErrors) {
  GenRequest r = req(ApiKind::Chat);
  auto w = make_writer(r, "c", 1);
  int comments = 0;
  auto evs = parse_sse(w->keepalive(), &comments);
  EXPECT_EQ(comments, 1);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_TRUE(evs[0].data["choices"][0]["delta"].empty());
  EXPECT_TRUE(evs[0].data["choices"][0]["finish_reason"].is_null());
  auto err = parse_sse(w->stream_error(500, "boom"));
  EXPECT_EQ(err[0].data["error"]["message"], "boom");
  EXPECT_TRUE(err.back().data.is_null());
}

TEST(ServerWriters, ChatTruncatedToolCallIsDropped) {
  GenRequest r = req(ApiKind::Chat);
  r.stream = false;
  auto w = make_writer(r, "c", 1);
  run(*w, {ev(GenEvent::Kind::Text, "a"), tool(GenEvent::Kind::ToolStart), tool(GenEvent::Kind::ToolArgs, "{\"ci"),
           done(Finish::Length)});
  json body = w->final_body();
  EXPECT_FALSE(body["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
}

TEST(ServerWriters, CompletionsLogprobs) {
  GenRequest r = req(ApiKind::Completions);
  r.stream = false;
  r.top_logprobs = 1;
  auto w = make_writer(r, "cmpl-1", 5);
  GenEvent t = ev(GenEvent::Kind::Text, "ab");
  t.logprobs = {{"a", -0.5f, {{"a", -0.5f}}}, {"b", -1.0f, {{"c", -0.25f}}}};
  run(*w, {t, done(Finish::Length)});
  json body = w->final_body();
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "ab");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][0]["logprobs"]["tokens"], json({"a", "b"}));
  EXPECT_EQ(body["choices"][0]["logprobs"]["text_offset"], json({0, 1}));
  EXPECT_EQ(body["choices"][0]["logprobs"]["top_logprobs"][1]["c"], -0.25);
}

TEST(ServerWriters, ResponsesLifecycle) {
  GenRequest r = req(ApiKind::Responses);
  auto w = make_writer(r, "resp_1", 7);
  auto evs = parse_sse(run(*w, tool_script()));
  std::vector<std::string> types;
  int64_t seq = 0;
  for (const auto& e : evs) {
    EXPECT_EQ(e.event, e.data["type"]);
    EXPECT_EQ(e.data["sequence_number"], seq++);
    types.push_back(e.event);
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(types, want);
  const json& fin = evs.back().data["response"];
  EXPECT_EQ(fin["status"], "completed");
  ASSERT_EQ(fin["output"].size(), 3u);
  EXPECT_EQ(fin["output"][0]["content"][0]["text"], "think more");
  EXPECT_EQ(fin["output"][1]["content"][0]["text"], "Let me see.");
  EXPECT_EQ(fin["output"][2]["call_id"], "call_X");
  EXPECT_EQ(fin["output"][2]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(fin["usage"]["input_tokens_details"]["cached_tokens"], 60);
  EXPECT_EQ(fin["usage"]["output_tokens_details"]["reasoning_tokens"], 2);
  // output_index of each item event matches its position.
  EXPECT_EQ(evs[9].data["output_index"], 1);
  EXPECT_EQ(evs[15].data["output_index"], 2);
}

TEST(ServerWriters, ResponsesIncompleteAndFailed) {
  GenRequest r = req(ApiKind::Responses);
  auto w = make_writer(r, "resp_2", 7);
  auto evs = parse_sse(run(*w, {ev(GenEvent::Kind::Text, "x"), done(Finish::Length)}));
  EXPECT_EQ(evs.back().event, "response.incomplete");
  EXPECT_EQ(evs.back().data["response"]["incomplete_details"]["reason"], "max_output_tokens");
  auto w2 = make_writer(r, "resp_3", 7);
  std::string s = w2->begin() + w2->on_event(ev(GenEvent::Kind::Text, "x"));
  GenEvent f = ev(GenEvent::Kind::Failed, "model exploded");
  f.status = 500;
  auto evs2 = parse_sse(s + w2->on_event(f));
  EXPECT_EQ(evs2.back().event, "response.failed");
  EXPECT_EQ(evs2.back().data["response"]["error"]["message"], "model exploded");
  EXPECT_EQ(evs2[evs2.size() - 2].event, "response.output_item.done");  // the open item is closed first
}

TEST(ServerWriters, AnthropicStream) {
  GenRequest r = req(ApiKind::Messages);
  r.prompt_tokens = 100;
  auto w = make_writer(r, "msg_1", 7);
  auto evs = parse_sse(run(*w, tool_script()));
  std::vector<std::string> types;
  for (const auto& e : evs) {
    EXPECT_EQ(e.event, e.data["type"]);
    types.push_back(e.event);
  }
  const std::vector<std::string> want = {
      "message_start",
      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
      "message_delta", "message_stop"};
  EXPECT_EQ(types, want);
  // The prompt's size goes out with message_start (it is known before prefill); the split
  // into cached and uncached tokens comes with message_delta.
  EXPECT_EQ(evs[0].data["message"]["usage"]["input_tokens"], 100);
  EXPECT_EQ(evs[1].data["content_block"]["type"], "thinking");
  EXPECT_EQ(evs[2].data["delta"]["type"], "thinking_delta");
  EXPECT_EQ(evs[6].data["delta"], json({{"type", "text_delta"}, {"text", "Let me see."}}));
  EXPECT_EQ(evs[8].data["content_block"]["type"], "tool_use");
  EXPECT_EQ(evs[8].data["content_block"]["id"], "call_X");
  EXPECT_EQ(evs[8].data["index"], 2);
  EXPECT_EQ(evs[9].data["delta"]["type"], "input_json_delta");
  const json& md = evs[12].data;
  EXPECT_EQ(md["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(md["usage"]["output_tokens"], 7);
  EXPECT_EQ(md["usage"]["input_tokens"], 40);  // uncached part
  EXPECT_EQ(md["usage"]["cache_read_input_tokens"], 60);

  json body = w->final_body();
  EXPECT_EQ(body["stop_reason"], "tool_use");
  ASSERT_EQ(body["content"].size(), 3u);
  EXPECT_EQ(body["content"][0]["thinking"], "think more");
  EXPECT_EQ(body["content"][2]["input"], json({{"city", "Paris"}}));
  int comments = 0;
  auto ka = parse_sse(w->keepalive(), &comments);
  EXPECT_EQ(comments, 1);
  EXPECT_EQ(ka[0].event, "ping");
}

TEST(ServerWriters, AnthropicStopSequence) {
  GenRequest r = req(ApiKind::Messages);
  r.stream = false;
  auto w = make_writer(r, "msg_2", 7);
  GenEvent d = done(Finish::StopSequence);
  d.stop_sequence = "END";
  run(*w, {ev(GenEvent::Kind::Text, "abc"), d});
  json body = w->final_body();
  EXPECT_EQ(body["stop_reason"], "stop_sequence");
  EXPECT_EQ(body["stop_sequence"], "END");
  EXPECT_EQ(body["content"][0], json({{"type", "text"}, {"text", "abc"}}));
}

TEST(ServerWriters, InvalidUtf8NeverBreaksJson) {
  GenRequest r = req(ApiKind::Chat);
  auto w = make_writer(r, "c", 1);
  std::string s = w->on_event(ev(GenEvent::Kind::Text, "bad \xFF byte"));
  auto evs = parse_sse(s);
  EXPECT_EQ(evs[0].data["choices"][0]["delta"]["content"], "bad \xEF\xBF\xBD byte");
}

}  // namespace
}  // namespace ds4::server
