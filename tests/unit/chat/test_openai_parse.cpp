// OpenAI JSON → Conversation: structure, conventions and error paths. The error texts are
// this module's contract (JSON path first, then what is wrong).
#include "chat/openai_parse.h"
#include "chat/renderer.h"
#include "core/error.h"

#include <gtest/gtest.h>

namespace ds4::chat {
namespace {

std::string error_of(const std::string& request_text, ParseOptions po = {}) {
  try {
    parse_chat_request_text(request_text, po);
  } catch (const ds4::Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(ChatParse, InvalidArgumentsNamePath) {
  std::string req = R"({"messages": [
    {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]})";
  EXPECT_EQ(error_of(req), "messages[3].tool_calls[0].function.arguments: not valid JSON");
  // With the official fallback the same request parses and keeps the raw text.
  ParseOptions lenient;
  lenient.lenient_arguments = true;
  Conversation c = parse_chat_request_text(req, lenient);
  ASSERT_EQ(c.messages[3].tool_calls.size(), 1u);
  EXPECT_FALSE(c.messages[3].tool_calls[0].arguments_valid);
  EXPECT_EQ(c.messages[3].tool_calls[0].arguments_text, "{not json");
}

TEST(ChatParse, ArgumentsMustBeAnObject) {
  EXPECT_EQ(error_of(R"({"messages": [{"role": "assistant", "tool_calls": [
    {"function": {"name": "f", "arguments": "[1, 2]"}}]}]})"),
            "messages[0].tool_calls[0].function.arguments: expected a JSON object, got an array");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "assistant", "tool_calls": [
    {"function": {"name": "f", "arguments": 5}}]}]})"),
            "messages[0].tool_calls[0].function.arguments: expected a string, got a number");
}

TEST(ChatParse, ArgumentsMayBeAnObjectAndKeepKeyOrder) {
  Conversation c = parse_chat_request_text(R"({"messages": [{"role": "assistant", "tool_calls": [
    {"id": "x", "function": {"name": "f", "arguments": {"z": 1, "a": "s"}}}]}]})");
  const ToolCall& tc = c.messages[0].tool_calls[0];
  EXPECT_EQ(tc.id, "x");
  EXPECT_EQ(tc.name, "f");
  EXPECT_EQ(tc.arguments.begin().key(), "z");
}

TEST(ChatParse, StructuralErrors) {
  EXPECT_EQ(error_of(R"({"messages": [{"role": "robot", "content": "x"}]})"),
            "messages[0].role: unknown role 'robot'");
  EXPECT_EQ(error_of(R"({"messages": [{"content": "x"}]})"), "messages[0].role: missing");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user"}]})"),
            "messages[0].content: missing or null");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": 3}]})"),
            "messages[0].content: expected a string, an array or null, got a number");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "assistant", "tool_calls": {}}]})"),
            "messages[0].tool_calls: expected an array, got an object");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]}]})"),
            "messages[0].tool_calls[0].function: missing");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "assistant", "tool_calls": [
    {"function": {"arguments": "{}"}}]}]})"),
            "messages[0].tool_calls[0].function.name: missing");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "u"}],
                        "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function"}]})"),
            "tools[1].function: missing");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "developer", "content": ""}]})"),
            "messages[0].content: developer messages need non-empty content");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x", "task": "dance"}]})"),
            "messages[0].task: unknown task 'dance'");
  EXPECT_EQ(error_of(R"({"messages": {}})"), "messages: expected an array, got an object");
  EXPECT_EQ(error_of(R"({"model": "x"})"), "messages: missing");
  EXPECT_EQ(error_of("[1, 2").rfind("request: not valid JSON", 0), 0u);
}

TEST(ChatParse, UserContentPartsConcatenate) {
  Conversation c = parse_chat_request_text(R"({"messages": [{"role": "user", "content": [
    {"type": "text", "text": "Hello "}, {"type": "text", "text": "world"}]}]})");
  EXPECT_EQ(c.messages[0].content.value(), "Hello world");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [
    {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}]}]})"),
            "messages[0].content[1]: unsupported content part type 'image_url'");
}

TEST(ChatParse, TopLevelToolsGoToSystemMessage) {
  const char* tools = R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])";
  Conversation with_sys = parse_chat_request_text(
      std::string(R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}], "tools": )") +
      tools + "}");
  ASSERT_EQ(with_sys.messages.size(), 2u);
  ASSERT_EQ(with_sys.messages[0].tools.size(), 1u);
  EXPECT_EQ(with_sys.messages[0].tools[0].at("name"), "f");

  Conversation no_sys = parse_chat_request_text(
      std::string(R"({"messages": [{"role": "user", "content": "u"}], "tools": )") + tools + "}");
  ASSERT_EQ(no_sys.messages.size(), 2u);
  EXPECT_EQ(no_sys.messages[0].role, Role::System);
  EXPECT_EQ(no_sys.messages[0].content.value(), "");
  EXPECT_EQ(no_sys.messages[0].tools.size(), 1u);
}

TEST(ChatRender, EmptyDeveloperContentIsAnErrorNamingTheMessage) {
  Conversation c;
  Message m;
  m.role = Role::Developer;
  m.content = "";
  c.messages.push_back(m);
  try {
    render_prompt(c, RenderOptions{});
    FAIL() << "expected an error";
  } catch (const ds4::Error& e) {
    EXPECT_STREQ(e.what(), "messages[0]: developer message needs non-empty content");
  }
}

TEST(ChatRender, ThinkMaxThreshold) {
  RenderOptions o;
  o.thinking = ThinkingMode::Max;
  o.context_size = kThinkMaxMinContext - 1;
  EXPECT_FALSE(think_max_active(o));
  o.context_size = kThinkMaxMinContext;
  EXPECT_TRUE(think_max_active(o));
  o.thinking = ThinkingMode::High;
  EXPECT_FALSE(think_max_active(o));
}

TEST(ChatRender, RawToolBlockReplacesCanonicalRendering) {
  // The replayed block is written verbatim where the canonical one would go.
  Conversation c = parse_chat_request_text(R"({"messages": [{"role": "user", "content": "u"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "a", "function": {"name": "f", "arguments": "{\"x\":1}"}}]}]})");
  RenderOptions o;
  o.thinking = ThinkingMode::None;
  std::string canonical = render_prompt(c, o);
  EXPECT_NE(canonical.find("string=\"false\">1</"), std::string::npos);
  c.messages[1].raw_tool_block = "\n\n<RAW>";
  std::string replay = render_prompt(c, o);
  EXPECT_TRUE(replay.ends_with("\n\n<RAW><｜end▁of▁sentence｜>")) << replay;
  EXPECT_EQ(replay.find("invoke"), std::string::npos);
}

}  // namespace
}  // namespace ds4::chat
