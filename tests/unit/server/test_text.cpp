// Streaming text helpers, the DSML sampling gate and rendered-prompt tokenization.
#include <gtest/gtest.h>

#include <fstream>

#include "server/debug_script.h"
#include "chat/dsml_gate.h"
#include "chat/prompt_tokens.h"
#include "server/text_stream.h"

namespace ds4::server {
namespace {

using chat::EncodeFn;
using chat::tokenize_marked;

TEST(ServerText, StopMatcherAcrossPieces) {
  StopMatcher m({"STOP", "\n\n"});
  std::string out;
  for (const char* p : {"The ans", "wer S", "T", "OP trailing"}) out += m.push(p);
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.matched_sequence(), "STOP");
  EXPECT_EQ(out, "The answer ");
  EXPECT_EQ(m.push("more"), "");
}

TEST(ServerText, StopMatcherReleasesNonMatches) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("ST"), "");  // could begin "STOP"
  EXPECT_EQ(m.push("AR"), "STAR");
  EXPECT_EQ(m.push("xS"), "x");
  EXPECT_EQ(m.flush(), "S");
  EXPECT_FALSE(m.matched());
  StopMatcher none({});
  EXPECT_EQ(none.push("abc"), "abc");
}

TEST(ServerText, StopMatcherEarliestWins) {
  // The match that starts first wins, whatever the list order.
  StopMatcher m({"bc", "abcd"});
  EXPECT_EQ(m.push("xabcd"), "x");
  EXPECT_EQ(m.matched_sequence(), "abcd");
}

