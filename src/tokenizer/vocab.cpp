#include "tokenizer/vocab.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/v4_specials.h"

namespace ds4::tokenizer {

void Vocab::validate(std::string_view what) const {
  if (tokens.empty()) ds4::fail("{}: vocabulary has no tokens", what);
  if (tokens.size() > 0x7FFFFFFF) ds4::fail("{}: {} tokens is more than int32 ids allow", what, tokens.size());
  if (types.size() != tokens.size())
    ds4::fail("{}: {} token types for {} tokens", what, types.size(), tokens.size());
  const auto n = static_cast<int64_t>(tokens.size());
  for (const AddedToken& a : added) {
    if (a.id < 0 || a.id >= n) ds4::fail("{}: added token id {} outside [0, {})", what, a.id, n);
    if (tokens[size_t(a.id)].empty()) ds4::fail("{}: added token id {} has empty text", what, a.id);
  }
  if (bos && (*bos < 0 || *bos >= n)) ds4::fail("{}: BOS id {} outside [0, {})", what, *bos, n);
  if (eos && (*eos < 0 || *eos >= n)) ds4::fail("{}: EOS id {} outside [0, {})", what, *eos, n);
}

std::optional<int32_t> Vocab::find(std::string_view text) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == text) return static_cast<int32_t>(i);
  return std::nullopt;
}

namespace {

using nlohmann::json;

// The DeepSeek V3 pre-tokenizer regexes as they appear in tokenizer.json (after JSON decoding).
constexpr std::string_view kHfRegex1 = R"(\p{N}{1,3})";
constexpr std::string_view kHfRegex2 = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
constexpr std::string_view kHfRegex3 =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Raw CR/LF characters inside a regex mean the same as the escapes \r \n.
std::string canonical_regex(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

const json& at(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) ds4::fail("{}: missing \"{}\"", where, key);
  return j.at(key);
}

bool null_or_empty_string(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return true;
  return j.at(key).is_string() && j.at(key).get<std::string>().empty();
}

// Returns true for HF's NFC normalizer (Qwen), false for none.
bool check_normalizer(const json& root, const std::string& name) {
  if (!root.contains("normalizer") || root["normalizer"].is_null()) return false;
  const json& n = root["normalizer"];
  if (n.value("type", "") == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array() &&
      n["normalizers"].empty())
    return false;
  if (n.is_object() && n.value("type", "") == "NFC" && n.size() == 1) return true;
  ds4::fail("{}: normalizer {} is not supported (only none, an empty Sequence, or NFC)", name, n.dump());
}

// The Qwen2/Qwen3 and Qwen3.5 split regexes as they appear in tokenizer.json.
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

PreTokenizerKind check_pre_tokenizer(const json& root, const std::string& name) {
  const std::string where = name + ": pre_tokenizer";
  const json& pt = at(root, "pre_tokenizer", name);
  const auto unsupported = [&](const std::string& why) {
    ds4::fail("{}: not the DeepSeek V3/V4, Qwen2 or Qwen3.5 sequence ({}); other pre-tokenizers are not supported",
              where, why);
  };
  if (!pt.is_object() || pt.value("type", "") != "Sequence" || !pt.contains("pretokenizers") ||
      !pt["pretokenizers"].is_array())
    unsupported("expected a Sequence");
  const json& seq = pt["pretokenizers"];
  const auto byte_level = [&](const json& bl, size_t i) {
    if (bl.value("type", "") != "ByteLevel") unsupported(fmt::format("step {} is not ByteLevel", i));
    if (bl.value("add_prefix_space", false)) unsupported("ByteLevel add_prefix_space is true");
    if (bl.value("use_regex", true)) unsupported("ByteLevel use_regex is true");
  };
  const auto split = [&](const json& s, size_t i) -> std::string {
    if (s.value("type", "") != "Split") unsupported(fmt::format("step {} is not Split", i));
    if (s.value("behavior", "") != "Isolated") unsupported(fmt::format("step {} behavior is not Isolated", i));
    if (s.value("invert", false)) unsupported(fmt::format("step {} is inverted", i));
    if (!s.contains("pattern") || !s["pattern"].contains("Regex") || !s["pattern"]["Regex"].is_string())
      unsupported(fmt::format("step {} has no Regex pattern", i));
    return canonical_regex(s["pattern"]["Regex"].get<std::string>());
  };
  if (seq.size() == 2) {  // Qwen: one Split, then ByteLevel
    const std::string re = split(seq[0], 0);
    byte_level(seq[1], 1);
    if (re == canonical_regex(std::string(kQwen2Regex))) return PreTokenizerKind::Qwen2;
    if (re == canonical_regex(std::string(kQwen35Regex))) return PreTokenizerKind::Qwen35;
    unsupported("step 0 regex is neither Qwen2's nor Qwen3.5's");
  }
  if (seq.size() != 4) unsupported(fmt::format("{} steps, expected 4 (DeepSeek) or 2 (Qwen)", seq.size()));
  const std::string_view expected[3] = {kHfRegex1, kHfRegex2, kHfRegex3};
  for (int i = 0; i < 3; ++i) {
    const json& s = seq[size_t(i)];
    if (s.value("type", "") != "Split") unsupported(fmt::format("step {} is not Split", i));
    if (s.value("behavior", "") != "Isolated") unsupported(fmt::format("step {} behavior is not Isolated", i));
    if (s.value("invert", false)) unsupported(fmt::format("step {} is inverted", i));
    if (!s.contains("pattern") || !s["pattern"].contains("Regex") || !s["pattern"]["Regex"].is_string())
      unsupported(fmt::format("step {} has no Regex pattern", i));
    if (canonical_regex(s["pattern"]["Regex"].get<std::string>()) != canonical_regex(std::string(expected[i])))
      unsupported(fmt::format("step {} regex differs", i));
  }
  byte_level(seq[3], 3);
  return PreTokenizerKind::DeepSeekV3;
}

void check_model(const json& model, const std::string& name) {
  const std::string where = name + ": model";
  if (model.value("type", "") != "BPE") ds4::fail("{}: type is not BPE", where);
  if (model.contains("dropout") && !model["dropout"].is_null()) ds4::fail("{}: BPE dropout is not supported", where);
  if (model.value("byte_fallback", false)) ds4::fail("{}: byte_fallback is not supported", where);
  if (model.value("ignore_merges", false)) ds4::fail("{}: ignore_merges is not supported", where);
  if (!null_or_empty_string(model, "continuing_subword_prefix") || !null_or_empty_string(model, "end_of_word_suffix"))
    ds4::fail("{}: continuing_subword_prefix / end_of_word_suffix are not supported", where);
}

void check_decoder(const json& root, const std::string& name) {
  if (!root.contains("decoder") || root["decoder"].is_null() || root["decoder"].value("type", "") != "ByteLevel")
    ds4::fail("{}: decoder must be ByteLevel", name);
}

}  // namespace

