// Saved-session metadata and messages: the JSON round trip keeps every field the renderer
// reads (so a resumed conversation renders byte for byte as before), id resolution, errors.
#include "agent/store.h"

#include "agent_test_util.h"
#include "chat/renderer.h"
#include "core/error.h"

namespace ds4::agent::test {
namespace {

using chat::Json;

chat::Conversation sample_conversation() {
  chat::Conversation c;
  chat::Message s;
  s.role = chat::Role::System;
  s.content = "sys";
  s.tools = {Json::parse(R"({"type":"function","function":{"name":"t","parameters":{"b":1,"a":2}}})")};
  c.messages.push_back(s);
  chat::Message u;
  u.role = chat::Role::User;
  u.content = "do it <｜User｜>";
  c.messages.push_back(u);
  chat::Message a;
  a.role = chat::Role::Assistant;
  a.reasoning_content = "think";
  a.content = "ok";
  chat::ToolCall tc;
  tc.id = "call_1";
  tc.name = "t";
  tc.arguments = Json::parse(R"({"z":1,"a":"x"})");
  a.tool_calls.push_back(tc);
  a.raw_tool_block = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"t\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  c.messages.push_back(a);
  chat::Message t;
  t.role = chat::Role::Tool;
  t.tool_call_id = "call_1";
  t.content = "result";
  c.messages.push_back(t);
  return c;
}

TEST(AgentStore, MessagesRoundTripAndRenderIdentically) {
  const auto c = sample_conversation();
  chat::Conversation back;
  for (const auto& m : c.messages) back.messages.push_back(message_from_json(message_to_json(m), "m"));
  chat::RenderOptions ro;
  ro.drop_thinking = false;
  EXPECT_EQ(chat::render_prompt(back, ro), chat::render_prompt(c, ro));
  EXPECT_EQ(back.messages[2].tool_calls[0].arguments.dump(), R"({"z":1,"a":"x"})");  // key order kept
  EXPECT_EQ(*back.messages[2].raw_tool_block, *c.messages[2].raw_tool_block);
}

TEST(AgentStore, BadMessagesNameTheField) {
  try {
    message_from_json(Json::parse(R"({"role":"user","content":5})"), "conversation.json: messages[3]");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "conversation.json: messages[3].content: expected a string");
  }
  try {
    message_from_json(Json::parse(R"({"role":"robot"})"), "m[0]");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "m[0].role: unknown role 'robot'");
  }
}

TEST(AgentStore, ResolveListDeleteStrip) {
  TempDir t;
  SessionStore st(t.dir);
  auto mk = [&](const std::string& id, int64_t updated, bool payload) {
    write(t / (id + "/conversation.json"),
          Json{{"version", 1}, {"title", id}, {"updated", updated}, {"n_tokens", 5}, {"messages", Json::array()}}.dump());
    write(t / (id + "/history.txt"), "h");
    if (payload) write(t / (id + "/payload.ds4s"), "p");
  };
  mk("20260101-000000-aaaa", 100, true);
  mk("20260101-000000-aabb", 200, true);
  mk("20260102-000000-cccc", 50, false);
  write(t / "junk/readme", "not a session");
  const auto all = st.list();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id, "20260101-000000-aabb");  // most recent first
  EXPECT_FALSE(all[2].has_payload);
  EXPECT_EQ(st.resolve("last"), "20260101-000000-aabb");
  EXPECT_EQ(st.resolve("20260102"), "20260102-000000-cccc");
  EXPECT_THROW(st.resolve("20260101-000000-aa"), Error);  // ambiguous
  EXPECT_THROW(st.resolve("2027"), Error);
  st.strip("20260101-000000-aaaa");
  EXPECT_FALSE(fs::exists(t / "20260101-000000-aaaa/payload.ds4s"));
  EXPECT_TRUE(fs::exists(t / "20260101-000000-aaaa/history.txt"));
  const auto loaded = st.load("20260101-000000-aaaa");
  EXPECT_TRUE(loaded.payload.empty());
  EXPECT_EQ(loaded.history, "h");
  st.remove("20260102-000000-cccc");
  EXPECT_EQ(st.list().size(), 2u);
  EXPECT_THROW(st.load("../etc"), Error);
  EXPECT_THROW(st.remove("a/b"), Error);
}

}  // namespace
}  // namespace ds4::agent::test
