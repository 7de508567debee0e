// Parity with HF tokenizers 0.23.2 (the Python package, run on the GPU image by
// tools/oracle/tokenizer/reference_ids.py; the Node binding gives byte-identical files) on the
// committed corpus of tests/fixtures/tokenizer. Exact equality: ids are integers, no tolerance.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer_fixture.h"

namespace ds4::test {
namespace {

std::string show(const std::vector<int32_t>& ids) {
  return nlohmann::json(ids).dump().substr(0, 400);
}

enum class Mode { Plain, Special, V4 };

void check_mode(Mode mode) {
  const Tokenizer& tok = deepseek_tokenizer(mode == Mode::V4);
  const bool parse_special = mode != Mode::Plain;
  size_t checked = 0, mismatches = 0;
  const auto& lines = corpus();
  for (size_t i = 0; i < lines.size(); ++i) {
    const CorpusLine& l = lines[i];
    if (!l.valid_text) continue;
    const auto& ref = mode == Mode::Plain ? l.plain : mode == Mode::Special ? l.special : l.v4;
    ASSERT_TRUE(ref.has_value()) << "line " << i + 1 << " has no reference";
    const auto ids = tok.encode(l.bytes, parse_special);
    ++checked;
    if (ids != *ref) {
      if (++mismatches <= 5)
        ADD_FAILURE() << "corpus line " << i + 1 << ": " << nlohmann::json(l.bytes).dump().substr(0, 200)
                      << "\n ours: " << show(ids) << "\n HF:   " << show(*ref);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << checked << " strings";
  EXPECT_GE(checked, 5000u);
}

TEST(TokenizerParity, PlainModeMatchesHfWithoutAddedTokens) { check_mode(Mode::Plain); }
TEST(TokenizerParity, SpecialModeMatchesHfDefault) { check_mode(Mode::Special); }
TEST(TokenizerParity, V4SpecialModeMatchesHfWithV4Tokens) { check_mode(Mode::V4); }

// The corpus must exercise what distinguishes the modes, or the tests above prove little.
TEST(TokenizerParity, CorpusCoversSpecialTextAndInvalidBytes) {
  size_t differ = 0, differ_v4 = 0, invalid = 0;
  for (const CorpusLine& l : corpus()) {
    if (!l.valid_text) {
      ++invalid;
      continue;
    }
    differ += *l.special != *l.plain;
    differ_v4 += *l.v4 != *l.special;
  }
  EXPECT_GE(differ, 300u);
  EXPECT_GE(differ_v4, 300u);
  EXPECT_GE(invalid, 100u);
}

// decode(encode(s)) == s byte for byte in every mode, invalid UTF-8 included.
TEST(TokenizerParity, DecodeOfEncodeRoundTripsEveryLine) {
  for (bool v4 : {false, true}) {
    const Tokenizer& tok = deepseek_tokenizer(v4);
    for (bool special : {false, true}) {
      size_t bad = 0;
      for (size_t i = 0; i < corpus().size(); ++i) {
        const std::string& s = corpus()[i].bytes;
        if (tok.decode(tok.encode(s, special)) != s && ++bad <= 3)
          ADD_FAILURE() << "line " << i + 1 << " (v4=" << v4 << ", special=" << special << ") does not round-trip";
      }
      EXPECT_EQ(bad, 0u);
    }
  }
}

// Decoding HF's own ids gives the text back: checks decode independently of our encoder.
TEST(TokenizerParity, DecodeOfHfIdsGivesTheText) {
  const Tokenizer& tok = deepseek_tokenizer(true);
  size_t bad = 0;
  for (size_t i = 0; i < corpus().size(); ++i) {
    const CorpusLine& l = corpus()[i];
    if (!l.valid_text) continue;
    for (const auto* ref : {&l.plain, &l.special, &l.v4})
      if (tok.decode(**ref) != l.bytes && ++bad <= 3) ADD_FAILURE() << "line " << i + 1;
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace ds4::test
