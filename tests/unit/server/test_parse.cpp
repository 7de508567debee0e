// Request parsers: field validation (400 naming the field), model lookup (404), the mapping
// of each API's shapes onto the chat conversation, thinking switches and sampling fields.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/renderer.h"
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

// Each API's own reasoning controls; the default when a request says nothing is on (high)
// for chat completions and responses (DeepSeek's API, ds4) and off for messages (Anthropic's).
TEST(ServerParse, ThinkingDefaultsAndControlsPerApi) {
  using M = chat::ThinkingMode;
  auto chat_mode = [](const char* extra) {
    return parse_chat_completions(Json::parse(std::string(R"({"messages":[{"role":"user","content":"x"}])") + extra + "}"), ctx())
        .render.thinking;
  };
  auto resp_mode = [](const char* extra) {
    return parse_responses(Json::parse(std::string(R"({"input":"x")") + extra + "}"), ctx()).render.thinking;
  };
  auto msg_mode = [](const char* extra) {
    return parse_messages(Json::parse(std::string(R"({"max_tokens":9,"messages":[{"role":"user","content":"x"}])") + extra + "}"), ctx())
        .render.thinking;
  };
  EXPECT_EQ(chat_mode(""), M::High);
  EXPECT_EQ(resp_mode(""), M::High);
  EXPECT_EQ(msg_mode(""), M::None);
  // Chat completions: thinking {type}, reasoning_effort, reasoning.effort, think.
  EXPECT_EQ(chat_mode(R"(,"thinking":{"type":"enabled"},"reasoning_effort":"none")"), M::None);
  EXPECT_EQ(chat_mode(R"(,"thinking":{"type":"disabled"},"reasoning_effort":"max")"), M::None);
  EXPECT_EQ(chat_mode(R"(,"reasoning":{"effort":"max"})"), M::Max);
  EXPECT_EQ(chat_mode(R"(,"reasoning_effort":"ultra")"), M::Max);
  EXPECT_EQ(chat_mode(R"(,"reasoning_effort":null)"), M::High);
  EXPECT_EQ(chat_mode(R"(,"model":"deepseek-chat","thinking":{"type":"enabled"})"), M::High);
  // Responses: reasoning.effort only; "none" off. Controls of the other APIs are not read.
  EXPECT_EQ(resp_mode(R"(,"reasoning":{"effort":"none"})"), M::None);
  EXPECT_EQ(resp_mode(R"(,"reasoning":{"effort":"low","summary":"auto"})"), M::High);
  EXPECT_EQ(resp_mode(R"(,"reasoning":{"effort":"max"})"), M::Max);
  EXPECT_EQ(resp_mode(R"(,"reasoning":{"effort":null})"), M::High);
  EXPECT_EQ(resp_mode(R"(,"model":"deepseek-chat")"), M::None);
  // Messages: thinking {type: enabled | adaptive | disabled, budget_tokens}, output_config.effort.
  EXPECT_EQ(msg_mode(R"(,"thinking":{"type":"enabled","budget_tokens":1024})"), M::High);
  EXPECT_EQ(msg_mode(R"(,"thinking":{"type":"adaptive"},"output_config":{"effort":"high"})"), M::High);
  EXPECT_EQ(msg_mode(R"(,"thinking":{"type":"adaptive"},"output_config":{"effort":"max"})"), M::Max);
  EXPECT_EQ(msg_mode(R"(,"output_config":{"effort":"max"})"), M::None);  // effort alone does not switch it on
  EXPECT_EQ(msg_mode(R"(,"thinking":{"type":"disabled"})"), M::None);
  EXPECT_EQ(msg_mode(R"(,"model":"deepseek-reasoner")"), M::High);
  EXPECT_EQ(error_of([] { parse_messages(Json::parse(R"({"max_tokens":9,"messages":[{"role":"user","content":"x"}],"output_config":{"effort":"none"}})"), ctx()); }).param(),
            "output_config.effort");
  EXPECT_EQ(error_of([] { parse_messages(Json::parse(R"({"max_tokens":9,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled","budget_tokens":"many"}})"), ctx()); }).param(),
            "thinking.budget_tokens");
  EXPECT_EQ(error_of([] { parse_responses(Json::parse(R"({"input":"x","reasoning":{"effort":"extreme"}})"), ctx()); }).param(),
            "reasoning.effort");
}

// Qwen clients (vLLM, llama-server) pass template variables in chat_template_kwargs; the
// ChatML renderer reads preserve_thinking, and the template revision comes from the model.
TEST(ServerParse, ChatTemplateKwargsPreserveThinking) {
  auto parse = [](const char* extra, chat::ChatmlTemplate tpl) {
    ParseContext c = ctx();
    c.chat_format = chat::ChatFormat::ChatML;
    c.chatml_template = tpl;
    return parse_chat_completions(Json::parse(std::string(R"({"messages":[{"role":"user","content":"x"}])") + extra + "}"), c)
        .render;
  };
  EXPECT_FALSE(parse("", chat::ChatmlTemplate::Qwen36).preserve_thinking);
  const chat::RenderOptions on = parse(R"(,"chat_template_kwargs":{"preserve_thinking":true})", chat::ChatmlTemplate::Qwen35);
  EXPECT_TRUE(on.preserve_thinking);
  EXPECT_EQ(on.chatml_template, chat::ChatmlTemplate::Qwen35);
  EXPECT_EQ(on.thinking, chat::ThinkingMode::High);
  const chat::RenderOptions off =
      parse(R"(,"chat_template_kwargs":{"preserve_thinking":false,"enable_thinking":false})", chat::ChatmlTemplate::Qwen36);
  EXPECT_FALSE(off.preserve_thinking);
  EXPECT_EQ(off.chatml_template, chat::ChatmlTemplate::Qwen36);
  EXPECT_EQ(off.thinking, chat::ThinkingMode::None);
  EXPECT_EQ(error_of([&] { parse(R"(,"chat_template_kwargs":{"preserve_thinking":"yes"})", chat::ChatmlTemplate::Qwen36); }).param(),
            "preserve_thinking");
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
              parse_messages(Json::parse(R"({"max_tokens":1,"messages":[{"role":"tool","content":"x"}]})"), ctx());
            }).param(),
            "messages[0].role");
  EXPECT_EQ(error_of([] {
              parse_messages(Json::parse(R"({"max_tokens":1,"messages":[{"role":"system","content":[{"type":"image"}]}]})"), ctx());
            }).param(),
            "messages[0].content[0].type");
  EXPECT_EQ(error_of([] {
              parse_messages(Json::parse(R"({"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n","input":[1]}]}]})"),
                             ctx());
            }).param(),
            "messages[0].content[0].input");
}

