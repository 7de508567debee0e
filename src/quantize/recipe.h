#pragma once
// Quantization recipes as data: an ordered list of rules "tensor-name pattern -> type",
// optionally restricted to some layers (the "boosted" first / last layers of a recipe).
//
// Text form (one rule per line, '#' starts a comment):
//   PATTERN TYPE [layers=SPEC]
// PATTERN is a tensor name in which '*' matches any run of characters (dots included); TYPE is
// a ggml type name (f32, f16, bf16, q8_0, q4_0, q5_0, q4_K, q2_K, iq2_xxs, ...) or `keep`
// (copy the source bytes unchanged). SPEC is a comma-separated list of items `A`, `A-B`,
// `first:N` or `last:N` (layer numbers of blk.<L>.*). The last matching rule wins. Rules apply
// to matrices (two or more dimensions, float or quantized): vectors and integer tensors are
// always copied unchanged. A matrix that no rule matches keeps its type (copied).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "quant/types.h"

namespace ds4::quantize {

struct LayerRange {
  enum Kind { Range, First, Last } kind = Range;
  int64_t a = 0, b = 0;  // Range: [a, b]; First/Last: a = N
};

struct RecipeRule {
  std::string pattern;
  std::optional<GgmlType> type;  // nullopt: keep
  std::vector<LayerRange> layers;  // empty: every tensor (global ones included)
  int line = 0;
};

struct Recipe {
  std::string name;    // built-in name or file path
  std::vector<RecipeRule> rules;
};

// Parses the text form. Throws ds4::Error naming `what`, the line and the problem (unknown
// type, bad layer spec, missing fields).
Recipe parse_recipe(std::string_view text, const std::string& what);

// The text of a built-in recipe ("flash-q2", "flash-q4", "q8_0"), or nullopt.
std::optional<std::string> builtin_recipe_text(std::string_view name);
std::vector<std::string> builtin_recipe_names();

// A built-in name, else a file path. Throws naming the argument when neither.
Recipe load_recipe(const std::string& name_or_path);

// Glob match with '*' only.
bool glob_match(std::string_view pattern, std::string_view name);

// Layer of "blk.<L>.<...>" names, else -1.
int64_t tensor_layer(std::string_view name);

// What the recipe gives one tensor: the matching rule (index into rules), or -1.
int match_rule(const Recipe& r, std::string_view tensor, int64_t n_layers);

// Checks the recipe against a tensor table: a pattern without '*' must name an existing tensor,
// layer numbers must be < n_layers. Returns one warning line per wildcard pattern that matches
// nothing (allowed: built-ins cover tensors some models lack). Throws ds4::Error otherwise.
std::vector<std::string> check_recipe(const Recipe& r, const std::vector<std::string>& tensor_names, int64_t n_layers);

}  // namespace ds4::quantize
