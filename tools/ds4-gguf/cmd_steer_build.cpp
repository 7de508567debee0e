// `ds4-gguf steer-build -m MODEL --positive A.jsonl --negative B.jsonl [--layers L0:L1]
// [--position last|mean] [--raw] --out DIR.f32`: builds a steering direction file
// (docs/FORMATS.md "Steering direction file") from two contrasting prompt sets.
// Each JSONL line is a JSON string or an object with "prompt" or "text". By default a prompt
// is rendered as one user turn of the DeepSeek V4 chat template (non-thinking), ending at the
// assistant prefix; --raw tokenizes the text as is (BOS first when the vocabulary has one).
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "chat/renderer.h"
#include "command.h"
#include "core/error.h"
#include "ds4/engine.h"
#include "session/steering.h"

namespace {

constexpr const char* kUsage =
    "usage: steer-build -m MODEL.gguf --positive A.jsonl --negative B.jsonl [--layers L0:L1] "
    "[--position last|mean] [--raw] [--threads N] --out DIR.f32";

std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream f(path);
  if (!f) ds4::fail("{}: cannot open prompt file", path);
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
      ds4::fail("{}:{}: not JSON: {}", path, no, e.what());
    }
    if (j.is_string()) out.push_back(j.get<std::string>());
    else if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) out.push_back(j["prompt"].get<std::string>());
    else if (j.is_object() && j.contains("text") && j["text"].is_string()) out.push_back(j["text"].get<std::string>());
    else ds4::fail("{}:{}: expected a JSON string or an object with a string \"prompt\" or \"text\"", path, no);
  }
  if (out.empty()) ds4::fail("{}: no prompts", path);
  return out;
}

int cmd_steer_build(int argc, char** argv) {
  ds4::EngineOptions eo;
  std::string pos_path, neg_path, out_path, layers, position = "last";
  bool raw = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) ds4::fail("{} needs a value\n{}", a, kUsage);
      return argv[++i];
    };
    if (a == "-m" || a == "--model") eo.model_path = value();
    else if (a == "--positive") pos_path = value();
    else if (a == "--negative") neg_path = value();
    else if (a == "--out") out_path = value();
    else if (a == "--layers") layers = value();
    else if (a == "--position") position = value();
    else if (a == "--threads") eo.threads = std::stoi(value());
    else if (a == "--raw") raw = true;
    else ds4::fail("unknown argument '{}'\n{}", a, kUsage);
  }
  if (pos_path.empty() || neg_path.empty() || out_path.empty()) ds4::fail("{}", kUsage);
  ds4::steer::Position pos;
  if (position == "last") pos = ds4::steer::Position::Last;
  else if (position == "mean") pos = ds4::steer::Position::Mean;
  else ds4::fail("--position '{}': expected last or mean", position);

  auto engine = ds4::Engine::open(eo);
  const auto& info = engine->info();
  int64_t first = 0, count = info.n_layer;
  if (!layers.empty()) {
    const auto colon = layers.find(':');
    size_t e0 = 0, e1 = 0;
    int64_t l0 = -1, l1 = -1;
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      l0 = std::stoll(layers.substr(0, colon), &e0);
      l1 = std::stoll(layers.substr(colon + 1), &e1);
    } catch (const std::exception&) {
      ds4::fail("--layers '{}': expected L0:L1 (first and last layer, inclusive)", layers);
    }
    if (e0 != colon || e1 != layers.size() - colon - 1 || l0 < 0 || l1 < l0 || l1 >= info.n_layer)
      ds4::fail("--layers '{}': expected L0:L1 with 0 <= L0 <= L1 < {}", layers, info.n_layer);
    first = l0, count = l1 - l0 + 1;
  }
  const ds4::Tokenizer& tok = engine->tokenizer();
  auto tokens_of = [&](const std::string& path) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& text : read_prompts(path)) {
      if (raw) {
        std::vector<int32_t> ids;
        if (info.bos_id) ids.push_back(*info.bos_id);
        tok.encode_append(text, false, ids);
        out.push_back(std::move(ids));
      } else {
        ds4::chat::Conversation c;
        ds4::chat::Message m;
        m.role = ds4::chat::Role::User;
        m.content = text;
        c.messages.push_back(m);
        ds4::chat::RenderOptions ro;
        ro.thinking = ds4::chat::ThinkingMode::None;
        ro.context_size = static_cast<uint64_t>(info.n_ctx);
        out.push_back(tok.encode(ds4::chat::render_prompt(c, ro), true));
      }
    }
    return out;
  };
  const auto positive = tokens_of(pos_path);
  const auto negative = tokens_of(neg_path);
  const auto d = ds4::steer::build(*engine, positive, negative, first, count, pos);
  ds4::steer::save(out_path, d);
  fmt::print("{}: {} layers ({}..{}) x 2 directions of {} floats, position {}, {} positive / {} negative prompts{}\n",
             out_path, d.count, d.first, d.first + d.count - 1, d.dim, ds4::steer::to_string(d.position),
             d.n_positive, d.n_negative, raw ? " (raw text)" : " (chat template)");
  return 0;
}

const bool registered = ds4::tools::register_command(
    {"steer-build",
     "-m MODEL --positive A.jsonl --negative B.jsonl [--layers L0:L1] [--position last|mean] [--raw] --out F   "
     "build a steering direction file",
     cmd_steer_build});

}  // namespace