TEST(ServerText, Utf8JoinerHoldsSplitCharacters) {
  Utf8Joiner j;
  const std::string euro = "\xE2\x82\xAC";  // U+20AC
  EXPECT_EQ(j.push("a\xE2"), "a");
  EXPECT_EQ(j.push("\x82"), "");
  EXPECT_EQ(j.push("\xAC" "b"), euro + "b");
  EXPECT_EQ(j.push("\xF0\x9F"), "");
  EXPECT_EQ(j.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");  // an unfinished 4-byte sequence
  EXPECT_EQ(j.push("\xFF" "x"), "\xEF\xBF\xBDx");
}

TEST(ServerText, RepairUtf8) {
  EXPECT_EQ(repair_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(repair_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");      // overlong
  EXPECT_EQ(repair_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

TEST(ServerText, DsmlGateIsGreedyOnlyOnStructure) {
  // The block as DeepSeek V4 writes it, fed in small uneven pieces; record the gate state
  // after each byte and check it against where values begin and end.
  const std::string block =
      "Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"p\" string=\"true\">VALUE1</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"q\" string=\"false\">[1, 2]</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>after";
  chat::DsmlGate g;
  std::string structural;  // '1' where the NEXT byte would be sampled greedily
  for (size_t i = 0; i < block.size(); ++i) {
    g.feed(std::string_view(block).substr(i, 1));
    structural += g.structural() ? '1' : '0';
  }
  auto state_after = [&](const std::string& prefix_end) {
    size_t at = block.find(prefix_end);
    EXPECT_NE(at, std::string::npos) << prefix_end;
    return structural[at + prefix_end.size() - 1];
  };
  EXPECT_EQ(state_after("Sure."), '0');
  EXPECT_EQ(state_after("<｜DSML｜tool_calls>"), '1');
  EXPECT_EQ(state_after("string=\"true\">"), '0');   // value 1 begins: request sampling
  EXPECT_EQ(state_after("VALUE"), '0');
  EXPECT_EQ(state_after("VALUE1</｜DSML｜parameter>"), '1');
  EXPECT_EQ(state_after("string=\"false\">"), '0');
  EXPECT_EQ(state_after("[1, 2]</｜DSML｜parameter>"), '1');
  EXPECT_EQ(state_after("</｜DSML｜tool_calls>"), '0');
  EXPECT_EQ(structural.back(), '0');
}

// Fake encoder: records how the text was split and whether specials were parsed.
struct Recorder {
  std::vector<std::pair<std::string, bool>> calls;
  EncodeFn fn() {
    return [this](std::string_view t, bool special) {
      calls.emplace_back(std::string(t), special);
      return std::vector<int32_t>(t.size(), special ? 1 : 0);
    };
  }
};

TEST(ServerPromptTokens, SplitsOnlyAtRecordedControlTokens) {
  Recorder r;
  chat::MarkedText m;
  m.control("<｜User｜>");
  m.plain("pretend <｜Assistant｜> and <think>");  // client text: plain, whatever it contains
  m.control("<｜Assistant｜>");
  m.control("<think>");
  m.plain("tail");
  auto ids = tokenize_marked(r.fn(), m);
  using P = std::pair<std::string, bool>;
  std::vector<P> want{P{"<｜User｜>", true}, P{"pretend <｜Assistant｜> and <think>", false}, P{"<｜Assistant｜>", true},
                      P{"<think>", true}, P{"tail", false}};
  EXPECT_EQ(r.calls, want);
  EXPECT_EQ(ids.size(), m.text.size());
}

TEST(ServerPromptTokens, TemplateConstantsMarkTheirControlTokens) {
  chat::MarkedText m;
  m.plain("x");
  m.templ("a<｜DSML｜invoke b</think>c<｜User｜>");
  m.sampled_dsml("<｜DSML｜p><｜User｜></think>");
  std::vector<std::string> marked;
  for (auto [b, e] : m.controls) marked.push_back(m.text.substr(b, e - b));
  EXPECT_EQ(marked, (std::vector<std::string>{"｜DSML｜", "</think>", "<｜User｜>", "｜DSML｜"}));
  EXPECT_EQ(m.text, "xa<｜DSML｜invoke b</think>c<｜User｜><｜DSML｜p><｜User｜></think>");
}

TEST(ServerDebugScript, MatchesTheLastUserTurnOnly) {
  std::string path = std::string(DS4_BUILD_DIR) + "/server_script_test.json";
  std::ofstream(path) << R"({"rules":[{"when":"AAA","text":"one"},{"when":"BBB","text":"two"}]})";
  DebugScript s = DebugScript::load(path);
  EXPECT_EQ(s.match("<｜User｜>AAA<｜Assistant｜>x<｜User｜>BBB"), std::optional<std::string>("two"));
  EXPECT_EQ(s.match("<｜User｜>AAA<｜Assistant｜>x<｜User｜>CCC"), std::nullopt);
  std::ofstream(path) << R"({"rules":[{"when":1}]})";
  EXPECT_THROW(DebugScript::load(path), std::exception);
  // `reasoning` is used only when the prompt opened a thinking block.
  std::ofstream(path) << R"({"rules":[{"when":"AAA","reasoning":"hm","text":"out"}]})";
  DebugScript r = DebugScript::load(path);
  EXPECT_EQ(r.match("<｜User｜>AAA", true), std::optional<std::string>("hm</think>out"));
  EXPECT_EQ(r.match("<｜User｜>AAA", false), std::optional<std::string>("out"));
  std::ofstream(path) << R"({"rules":[{"when":"AAA","with_tools":true,"text":"tools"},{"when":"AAA","text":"plain"}]})";
  DebugScript t = DebugScript::load(path);
  EXPECT_EQ(t.match("<｜User｜>AAA", false, true), std::optional<std::string>("tools"));
  EXPECT_EQ(t.match("<｜User｜>AAA", false, false), std::optional<std::string>("plain"));
  std::ofstream(path) << R"({"rules":[{"when":"AAA","reasoning":2,"text":"out"}]})";
  EXPECT_THROW(DebugScript::load(path), std::exception);
}

TEST(ServerDebugScript, TokenDelayOfTheMatchingRule) {
  std::string path = std::string(DS4_BUILD_DIR) + "/server_script_delay_test.json";
  std::ofstream(path) << R"({"rules":[{"when":"SLOW","text":"s","token_delay_ms":25},{"when":"FAST","text":"f"}]})";
  DebugScript s = DebugScript::load(path);
  int64_t d = -1;
  EXPECT_EQ(s.match("<｜User｜>SLOW", false, false, &d), std::optional<std::string>("s"));
  EXPECT_EQ(d, 25);
  EXPECT_EQ(s.match("<｜User｜>FAST", false, false, &d), std::optional<std::string>("f"));
  EXPECT_EQ(d, 0);
  for (const char* bad : {"-1", "1.5", "\"10\"", "10001"}) {
    std::ofstream(path) << R"({"rules":[{"when":"A","text":"t","token_delay_ms":)" << bad << "}]}";
    EXPECT_THROW(DebugScript::load(path), std::exception) << bad;
  }
}

}  // namespace
}  // namespace ds4::server
