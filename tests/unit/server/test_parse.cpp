// Request parsers: field validation (400 naming the field), model lookup (404), the mapping
// of each API's shapes onto the chat conversation, thinking switches and sampling fields.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/request_parse.h"

namespace ds4::server {
namespace {

using chat::Json;

ParseContext ctx() {
  ParseContext c;
  c.model_ids = {"deepseek-v4-flash", "deepseek-chat", "deepseek-reasoner"};
  c.n_ctx = 4096;
  c.default_max_tokens = 111;
  return c;
}

// Runs `f` and returns the ApiError it throws (fails the test when none is thrown).
template <class F>
ApiError error_of(F f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError thrown";
  return ApiError(0, "");
}

TEST(ServerParse, ChatBasicsAndDefaults) {
  Json b = Json::parse(R"({"model":"deepseek-v4-flash","messages":[{"role":"user","content":"hi"}]})");
  GenRequest r = parse_chat_completions(b, ctx());
  EXPECT_EQ(r.api, ApiKind::Chat);
  EXPECT_EQ(r.max_tokens, 111);
  EXPECT_FALSE(r.stream);
  ASSERT_TRUE(r.conversation);
  ASSERT_EQ(r.conversation->messages.size(), 1u);
  EXPECT_EQ(r.render.thinking, chat::ThinkingMode::High);  // ds4 defaults to thinking
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_EQ(r.top_logprobs, -1);
  EXPECT_FALSE(r.tools_enabled);
}

TEST(ServerParse, ChatFields) {
  Json b = Json::parse(R"({"model":"deepseek-chat","messages":[{"role":"user","content":"hi"}],
    "max_tokens":5,"max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,"seed":42,
    "stop":["a","","b"],"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":4})");
  GenRequest r = parse_chat_completions(b, ctx());
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.top_logprobs, 4);
  EXPECT_EQ(r.render.thinking, chat::ThinkingMode::None);  // deepseek-chat alias
  EXPECT_EQ(r.model, "deepseek-chat");
}

TEST(ServerParse, ThinkingSwitches) {
  auto mode = [](const char* extra) {
    Json b = Json::parse(std::string(R"({"messages":[{"role":"user","content":"x"}])") + extra + "}");
    return parse_chat_completions(b, ctx()).render.thinking;
  };
  EXPECT_EQ(mode(R"(,"reasoning_effort":"none")"), chat::ThinkingMode::None);
  EXPECT_EQ(mode(R"(,"reasoning_effort":"max")"), chat::ThinkingMode::Max);
  EXPECT_EQ(mode(R"(,"reasoning_effort":"xhigh")"), chat::ThinkingMode::High);
  EXPECT_EQ(mode(R"(,"thinking":{"type":"disabled"})"), chat::ThinkingMode::None);
  EXPECT_EQ(mode(R"(,"think":false)"), chat::ThinkingMode::None);
  EXPECT_EQ(mode(R"(,"model":"deepseek-chat","think":true)"), chat::ThinkingMode::High);
}

TEST(ServerParse, ChatErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":2.5})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"seed":"s"})", "seed"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[3]})", "stop[0]"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":2})", "n"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":1}})", "stream_options.include_usage"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"})", "tool_choice"},
      {R"({"messages":[{"role":"robot","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{bad"}}]}]})",
       "messages[1].tool_calls[0].function.arguments"},
      {R"({"messages":[]})", "messages"},
      {R"({})", "messages"},
  };
  for (const auto& c : cases) {
    ApiError e = error_of([&] { parse_chat_completions(Json::parse(c.body), ctx()); });
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << " → " << e.what();
  }
}

TEST(ServerParse, UnknownModelIs404AndInvalidJsonIs400) {
  ApiError e = error_of([] { parse_chat_completions(Json::parse(R"({"model":"gpt-4o","messages":[]})"), ctx()); });
  EXPECT_EQ(e.status(), 404);
  EXPECT_EQ(e.code(), "model_not_found");
  ApiError j = error_of([] { parse_body("{\"a\": [1,"); });
  EXPECT_EQ(j.status(), 400);
  EXPECT_NE(std::string(j.what()).find("not valid JSON (byte"), std::string::npos);
}

