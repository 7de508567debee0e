// `ds4-gguf vocab-from-hf --tokenizer-json F --out V.gguf [--v4-specials]`: converts an HF
// tokenizer.json (DeepSeek V3/V4 byte-level BPE) into a vocabulary-only GGUF that
// `tokenize -m` and the engine load. The vocabulary is the file's, id for id; --v4-specials
// adds the DeepSeek V4 tokens the V3 file lacks (src/tokenizer/v4_specials.h).
#include <string>

#include <fmt/format.h>

#include "command.h"
#include "core/error.h"
#include "ds4/tokenizer.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace {

constexpr const char* kUsage = "usage: vocab-from-hf --tokenizer-json FILE --out FILE.gguf [--v4-specials]";

int cmd_vocab_from_hf(int argc, char** argv) {
  std::string in, out;
  bool v4 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) ds4::fail("{} needs a value ({})", a, kUsage);
      return argv[++i];
    };
    if (a == "--tokenizer-json") in = value();
    else if (a == "--out") out = value();
    else if (a == "--v4-specials") v4 = true;
    else ds4::fail("unknown argument '{}' ({})", a, kUsage);
  }
  if (in.empty() || out.empty()) ds4::fail("{}", kUsage);

  ds4::tokenizer::Vocab vocab = ds4::tokenizer::vocab_from_hf_json(in, v4);
  // Build the tokenizer once before writing: it refuses merges that name unknown tokens.
  (void)ds4::Tokenizer::from_vocab(vocab, in);

  ds4::gguf::Writer w(out);
  w.add_kv("general.name", ds4::gguf::Value::string("DeepSeek tokenizer (vocabulary only)"));
  ds4::tokenizer::vocab_to_gguf(vocab, w);
  w.write_header();
  w.finish();
  fmt::print(stderr, "{}: {} tokens ({} added), {} merges{}\n", out, vocab.tokens.size(), vocab.added.size(),
             vocab.merges.size(), v4 ? ", with the DeepSeek V4 tokens" : "");
  return 0;
}

const bool registered = ds4::tools::register_command(
    {"vocab-from-hf", "--tokenizer-json F --out V.gguf [--v4-specials]   vocabulary-only GGUF from tokenizer.json",
     cmd_vocab_from_hf});

}  // namespace
