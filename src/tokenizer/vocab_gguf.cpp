// Vocabulary <-> GGUF metadata (tokenizer.ggml.* and tokenizer.ds4.*).
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace ds4::tokenizer {

std::string_view pre_tokenizer_name(PreTokenizerKind k) {
  switch (k) {
    case PreTokenizerKind::DeepSeekV3: return "joyai-llm";
    case PreTokenizerKind::Qwen2: return "qwen2";
    case PreTokenizerKind::Qwen35: return "qwen35";
  }
  return "joyai-llm";
}

Vocab vocab_from_gguf(const gguf::File& file) {
  const std::string& name = file.path();
  const auto model = file.get_string(kKeyModel);
  if (!model) ds4::fail("{}: no {}: not a file with a vocabulary", name, kKeyModel);
  if (*model != "gpt2") ds4::fail("{}: {} is \"{}\"; only byte-level BPE (\"gpt2\") is supported", name, kKeyModel, *model);
  // The pre-tokenizer is implied by this name. Refuse others instead of silently splitting wrong.
  const auto pre = file.get_string(kKeyPre);
  Vocab v;
  if (pre && (*pre == "joyai-llm" || *pre == "deepseek-v3")) v.pre = PreTokenizerKind::DeepSeekV3;
  else if (pre && *pre == "qwen2") v.pre = PreTokenizerKind::Qwen2;
  else if (pre && *pre == "qwen35") v.pre = PreTokenizerKind::Qwen35;
  else
    ds4::fail("{}: {} is {}; supported pre-tokenizers: \"joyai-llm\" / \"deepseek-v3\" (DeepSeek V3/V4), \"qwen2\", "
              "\"qwen35\"",
              name, kKeyPre, pre ? "\"" + *pre + "\"" : std::string("missing"));
  // Qwen tokenizers normalize to NFC (their tokenizer.json says so; GGUF has no key for it).
  if (auto n = file.get_string(kKeyNormalizer)) {
    if (*n != "nfc" && *n != "none") ds4::fail("{}: {} is \"{}\" (nfc or none)", name, kKeyNormalizer, *n);
    v.nfc = *n == "nfc";
  } else {
    v.nfc = v.pre != PreTokenizerKind::DeepSeekV3;
  }

  auto tokens = file.get_string_array(kKeyTokens);
  if (!tokens) ds4::fail("{}: no {}", name, kKeyTokens);
  v.tokens = std::move(*tokens);
  auto merges = file.get_string_array(kKeyMerges);
  if (!merges) ds4::fail("{}: no {}", name, kKeyMerges);
  v.merges = std::move(*merges);

  if (auto types = file.get_int_array(kKeyTokenType)) {
    if (types->size() != v.tokens.size())
      ds4::fail("{}: {} has {} entries for {} tokens", name, kKeyTokenType, types->size(), v.tokens.size());
    v.types.reserve(types->size());
    for (size_t i = 0; i < types->size(); ++i) {
      const int64_t t = (*types)[i];
      if (t < 0 || t > 6) ds4::fail("{}: {}[{}] = {} is not a token type", name, kKeyTokenType, i, t);
      v.types.push_back(static_cast<TokenType>(t));
    }
  } else {
    v.types.assign(v.tokens.size(), TokenType::Normal);  // no types: nothing is an added token
  }

  const auto ids = file.get_int_array(kKeyAddedIds);
  const auto flags = file.get_int_array(kKeyAddedFlags);
  if (ids.has_value() != flags.has_value() || (ids && ids->size() != flags->size()))
    ds4::fail("{}: {} and {} must both be present with the same length", name, kKeyAddedIds, kKeyAddedFlags);
  if (ids) {
    for (size_t i = 0; i < ids->size(); ++i) {
      const int64_t id = (*ids)[i], f = (*flags)[i];
      if (id < 0 || id >= int64_t(v.tokens.size()))
        ds4::fail("{}: {}[{}] = {} outside the vocabulary", name, kKeyAddedIds, i, id);
      if (f < 0 || f > 31) ds4::fail("{}: {}[{}] = {} is not a flag set", name, kKeyAddedFlags, i, f);
      v.added.push_back({static_cast<int32_t>(id), static_cast<uint8_t>(f)});
    }
  } else {
    // llama.cpp's convention: Control = special added token, UserDefined = other added token.
    for (size_t i = 0; i < v.types.size(); ++i) {
      if (v.types[i] == TokenType::Control) v.added.push_back({int32_t(i), kSpecial});
      else if (v.types[i] == TokenType::UserDefined) v.added.push_back({int32_t(i), 0});
    }
  }

  const auto id_key = [&](const char* key) -> std::optional<int32_t> {
    const auto x = file.get_uint(key);
    if (!x) return std::nullopt;
    if (*x >= v.tokens.size()) ds4::fail("{}: {} = {} outside the vocabulary", name, key, *x);
    return static_cast<int32_t>(*x);
  };
  v.bos = id_key(kKeyBos);
  v.eos = id_key(kKeyEos);
  v.validate(name);
  return v;
}

void vocab_to_gguf(const Vocab& v, gguf::Writer& w) {
  using gguf::Value;
  using gguf::ValueType;
  w.add_kv(kKeyModel, Value::string("gpt2"));
  w.add_kv(kKeyPre, Value::string(std::string(pre_tokenizer_name(v.pre))));
  // Written only where it differs from what the pre-tokenizer implies (DeepSeek files unchanged).
  if (v.nfc != (v.pre != PreTokenizerKind::DeepSeekV3)) w.add_kv(kKeyNormalizer, Value::string(v.nfc ? "nfc" : "none"));
  w.add_kv(kKeyTokens, Value::string_array(v.tokens));
  std::vector<Value> types;
  types.reserve(v.types.size());
  for (TokenType t : v.types) types.push_back(Value::i32(static_cast<int32_t>(t)));
  w.add_kv(kKeyTokenType, Value::array(ValueType::I32, std::move(types)));
  w.add_kv(kKeyMerges, Value::string_array(v.merges));
  if (v.bos) w.add_kv(kKeyBos, Value::u32(static_cast<uint32_t>(*v.bos)));
  if (v.eos) w.add_kv(kKeyEos, Value::u32(static_cast<uint32_t>(*v.eos)));
  std::vector<Value> ids, flags;
  for (const AddedToken& a : v.added) {
    ids.push_back(Value::i32(a.id));
    flags.push_back(Value::u8(a.flags));
  }
  w.add_kv(kKeyAddedIds, Value::array(ValueType::I32, std::move(ids)));
  w.add_kv(kKeyAddedFlags, Value::array(ValueType::U8, std::move(flags)));
}

}  // namespace ds4::tokenizer
