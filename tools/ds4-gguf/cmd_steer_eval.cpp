// `ds4-gguf steer-eval -m MODEL --dir-steering-file F --text A.jsonl [--text B.jsonl ...]
// --scales S1,S2,.. [--sublayer attn|ffn|both] [--raw]`: measures a direction's effect. For each
// scale (applied to the chosen sublayers, the other scale 0) it prints the mean natural-log
// probability per token the model gives each text set (tokens after the first of each text,
// teacher-forced in one batch), one table row per scale.
#include <charconv>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "command.h"
#include "core/error.h"
#include "ds4/engine.h"
#include "session/steering.h"
#include "steer_prompts.h"

namespace {

constexpr const char* kUsage =
    "usage: steer-eval -m MODEL.gguf --dir-steering-file F --text A.jsonl [--text B.jsonl ..] --scales S1,S2,.. "
    "[--sublayer attn|ffn|both] [--raw] [--threads N]";

std::vector<float> parse_scales(const std::string& s) {
  std::vector<float> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string w = s.substr(i, j - i);
    float v = 0;
    auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
    if (w.empty() || ec != std::errc() || p != w.data() + w.size()) ds4::fail("--scales: '{}' is not a number", w);
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

int cmd_steer_eval(int argc, char** argv) {
  ds4::EngineOptions eo;
  std::vector<std::string> texts;
  std::string scales_arg, sublayer = "both";
  bool raw = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) ds4::fail("{} needs a value\n{}", a, kUsage);
      return argv[++i];
    };
    if (a == "-m" || a == "--model") eo.model_path = value();
    else if (a == "--dir-steering-file") eo.dir_steering_file = value();
    else if (a == "--text") texts.push_back(value());
    else if (a == "--scales") scales_arg = value();
    else if (a == "--sublayer") sublayer = value();
    else if (a == "--threads") eo.threads = std::stoi(value());
    else if (a == "--raw") raw = true;
    else ds4::fail("unknown argument '{}'\n{}", a, kUsage);
  }
  if (eo.dir_steering_file.empty() || texts.empty() || scales_arg.empty()) ds4::fail("{}", kUsage);
  if (sublayer != "attn" && sublayer != "ffn" && sublayer != "both")
    ds4::fail("--sublayer '{}': expected attn, ffn or both", sublayer);
  const auto scales = parse_scales(scales_arg);
  auto engine = ds4::Engine::open(eo);
  std::vector<std::vector<std::vector<int32_t>>> sets;
  for (const auto& t : texts) sets.push_back(ds4::tools::prompt_tokens(*engine, ds4::tools::read_prompts(t), raw));
  fmt::print("# {} sublayer(s) {}; mean log-prob per token (nats), texts:", eo.dir_steering_file, sublayer);
  for (size_t k = 0; k < texts.size(); ++k) fmt::print(" [{}] {}", k, texts[k]);
  fmt::print("\nscale");
  for (size_t k = 0; k < texts.size(); ++k) fmt::print("\t[{}]", k);
  if (texts.size() == 2) fmt::print("\t[0]-[1]");
  fmt::print("\n");
  for (float s : scales) {
    const float a = sublayer == "ffn" ? 0.0f : s, f = sublayer == "attn" ? 0.0f : s;
    std::vector<double> mean;
    for (const auto& set : sets) {
      double sum = 0;
      int64_t n = 0;
      for (const auto& toks : set) {
        const auto [lp, k] = ds4::steer::score_text(*engine, toks, a, f);
        sum += lp, n += k;
      }
      if (n == 0) ds4::fail("a text set has no token to score (every text needs at least 2 tokens)");
      mean.push_back(sum / static_cast<double>(n));
    }
    fmt::print("{}", s);
    for (double m : mean) fmt::print("\t{:.4f}", m);
    if (mean.size() == 2) fmt::print("\t{:.4f}", mean[0] - mean[1]);
    fmt::print("\n");
  }
  return 0;
}

const bool registered = ds4::tools::register_command(
    {"steer-eval",
     "-m MODEL --dir-steering-file F --text A.jsonl [--text B.jsonl] --scales S1,S2 [--sublayer attn|ffn|both]   "
     "mean log-prob per token of text sets under steering",
     cmd_steer_eval});

}  // namespace
