// The pre-tokenizer's character classes must put every code point where HF's regex engine
// (Oniguruma inside tokenizers 0.23.2) puts it. Oracle: tests/fixtures/tokenizer/
// hf_unicode_classes.json, recorded by reference_ids.py --probe on the HF Python package.
#include <gtest/gtest.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace ds4::test {
namespace {

std::vector<bool> hf_members(const std::string& name) {
  std::ifstream f(std::string(DS4_FIXTURES_DIR) + "/tokenizer/hf_unicode_classes.json");
  const auto j = nlohmann::json::parse(f);
  std::vector<bool> m(0x110000, false);
  for (const auto& r : j.at(name)) {
    const uint32_t a = r[0].get<uint32_t>(), b = r[1].get<uint32_t>();
    for (uint32_t c = a; c <= b; ++c) m[c] = true;
  }
  return m;
}

void check_class(const std::string& hf_name, const std::string& body) {
  const std::string pat = "[" + body + "]";
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr);
  ASSERT_NE(re, nullptr);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  const auto hf = hf_members(hf_name);
  size_t diff = 0;
  for (uint32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string s;
    tokenizer::utf8_append(s, c);
    const bool ours = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr) >= 0;
    if (ours != hf[c] && ++diff <= 5) ADD_FAILURE() << hf_name << ": U+" << std::hex << c << " ours=" << ours << " HF=" << hf[c];
  }
  EXPECT_EQ(diff, 0u) << hf_name;
  pcre2_match_data_free(md);
  pcre2_code_free(re);
}

TEST(TokenizerUnicode, ClassesMatchHf) {
  for (const char* c : {"L", "N", "M", "P", "S"}) check_class(c, tokenizer::PreTokenizer::class_body(c));
  check_class("s", tokenizer::PreTokenizer::class_body("s"));
}

// The whitespace predicate used by lstrip/rstrip is the same set.
TEST(TokenizerUnicode, WhitespacePredicateMatchesHf) {
  const auto hf = hf_members("s");
  for (uint32_t c = 0; c < 0x110000; ++c)
    ASSERT_EQ(tokenizer::is_unicode_whitespace(c), bool(hf[c])) << std::hex << c;
}

}  // namespace
}  // namespace ds4::test
