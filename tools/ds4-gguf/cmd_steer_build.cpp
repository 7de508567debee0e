// `ds4-gguf steer-build -m MODEL --positive A.jsonl --negative B.jsonl [--layers L0:L1]
// [--position last|mean] [--raw] --out DIR.f32`: builds a steering direction file
// (docs/FORMATS.md "Steering direction file") from two contrasting prompt sets.
// Each JSONL line is a JSON string or an object with "prompt" or "text". By default a prompt
// is rendered as one user turn of the DeepSeek V4 chat template (non-thinking), ending at the
// assistant prefix; --raw tokenizes the text as is (BOS first when the vocabulary has one).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "command.h"
#include "core/error.h"
#include "ds4/engine.h"
#include "session/steering.h"
#include "steer_prompts.h"

namespace {

using ds4::tools::read_prompts;

constexpr const char* kUsage =
    "usage: steer-build -m MODEL.gguf --positive A.jsonl --negative B.jsonl [--layers L0:L1] "
    "[--position last|mean] [--raw] [--threads N] --out DIR.f32";

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
  auto tokens_of = [&](const std::string& path) { return ds4::tools::prompt_tokens(*engine, read_prompts(path), raw); };
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
