#include "chat_model.h"

#include <filesystem>

#include "../model/synthetic_model.h"
#include "gguf/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/vocab.h"

namespace ds4::test {

void write_chat_model(const std::string& path, const ChatModelConfig& c) {
  using tokenizer::TokenType;
  tokenizer::Vocab v;
  const auto& bl = tokenizer::ByteLevel::get();
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(bl.byte_to_utf8[static_cast<size_t>(b)]);
    v.types.push_back(TokenType::Normal);
  }
  for (const char* s : {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>",
                        "</think>"}) {
    v.added.push_back({static_cast<int32_t>(v.tokens.size()), tokenizer::kSpecial});
    v.tokens.push_back(s);
    v.types.push_back(TokenType::Control);
  }
  v.bos = 256;
  v.eos = 257;
  while (v.tokens.size() < 264) {
    v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
    v.types.push_back(TokenType::Unused);
  }

  SynthConfig sc;
  sc.n_vocab = static_cast<int64_t>(v.tokens.size());
  sc.seed = c.seed;
  const std::string raw = path + ".raw";
  write_synthetic_model(raw, sc);
  {
    gguf::File in = gguf::File::open(raw);
    gguf::Writer w(path);
    for (const auto& kv : in.metadata())
      if (kv.key != "general.alignment" && kv.key.rfind("tokenizer.", 0) != 0 &&
          kv.key != "deepseek4.context_length")
        w.add_kv(kv.key, kv.value);
    w.add_kv("deepseek4.context_length", gguf::Value::u32(static_cast<uint32_t>(c.context_length)));
    tokenizer::vocab_to_gguf(v, w);
    for (const auto& t : in.tensors()) w.add_tensor(t.name, t.type, t.ne);
    w.write_header();
    for (const auto& t : in.tensors()) w.write_tensor_data({t.data, static_cast<size_t>(t.n_bytes)});
    w.finish();
  }
  std::filesystem::remove(raw);
}

}  // namespace ds4::test
