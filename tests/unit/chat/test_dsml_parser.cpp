// Streaming DSML parser.
// Oracle: tests/fixtures/chat/parse_cases.json holds completion texts and the result of the
// official parse_message_from_completion_text (encoding_dsv4.py) for each — accepted with
// reasoning/content/tool-call arguments, or rejected. Written by
// tools/oracle/chat/gen_chat_fixtures.py.
#include "chat/dsml.h"
#include "chat/dsml_parser.h"
#include "chat/markers.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

namespace ds4::chat {
namespace {

Json load_fixture(const char* name) {
  std::ifstream in(std::string(DS4_FIXTURES_DIR) + "/chat/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

struct Collected {
  std::string reasoning, text;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments JSON
  std::vector<std::string> blocks;
  std::vector<std::string> errors;
};

Collected collect(const std::vector<DsmlEvent>& ev) {
  Collected c;
  for (const DsmlEvent& e : ev) {
    switch (e.kind) {
      case DsmlEventKind::Reasoning: c.reasoning += e.text; break;
      case DsmlEventKind::Text: c.text += e.text; break;
      case DsmlEventKind::ToolCallEnd: c.calls.emplace_back(e.name, e.text); break;
      case DsmlEventKind::ToolCallsEnd: c.blocks.push_back(e.text); break;
      case DsmlEventKind::Error: c.errors.push_back(e.text); break;
      default: break;
    }
  }
  return c;
}

// Feeds `text` cut at the given byte positions (which may fall inside UTF-8 sequences).
std::vector<DsmlEvent> run(const std::string& text, bool thinking, const std::vector<size_t>& cuts,
                           DsmlParserLimits limits = {}) {
  DsmlStreamParser p(thinking, limits);
  std::vector<DsmlEvent> ev;
  size_t prev = 0;
  for (size_t c : cuts) {
    p.feed(std::string_view(text).substr(prev, c - prev), ev);
    prev = c;
  }
  p.feed(std::string_view(text).substr(prev), ev);
  p.finish(ev);
  return ev;
}

std::vector<std::vector<size_t>> split_plans(size_t n, unsigned seed) {
  std::vector<std::vector<size_t>> plans;
  plans.push_back({});  // whole
  std::vector<size_t> bytes;
  for (size_t i = 1; i < n; ++i) bytes.push_back(i);
  plans.push_back(bytes);  // byte by byte
  std::mt19937 rng(seed);
  for (int k = 0; k < 20; ++k) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < n; ++i) {
      if (rng() % 5 == 0) cuts.push_back(i);
    }
    plans.push_back(cuts);
  }
  return plans;
}

TEST(ChatDsmlParser, AgreesWithOfficialParserUnderAnySplit) {
  Json fx = load_fixture("parse_cases.json");
  ASSERT_GE(fx.at("cases").size(), 15u);
  for (const Json& c : fx.at("cases")) {
    const std::string name = c.at("name");
    const std::string text = c.at("text");
    const bool thinking = c.at("thinking_mode") == "thinking";
    for (const auto& plan : split_plans(text.size(), 7)) {
      SCOPED_TRACE(name + " with " + std::to_string(plan.size()) + " cuts");
      Collected got = collect(run(text, thinking, plan));
      if (!c.at("ok").get<bool>()) {
        EXPECT_EQ(got.errors.size(), 1u) << "official: " << c.at("official_error");
        continue;
      }
      ASSERT_TRUE(got.errors.empty()) << got.errors[0];
      EXPECT_EQ(got.reasoning, c.at("reasoning_content").get<std::string>());
      EXPECT_EQ(got.text, c.at("content").get<std::string>());
      const Json& calls = c.at("tool_calls");
      ASSERT_EQ(got.calls.size(), calls.size());
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(got.calls[i].first, calls[i].at("name").get<std::string>());
        EXPECT_EQ(got.calls[i].second, calls[i].at("arguments").get<std::string>());
      }
    }
  }
}

TEST(ChatDsmlParser, RoundTripOfWellFormedOutput) {
  // render(parse(x)) == x for every accepted fixture completion.
  Json fx = load_fixture("parse_cases.json");
  for (const Json& c : fx.at("cases")) {
    if (!c.at("ok").get<bool>()) continue;
    const std::string text = c.at("text");
    const bool thinking = c.at("thinking_mode") == "thinking";
    DsmlStreamParser p(thinking);
    std::vector<DsmlEvent> ev;
    p.feed(text, ev);
    p.finish(ev);
    Collected got = collect(ev);
    std::string rebuilt;
    if (thinking) rebuilt += got.reasoning + std::string(mark::kThinkClose);
    rebuilt += got.text;
    if (!p.calls().empty()) {
      ASSERT_EQ(got.blocks.size(), 1u);
      EXPECT_EQ(render_tool_calls_block(p.calls()), got.blocks[0]);
      rebuilt += render_tool_calls_block(p.calls());
    }
    rebuilt += mark::kEos;
    EXPECT_EQ(rebuilt, text) << c.at("name");
  }
}

TEST(ChatDsmlParser, EventsCarryNamesAndTypes) {
  std::string text = "r</think>hi\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                     "<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>\n"
                     "<｜DSML｜parameter name=\"b\" string=\"false\">[1]</｜DSML｜parameter>\n"
                     "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  std::vector<DsmlEvent> ev = run(text, true, {});
  std::vector<DsmlEventKind> kinds;
  for (const auto& e : ev) kinds.push_back(e.kind);
  using K = DsmlEventKind;
  std::vector<K> want = {K::Reasoning, K::ReasoningEnd, K::Text, K::ToolCallsBegin, K::ToolCallStart,
                         K::Parameter, K::Parameter, K::ToolCallEnd, K::ToolCallsEnd};
  ASSERT_EQ(kinds, want);
  ev.erase(ev.begin() + 1);  // ReasoningEnd
  EXPECT_EQ(ev[3].name, "f");
  EXPECT_EQ(ev[4].name, "a");
  EXPECT_TRUE(ev[4].is_string);
  EXPECT_EQ(ev[4].text, "x");
  EXPECT_EQ(ev[5].name, "b");
  EXPECT_FALSE(ev[5].is_string);
  EXPECT_EQ(ev[5].text, "[1]");
  EXPECT_EQ(ev[6].text, R"({"a": "x", "b": [1]})");
  EXPECT_EQ(ev[7].text, text.substr(text.find("\n\n<")));
}

std::string single_error(const std::string& text, bool thinking, DsmlParserLimits lim = {}) {
  Collected c = collect(run(text, thinking, {}, lim));
  return c.errors.size() == 1 ? c.errors[0] : "<" + std::to_string(c.errors.size()) + " errors>";
}

TEST(ChatDsmlParser, MalformedAndUnterminatedInputGiveOneClearError) {
  std::string head = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
  EXPECT_EQ(single_error(head, false), "output ended inside an unterminated call of 'f'");
  EXPECT_EQ(single_error("\n\n<｜DSML｜tool_calls>", false),
            "output ended inside an unterminated tool-call block");
  EXPECT_EQ(single_error("thinking forever", true), "output ended inside reasoning (no </think>)");
  // Deliberately stricter than the official parser, which pastes such values unchecked.
  EXPECT_EQ(single_error(head + "<｜DSML｜parameter name=\"n\" string=\"false\">abc</｜DSML｜parameter>\n"
                                "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
                         false),
            "parameter 'n' of 'f' has string=\"false\" but its value is not JSON: 'abc'");
  EXPECT_EQ(single_error("\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>", false),
            "expected <｜DSML｜invoke in tool-call block, got '</｜DSML｜tool_calls>'");
  EXPECT_EQ(single_error("done<｜end▁of▁sentence｜>more", false), "text after end of sentence: 'more'");
}

TEST(ChatDsmlParser, LimitsBoundMemory) {
  DsmlParserLimits lim;
  lim.max_value_bytes = 64;
  lim.max_name_bytes = 16;
  std::string head = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
  std::string big(100, 'x');
  EXPECT_EQ(single_error(head + "<｜DSML｜parameter name=\"a\" string=\"true\">" + big, false, lim),
            "value of parameter 'a' in 'f' longer than 64 bytes");
  EXPECT_EQ(single_error("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"" + big, false, lim),
            "tool name longer than 16 bytes");
  EXPECT_EQ(single_error(head + "<｜DSML｜parameter name=\"" + big, false, lim),
            "parameter header in 'f' malformed or name longer than 16 bytes");
}

TEST(ChatDsmlParser, HeldBackTextIsFlushedAtFinish) {
  // "\n" could start the tool-call lead and "<" the EOS marker; both come out at finish.
  Collected c = collect(run("Hello\n\n<", false, {5, 6, 7}));
  EXPECT_TRUE(c.errors.empty());
  EXPECT_EQ(c.text, "Hello\n\n<");
  Collected r = collect(run("abc</thi", true, {}));
  EXPECT_EQ(r.reasoning, "abc</thi");
  EXPECT_EQ(r.errors.size(), 1u);
}

TEST(ChatDsmlParser, NothingAfterAnError) {
  DsmlStreamParser p(false);
  std::vector<DsmlEvent> ev;
  p.feed("\n\n<｜DSML｜tool_calls>X", ev);
  ASSERT_TRUE(p.failed());
  size_t n = ev.size();
  p.feed("more text", ev);
  p.finish(ev);
  EXPECT_EQ(ev.size(), n);
}

TEST(ChatDsml, CanonicalRenderingFollowsOfficialEncodeArgumentsToDsml) {
  // Hand-derived from encoding_dsv4.py encode_arguments_to_dsml + tool_call_template +
  // tool_calls_template: keys in argument order, strings raw, others json.dumps.
  ToolCall a;
  a.name = "f";
  a.arguments = Json::parse(R"({"q": "a\"b\n", "n": 2.0, "l": [1, {"k": null}]})");
  ToolCall b;
  b.name = "g";
  b.arguments = Json::object();
  std::string want =
      "\n\n<｜DSML｜tool_calls>\n"
      "<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"q\" string=\"true\">a\"b\n</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">2.0</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"l\" string=\"false\">[1, {\"k\": null}]</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"g\">\n\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls>";
  EXPECT_EQ(render_tool_calls_block(std::vector<ToolCall>{a, b}), want);
}

TEST(ChatDsml, ToolCallFromParsedDsml) {
  DsmlCall call{"f", {{"a", true, "x\"y"}, {"b", false, "[1, 2]"}}};
  ToolCall tc = tool_call_from_dsml(call, "call_7");
  EXPECT_EQ(tc.id, "call_7");
  EXPECT_EQ(tc.arguments_text, R"({"a": "x\"y", "b": [1, 2]})");
  EXPECT_EQ(tc.arguments.at("b").at(1), 2);
  EXPECT_EQ(dsml_call_from_tool_call(tc), call);
  DsmlCall bad{"g", {{"c", false, "nope"}}};
  EXPECT_THROW(tool_call_from_dsml(bad, "x"), ds4::Error);
}

}  // namespace
}  // namespace ds4::chat
