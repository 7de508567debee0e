#include "quantize/recipe.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace ds4::quantize {

namespace {

// The built-ins reproduce convert-hf's recipes (convert/gguf_layout.cpp), rule for rule, so a
// re-quantized file has the table a conversion would have written (tested).
constexpr std::string_view kCommon = R"(# Everything every token uses stays in 8 bits or more.
*                               q8_0      # attention, shared expert, output head
token_embd.weight               f16
*hc_*fn.weight                  f16       # hyper-connection mixing matrices
blk.*.attn_compressor_*         f16       # compressor projections and position bias
blk.*.indexer.*                 f16       # CSA indexer projections
blk.*.indexer_compressor_*      f16
blk.*.ffn_gate_inp.weight       f16       # router
)";

std::string builtin(std::string_view name, std::string_view gate_up, std::string_view down, std::string_view what) {
  std::string s = "# " + std::string(name) + ": " + std::string(what) + "\n";
  s += kCommon;
  s += "# Routed experts.\n";
  s += "blk.*.ffn_gate_exps.weight      " + std::string(gate_up) + "\n";
  s += "blk.*.ffn_up_exps.weight        " + std::string(gate_up) + "\n";
  s += "blk.*.ffn_down_exps.weight      " + std::string(down) + "\n";
  return s;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::optional<GgmlType> type_by_name(std::string_view n) {
  const std::string l = lower(n);
  for (uint32_t id = 0; id < 64; ++id)
    if (auto t = type_traits(id); t && lower(t->name) == l) return t->type;
  return std::nullopt;
}

int64_t parse_int(std::string_view s, const std::string& where) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    fail("{}: '{}' is not a layer number", where, s);
  return std::stoll(std::string(s));
}

LayerRange parse_range(std::string_view item, const std::string& where) {
  LayerRange r;
  if (item.starts_with("first:") || item.starts_with("last:")) {
    r.kind = item[0] == 'f' ? LayerRange::First : LayerRange::Last;
    r.a = parse_int(item.substr(item.find(':') + 1), where);
    if (r.a == 0) fail("{}: '{}' selects no layer", where, item);
    return r;
  }
  const size_t dash = item.find('-');
  r.a = parse_int(item.substr(0, dash), where);
  r.b = dash == std::string_view::npos ? r.a : parse_int(item.substr(dash + 1), where);
  if (r.b < r.a) fail("{}: layer range '{}' is empty", where, item);
  return r;
}