Vocab vocab_from_hf_json_text(std::string_view json_text, const std::string& name, bool v4_specials) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    ds4::fail("{}: not valid JSON: {}", name, e.what());
  }
  if (!root.is_object()) ds4::fail("{}: top level is not a JSON object", name);
  const bool nfc = check_normalizer(root, name);
  const PreTokenizerKind pre = check_pre_tokenizer(root, name);
  check_decoder(root, name);
  const json& model = at(root, "model", name);
  check_model(model, name);

  // id -> text and type, from the model vocab then the added tokens.
  std::unordered_map<int64_t, std::pair<std::string, TokenType>> by_id;
  std::unordered_map<std::string, int64_t> by_text;
  int64_t max_id = -1;
  const json& vocab = at(model, "vocab", name + ": model");
  if (!vocab.is_object()) ds4::fail("{}: model.vocab is not an object", name);
  for (const auto& [text, idj] : vocab.items()) {
    if (!idj.is_number_integer()) ds4::fail("{}: model.vocab[\"{}\"] is not an integer", name, text);
    const int64_t id = idj.get<int64_t>();
    if (id < 0 || id > 0x7FFFFFFE) ds4::fail("{}: model.vocab[\"{}\"] = {} is out of range", name, text, id);
    if (!by_id.emplace(id, std::make_pair(text, TokenType::Normal)).second)
      ds4::fail("{}: model.vocab id {} used twice", name, id);
    by_text[text] = id;
    max_id = std::max(max_id, id);
  }

  Vocab v;
  const int64_t model_size = static_cast<int64_t>(by_id.size());
  int64_t max_added = -1;
  // HF tokenizers ignores the "id" of an added token: it reuses the model id of the same text,
  // or else takes the next id after the model vocabulary and the tokens added so far. We apply
  // the same rule and refuse a file whose ids disagree, since HF would not use them either.
  const auto add_token = [&](int64_t id, const std::string& content, uint8_t flags, const std::string& where) {
    if (content.empty()) ds4::fail("{}: empty content", where);
    const TokenType type = (flags & kSpecial) ? TokenType::Control : TokenType::UserDefined;
    auto known = by_text.find(content);
    int64_t hf_id;
    if (known != by_text.end()) hf_id = known->second;
    else hf_id = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
    if (id != hf_id)
      ds4::fail("{}: \"{}\" declares id {} but HF tokenizers would give it id {}", where, content, id, hf_id);
    if (known != by_text.end()) {
      auto& entry = by_id.at(id);
      if (entry.second != TokenType::Normal) ds4::fail("{}: added token \"{}\" listed twice", where, content);
      entry.second = type;  // a model token that is also added (BOS/EOS in DeepSeek)
    } else {
      by_id.emplace(id, std::make_pair(content, type));
      by_text[content] = id;
      max_added = std::max(max_added, id);
    }
    max_id = std::max(max_id, id);
    v.added.push_back({static_cast<int32_t>(id), flags});
  };

  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const json& at_list = root["added_tokens"];
    if (!at_list.is_array()) ds4::fail("{}: added_tokens is not an array", name);
    for (size_t i = 0; i < at_list.size(); ++i) {
      const json& a = at_list[i];
      const std::string where = fmt::format("{}: added_tokens[{}]", name, i);
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        ds4::fail("{}: needs an integer \"id\" and a string \"content\"", where);
      uint8_t flags = 0;
      if (a.value("lstrip", false)) flags |= kLstrip;
      if (a.value("rstrip", false)) flags |= kRstrip;
      if (a.value("single_word", false)) flags |= kSingleWord;
      if (a.value("normalized", true)) flags |= kNormalized;  // HF's default for a missing field
      if (a.value("special", false)) flags |= kSpecial;
      add_token(a["id"].get<int64_t>(), a["content"].get<std::string>(), flags, where);
    }
  }

  if (v4_specials) {
    for (const V4Special& s : ds4::tokenizer::v4_specials()) {
      if (by_text.count(std::string(s.content))) continue;  // the file already has it (a real V4 file)
      add_token(s.id, std::string(s.content), kSpecial, fmt::format("{}: V4 token \"{}\"", name, s.content));
    }
  }

  v.tokens.resize(size_t(max_id + 1));
  v.types.assign(size_t(max_id + 1), TokenType::Unused);
  for (int64_t id = 0; id <= max_id; ++id) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      v.tokens[size_t(id)] = fmt::format("[PAD{}]", id);  // llama.cpp's filler for unused ids
    } else {
      v.tokens[size_t(id)] = it->second.first;
      v.types[size_t(id)] = it->second.second;
    }
  }

  const json& merges = at(model, "merges", name + ": model");
  if (!merges.is_array()) ds4::fail("{}: model.merges is not an array", name);
  v.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
        ds4::fail("{}: model.merges[{}] = \"{}\" is not \"left right\"", name, i, s);
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
      if (left.empty() || right.empty() || left.find(' ') != std::string::npos || right.find(' ') != std::string::npos)
        ds4::fail("{}: model.merges[{}] has a part that is empty or contains a space", name, i);
    } else {
      ds4::fail("{}: model.merges[{}] is neither \"left right\" nor [left, right]", name, i);
    }
    v.merges.push_back(left + " " + right);
  }

  v.pre = pre;
  v.nfc = nfc;
  // BOS/EOS by string, as the engine resolves every special token. Qwen has no BOS; its
  // tokenizer_config.json names <|im_end|> as EOS (what ends a chat turn).
  if (pre == PreTokenizerKind::DeepSeekV3) {
    v.bos = v.find("<｜begin▁of▁sentence｜>");
    v.eos = v.find("<｜end▁of▁sentence｜>");
  } else {
    v.eos = v.find("<|im_end|>");
  }
  v.validate(name);
  return v;
}

Vocab vocab_from_hf_json(const std::string& path, bool v4_specials) {
  std::ifstream f(path, std::ios::binary);
  if (!f) ds4::fail("{}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) ds4::fail("{}: read error", path);
  return vocab_from_hf_json_text(ss.str(), path, v4_specials);
}

}  // namespace ds4::tokenizer