// The encoder's expected prompt for a case of tests/fixtures/chat/render_cases.json.
std::string encoder_expected(const std::string& name) {
  std::ifstream f(std::string(DS4_FIXTURES_DIR) + "/chat/render_cases.json");
  std::stringstream ss;
  ss << f.rdbuf();
  Json all = Json::parse(ss.str());
  for (const auto& c : all["cases"]) {
    if (c["name"] == name) return c["expected"].get<std::string>();
  }
  ADD_FAILURE() << "no fixture case " << name;
  return {};
}

std::string render_messages(const char* body) {
  GenRequest r = parse_messages(Json::parse(body), ctx());
  return chat::render_prompt(*r.conversation, r.render);
}

// Claude Code's mid-conversation system turns, checked against DeepSeek's encoder on the same
// conversations (fixture cases mid_system_*). Where the encoder writes no assistant transition
// (the system turn ends the conversation or precedes the assistant) ours adds it.
TEST(ServerParse, AnthropicSystemTurnsRenderAsTheEncoder) {
  const std::string sys = R"("system":"You are a helpful assistant.",)";
  EXPECT_EQ(render_messages((R"({"max_tokens":9,"thinking":{"type":"enabled"},)" + sys + R"("messages":[
      {"role":"user","content":"Hi"},{"role":"system","content":[{"type":"text","text":"<env>cwd: /tmp/x</env>"}]},
      {"role":"user","content":"List files"}]})").c_str()),
            encoder_expected("mid_system_after_user_thinking"));
  EXPECT_EQ(render_messages(R"({"max_tokens":9,"thinking":{"type":"enabled"},"system":"You are a helpful assistant.","messages":[
      {"role":"user","content":"Hi"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"greet","signature":""},{"type":"text","text":"Hello!"}]},
      {"role":"system","content":"<env>cwd: /tmp/x</env>"},{"role":"user","content":"Next"}]})"),
            encoder_expected("mid_system_after_assistant_thinking"));
  // Trailing system turn (what Claude Code sends): the encoder's bytes, then the generation prompt.
  EXPECT_EQ(render_messages(R"({"max_tokens":9,"messages":[
      {"role":"user","content":"Hi"},{"role":"system","content":"<env>cwd: /tmp/x</env>"}]})"),
            encoder_expected("mid_system_after_first_user_chat") + "<｜Assistant｜></think>");
  // Between a tool result and the assistant: the encoder glues the text to </tool_result> and
  // writes no transition; ours makes it a user block ("\n\n"-joined) followed by the transition.
  std::string want = encoder_expected("mid_system_in_tool_loop");
  const std::string glued = "</tool_result><env>cwd: /tmp/x</env>";
  ASSERT_NE(want.find(glued), std::string::npos);
  want.replace(want.find(glued), glued.size(), "</tool_result>\n\n<env>cwd: /tmp/x</env><｜Assistant｜><think>");
  EXPECT_EQ(render_messages(R"({"max_tokens":9,"thinking":{"type":"enabled"},"system":"You are a helpful assistant.",
      "tools":[{"name":"get_weather","description":"Get the current weather for a city.","input_schema":{"type":"object",
        "properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},
        "required":["city"]}}],
      "messages":[{"role":"user","content":"Weather?"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"call it"},{"type":"tool_use","id":"ms1","name":"get_weather","input":{"city":"Oslo"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"ms1","content":"cold"}]},
      {"role":"system","content":"<env>cwd: /tmp/x</env>"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"answer"},{"type":"text","text":"Cold."}]}]})"),
            want);
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