bool in_layers(const std::vector<LayerRange>& ls, int64_t layer, int64_t n_layers) {
  if (ls.empty()) return true;
  if (layer < 0) return false;
  for (const auto& r : ls) {
    if (r.kind == LayerRange::Range && layer >= r.a && layer <= r.b) return true;
    if (r.kind == LayerRange::First && layer < r.a) return true;
    if (r.kind == LayerRange::Last && layer >= n_layers - r.a) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> builtin_recipe_names() { return {"flash-q2", "flash-q4", "q8_0", "keep"}; }

std::optional<std::string> builtin_recipe_text(std::string_view name) {
  if (name == "flash-q2")
    return builtin(name, "iq2_xxs", "q2_K", "the published 2-bit file (routed experts gate/up IQ2_XXS, down Q2_K)");
  if (name == "flash-q4") return builtin(name, "q4_K", "q4_K", "routed experts in Q4_K");
  if (name == "q8_0") return builtin(name, "q8_0", "q8_0", "routed experts in Q8_0 as well");
  // Every tensor as it is (what `quantize --prune` needs to drop experts without re-quantizing).
  if (name == "keep") return std::string("# keep: every tensor copied unchanged\n* keep\n");
  return std::nullopt;
}

Recipe parse_recipe(std::string_view text, const std::string& what) {
  Recipe r;
  r.name = what;
  std::istringstream in{std::string(text)};
  std::string line;
  int ln = 0;
  while (std::getline(in, line)) {
    ++ln;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ls(line);
    std::vector<std::string> f;
    for (std::string w; ls >> w;) f.push_back(w);
    if (f.empty()) continue;
    const std::string where = fmt::format("recipe {} line {}", what, ln);
    if (f.size() < 2) fail("{}: expected 'PATTERN TYPE [layers=...]', got '{}'", where, line);
    if (f.size() > 3) fail("{}: unexpected '{}' after the layer list", where, f[3]);
    RecipeRule rule;
    rule.line = ln;
    rule.pattern = f[0];
    if (rule.pattern.size() > 200) fail("{}: pattern longer than 200 characters", where);
    if (lower(f[1]) != "keep") {
      rule.type = type_by_name(f[1]);
      if (!rule.type) fail("{}: unknown tensor type '{}' (ggml names: f32, f16, bf16, q8_0, q4_0, q4_K, q2_K, iq2_xxs, ...)", where, f[1]);
    }
    if (f.size() == 3) {
      if (!f[2].starts_with("layers=")) fail("{}: expected layers=SPEC, got '{}'", where, f[2]);
      std::string_view spec = std::string_view(f[2]).substr(7);
      if (spec.empty()) fail("{}: empty layer list", where);
      while (!spec.empty()) {
        const size_t c = spec.find(',');
        rule.layers.push_back(parse_range(spec.substr(0, c), where));
        spec = c == std::string_view::npos ? std::string_view{} : spec.substr(c + 1);
      }
    }
    r.rules.push_back(std::move(rule));
  }
  if (r.rules.empty()) fail("recipe {}: no rules", what);
  return r;
}

Recipe load_recipe(const std::string& name_or_path) {
  if (auto t = builtin_recipe_text(name_or_path)) return parse_recipe(*t, name_or_path);
  std::ifstream f(name_or_path, std::ios::binary);
  if (!f) {
    std::string names;
    for (const auto& n : builtin_recipe_names()) names += (names.empty() ? "" : ", ") + n;
    fail("recipe '{}': neither a built-in recipe ({}) nor a readable file", name_or_path, names);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (ss.str().size() > (1u << 20)) fail("recipe {}: larger than 1 MiB", name_or_path);
  return parse_recipe(ss.str(), name_or_path);
}

bool glob_match(std::string_view p, std::string_view s) {
  // Iterative '*' matcher with backtracking to the last star.
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] != '*' && p[pi] == s[si]) {
      ++pi, ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++, mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1, si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

int64_t tensor_layer(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  name.remove_prefix(4);
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 9) return -1;
  int64_t v = 0;
  for (size_t i = 0; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

int match_rule(const Recipe& r, std::string_view tensor, int64_t n_layers) {
  const int64_t layer = tensor_layer(tensor);
  for (int i = static_cast<int>(r.rules.size()) - 1; i >= 0; --i) {
    const auto& rule = r.rules[static_cast<size_t>(i)];
    if (in_layers(rule.layers, layer, n_layers) && glob_match(rule.pattern, tensor)) return i;
  }
  return -1;
}

std::vector<std::string> check_recipe(const Recipe& r, const std::vector<std::string>& names, int64_t n_layers) {
  std::vector<std::string> warnings;
  for (const auto& rule : r.rules) {
    const std::string where = fmt::format("recipe {} line {}", r.name, rule.line);
    for (const auto& lr : rule.layers) {
      const int64_t top = lr.kind == LayerRange::Range ? lr.b : lr.a - 1;
      if (top >= n_layers)
        fail("{}: layer {} does not exist (the model has {} layers: 0-{})", where, top, n_layers, n_layers - 1);
    }
    bool any = false;
    for (const auto& n : names)
      if (glob_match(rule.pattern, n)) {
        any = true;
        break;
      }
    if (any) continue;
    if (rule.pattern.find('*') == std::string::npos)
      fail("{}: unknown tensor '{}' (the model has no tensor of that name)", where, rule.pattern);
    warnings.push_back(fmt::format("{}: pattern '{}' matches no tensor", where, rule.pattern));
  }
  return warnings;
}

}  // namespace ds4::quantize
