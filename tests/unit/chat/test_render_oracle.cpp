// Byte-exact prompt rendering against DeepSeek's official encoder.
// Expectations: tests/fixtures/chat/render_cases.json, written by
// tools/oracle/chat/gen_chat_fixtures.py, which runs the official encoding_dsv4.py
// `encode_messages` on each request (cases named official_test_N are the gold outputs
// shipped in the release's encoding/tests folder). Each case records its source.
#include "chat/openai_parse.h"
#include "chat/renderer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace ds4::chat {
namespace {

Json load_fixture(const char* name) {
  std::ifstream in(std::string(DS4_FIXTURES_DIR) + "/chat/" + name, std::ios::binary);
  if (!in) throw std::runtime_error(std::string("missing fixture ") + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

ThinkingMode thinking_from(const std::string& s) {
  if (s == "none") return ThinkingMode::None;
  if (s == "max") return ThinkingMode::Max;
  return ThinkingMode::High;
}

std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto around = [&](const std::string& s) {
    size_t b = i > 60 ? i - 60 : 0;
    return s.substr(b, 120);
  };
  return "first difference at byte " + std::to_string(i) + "\n got: " + around(got) +
         "\nwant: " + around(want);
}

TEST(ChatRenderOracle, AllFixtureCasesMatchOfficialEncoder) {
  Json fx = load_fixture("render_cases.json");
  const Json& cases = fx.at("cases");
  ASSERT_GE(cases.size(), 30u);
  size_t official = 0;
  for (const Json& c : cases) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name + " (source: " + c.at("source").get<std::string>() + ")");
    const Json& o = c.at("options");
    ParseOptions po;
    po.lenient_arguments = o.at("lenient_arguments").get<bool>();
    RenderOptions ro;
    ro.thinking = thinking_from(o.at("thinking"));
    ro.context_size = o.at("context_size").get<std::uint64_t>();
    ro.drop_thinking = o.at("drop_thinking").get<bool>();
    Conversation conv = parse_chat_request(c.at("request"), po);
    std::string got = render_prompt(conv, ro);
    const std::string want = c.at("expected");
    EXPECT_TRUE(got == want) << first_difference(got, want);
    if (name.rfind("official_test_", 0) == 0) ++official;
  }
  // The four gold files of the release must be part of the fixture.
  EXPECT_EQ(official, 4u);
}

}  // namespace
}  // namespace ds4::chat