TEST(ServerParse, ToolsAndToolChoiceNone) {
  const char* base = R"({"messages":[{"role":"user","content":"x"}],
    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  GenRequest r = parse_chat_completions(Json::parse(std::string(base) + "}"), ctx());
  EXPECT_TRUE(r.tools_enabled);
  ASSERT_EQ(r.conversation->messages.size(), 2u);  // a system message carries the tools
  EXPECT_EQ(r.conversation->messages[0].tools.size(), 1u);
  GenRequest n = parse_chat_completions(Json::parse(std::string(base) + R"(,"tool_choice":"none"})"), ctx());
  EXPECT_FALSE(n.tools_enabled);
}

TEST(ServerParse, ToolBlockReplayLookup) {
  ParseContext c = ctx();
  std::vector<std::string> asked;
  c.lookup_tool_block = [&](const std::vector<std::string>& ids) -> std::optional<std::string> {
    asked = ids;
    if (ids == std::vector<std::string>{"call_A"}) return std::string("SAMPLED BLOCK");
    return std::nullopt;
  };
  Json b = Json::parse(R"({"messages":[{"role":"user","content":"x"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_A","type":"function","function":{"name":"f","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"call_A","content":"ok"}]})");
  GenRequest r = parse_chat_completions(b, c);
  EXPECT_EQ(asked, std::vector<std::string>{"call_A"});
  EXPECT_EQ(r.conversation->messages[1].raw_tool_block, std::optional<std::string>("SAMPLED BLOCK"));
}

TEST(ServerParse, Completions) {
  GenRequest r = parse_completions(Json::parse(R"({"prompt":["abc"],"max_tokens":3,"logprobs":2})"), ctx());
  EXPECT_EQ(r.raw_prompt, "abc");
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_FALSE(r.conversation);
  EXPECT_EQ(error_of([] { parse_completions(Json::parse(R"({"prompt":[1,2]})"), ctx()); }).param(), "prompt");
  EXPECT_EQ(error_of([] { parse_completions(Json::parse(R"({"prompt":"a","echo":true})"), ctx()); }).param(), "echo");
  EXPECT_EQ(error_of([] { parse_completions(Json::parse(R"({"prompt":"a","logprobs":9})"), ctx()); }).param(), "logprobs");
}

TEST(ServerParse, ResponsesInputItems) {
  Json b = Json::parse(R"({"instructions":"be brief","max_output_tokens":9,"reasoning":{"effort":"none"},
    "tools":[{"type":"function","name":"get","parameters":{"type":"object"}},{"type":"web_search"}],
    "input":[{"role":"user","content":[{"type":"input_text","text":"q"}]},
             {"type":"reasoning","summary":[{"type":"summary_text","text":"thought"}]},
             {"type":"function_call","call_id":"c1","name":"get","arguments":"{\"k\":1}"},
             {"type":"function_call_output","call_id":"c1","output":"res"}]})");
  GenRequest r = parse_responses(b, ctx());
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.render.thinking, chat::ThinkingMode::None);
  EXPECT_TRUE(r.tools_enabled);
  const auto& m = r.conversation->messages;
  ASSERT_EQ(m.size(), 4u);  // system (instructions + tools), user, assistant, tool
  EXPECT_EQ(m[0].role, chat::Role::System);
  EXPECT_EQ(m[0].content, std::optional<std::string>("be brief"));
  EXPECT_EQ(m[0].tools.size(), 1u);  // hosted tools are skipped
  EXPECT_EQ(m[1].content, std::optional<std::string>("q"));
  EXPECT_EQ(m[2].role, chat::Role::Assistant);
  EXPECT_EQ(m[2].reasoning_content, std::optional<std::string>("thought"));
  ASSERT_EQ(m[2].tool_calls.size(), 1u);
  EXPECT_EQ(m[2].tool_calls[0].id, "c1");
  EXPECT_EQ(m[2].tool_calls[0].arguments["k"], 1);
  EXPECT_EQ(m[3].role, chat::Role::Tool);
  EXPECT_EQ(m[3].tool_call_id, "c1");

  EXPECT_EQ(error_of([] { parse_responses(Json::parse(R"({"input":[{"role":"user","content":[{"type":"input_image"}]}]})"), ctx()); })
                .param(),
            "input[0].content[0].type");
  EXPECT_EQ(error_of([] { parse_responses(Json::parse(R"({"input":"x","previous_response_id":"r"})"), ctx()); }).param(),
            "previous_response_id");
}

