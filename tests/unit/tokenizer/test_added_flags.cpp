// HF AddedToken flags (lstrip, rstrip, single_word, normalized two-pass order) on a patched
// DeepSeek tokenizer.json, against HF tokenizers 0.23.2 ids (tests/fixtures/tokenizer/flags_*).
// The DeepSeek files set none of these flags; a future tokenizer.json might.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/vocab.h"
#include "tokenizer_fixture.h"

namespace ds4::test {
namespace {

using nlohmann::json;

TEST(TokenizerAddedFlags, MatchHf) {
  std::ifstream tf(tokenizer_json_path());
  json tj = json::parse(tf);
  std::ifstream pf(std::string(DS4_FIXTURES_DIR) + "/tokenizer/flags_patch.json");
  const json patch = json::parse(pf);
  for (const json& p : patch["added_tokens"]) {
    bool replaced = false;
    for (json& a : tj["added_tokens"])
      if (a["content"] == p["content"]) {
        a = p;
        replaced = true;
      }
    if (!replaced) tj["added_tokens"].push_back(p);
  }
  const Tokenizer tok = Tokenizer::from_vocab(tokenizer::vocab_from_hf_json_text(tj.dump(), "patched", false), "patched");

  std::ifstream rf(std::string(DS4_FIXTURES_DIR) + "/tokenizer/flags_reference.jsonl");
  std::string line;
  size_t n = 0, bad = 0;
  while (std::getline(rf, line)) {
    const json r = json::parse(line);
    const std::string text = r["text"].get<std::string>();
    const auto ids = tok.encode(text, true);
    ++n;
    if (ids != r["ids"].get<std::vector<int32_t>>() && ++bad <= 5)
      ADD_FAILURE() << json(text).dump() << "\n ours " << json(ids).dump() << "\n HF   " << r["ids"].dump();
  }
  EXPECT_EQ(bad, 0u) << "of " << n;
  EXPECT_GE(n, 2000u);
}

}  // namespace
}  // namespace ds4::test
