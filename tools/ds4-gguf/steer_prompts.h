#pragma once
// Prompt sets of steer-build / steer-eval: JSONL files (a JSON string or an object with
// "prompt" or "text" per line), rendered as one user turn of the chat template (non-thinking,
// ending at the assistant prefix) or, with raw, tokenized as is after BOS.
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/renderer.h"
#include "core/error.h"
#include "ds4/engine.h"

namespace ds4::tools {

inline std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("{}: cannot open prompt file", path);
  std::vector<std::string> out;
  std::string line;
  size_t no = 0;
  while (std::getline(f, line)) {
    ++no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      fail("{}:{}: not JSON: {}", path, no, e.what());
    }
    if (j.is_string()) out.push_back(j.get<std::string>());
    else if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) out.push_back(j["prompt"].get<std::string>());
    else if (j.is_object() && j.contains("text") && j["text"].is_string()) out.push_back(j["text"].get<std::string>());
    else fail("{}:{}: expected a JSON string or an object with a string \"prompt\" or \"text\"", path, no);
  }
  if (out.empty()) fail("{}: no prompts", path);
  return out;
}

inline std::vector<std::vector<int32_t>> prompt_tokens(const Engine& engine, const std::vector<std::string>& texts,
                                                       bool raw) {
  const auto& info = engine.info();
  const Tokenizer& tok = engine.tokenizer();
  std::vector<std::vector<int32_t>> out;
  for (const auto& text : texts) {
    if (raw) {
      std::vector<int32_t> ids;
      if (info.bos_id) ids.push_back(*info.bos_id);
      tok.encode_append(text, false, ids);
      out.push_back(std::move(ids));
    } else {
      chat::Conversation c;
      chat::Message m;
      m.role = chat::Role::User;
      m.content = text;
      c.messages.push_back(m);
      chat::RenderOptions ro;
      ro.thinking = chat::ThinkingMode::None;
      ro.context_size = static_cast<uint64_t>(info.n_ctx);
      out.push_back(tok.encode(chat::render_prompt(c, ro), true));
    }
  }
  return out;
}

}  // namespace ds4::tools