TEST(ServerParse, AnthropicMessages) {
  Json b = Json::parse(R"({"model":"deepseek-v4-flash","max_tokens":20,"system":[{"type":"text","text":"sys"}],
    "stop_sequences":["END"],"thinking":{"type":"enabled","budget_tokens":100},
    "tools":[{"name":"get","description":"d","input_schema":{"type":"object","properties":{"b":{},"a":{}}}}],
    "messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":""},{"type":"text","text":"ok"},
                                     {"type":"tool_use","id":"toolu_1","name":"get","input":{"b":2,"a":1}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"R"}]},
                                {"type":"text","text":"and?"}]}]})");
  GenRequest r = parse_messages(b, ctx());
  EXPECT_EQ(r.max_tokens, 20);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.render.thinking, chat::ThinkingMode::High);
  const auto& m = r.conversation->messages;
  ASSERT_EQ(m.size(), 5u);  // system, user, assistant, tool, user
  EXPECT_EQ(m[0].content, std::optional<std::string>("sys"));
  EXPECT_EQ(m[0].tools.size(), 1u);
  // Tool schema key order is the client's (it is rendered into the prompt as sent).
  EXPECT_EQ(m[0].tools[0]["parameters"]["properties"].begin().key(), "b");
  EXPECT_EQ(m[2].reasoning_content, std::optional<std::string>("hm"));
  EXPECT_EQ(m[2].content, std::optional<std::string>("ok"));
  ASSERT_EQ(m[2].tool_calls.size(), 1u);
  EXPECT_EQ(m[2].tool_calls[0].arguments.begin().key(), "b");
  EXPECT_EQ(m[3].role, chat::Role::Tool);
  EXPECT_EQ(m[3].content, std::optional<std::string>("R"));
  EXPECT_EQ(m[4].content, std::optional<std::string>("and?"));

  EXPECT_EQ(error_of([] { parse_messages(Json::parse(R"({"messages":[{"role":"user","content":"x"}]})"), ctx()); }).param(),
            "max_tokens");
  EXPECT_EQ(error_of([] {
              parse_messages(Json::parse(R"({"max_tokens":1,"messages":[{"role":"system","content":"x"}]})"), ctx());
            }).param(),
            "messages[0].role");
  EXPECT_EQ(error_of([] {
              parse_messages(Json::parse(R"({"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n","input":[1]}]}]})"),
                             ctx());
            }).param(),
            "messages[0].content[0].input");
}

TEST(ServerParse, ErrorBodies) {
  nlohmann::json o = error_body(ApiKind::Chat, ApiError(400, "temperature: bad", "temperature"));
  EXPECT_EQ(o["error"]["type"], "invalid_request_error");
  EXPECT_EQ(o["error"]["param"], "temperature");
  EXPECT_TRUE(o["error"]["code"].is_null());
  nlohmann::json a = error_body(ApiKind::Messages, ApiError(413, "too big"));
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "request_too_large");
  EXPECT_EQ(error_body(ApiKind::Messages, 404, "x")["error"]["type"], "not_found_error");
  EXPECT_EQ(error_body(ApiKind::Messages, 401, "x")["error"]["type"], "authentication_error");
}

}  // namespace
}  // namespace ds4::server
