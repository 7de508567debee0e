// Recipes as data: the built-ins equal convert-hf's hand-written tables, layer selectors,
// glob matching, and clear errors for unknown types, unknown tensors and bad layer lists.
#include <gtest/gtest.h>

#include "convert/gguf_layout.h"
#include "convert/hf_config.h"
#include "core/error.h"
#include "quantize/recipe.h"

using namespace ds4;
using namespace ds4::quantize;

namespace {

// The type a recipe gives a tensor of convert's plan (vectors and I32 keep their type).
GgmlType recipe_type(const Recipe& r, const convert::TensorPlan& t, int64_t n_layers, GgmlType source) {
  if (t.ne.size() < 2 || t.type == GgmlType::I32) return t.type;
  const int i = match_rule(r, t.name, n_layers);
  if (i < 0 || !r.rules[static_cast<size_t>(i)].type) return source;
  return *r.rules[static_cast<size_t>(i)].type;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// convert-hf's recipes are code (gguf_layout.cpp wanted_type); the built-ins are data written
// independently. Both must give every tensor of the 43-layer Flash table the same type.
TEST(Recipe, BuiltinsEqualConvertTables) {
  const convert::ModelShape s = convert::flash_shape(43);
  for (auto [name, rc] : {std::pair{"flash-q2", convert::Recipe::FlashQ2}, std::pair{"flash-q4", convert::Recipe::FlashQ4},
                          std::pair{"q8_0", convert::Recipe::Q8_0}}) {
    const Recipe r = load_recipe(name);
    const auto plan = convert::plan_tensors(s, rc);
    const auto f32 = convert::plan_tensors(s, convert::Recipe::F32);
    ASSERT_EQ(plan.size(), f32.size());
    size_t checked = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
      if (!plan[i].note.empty()) continue;  // fallbacks are applied by quantize, not the recipe
      EXPECT_EQ(recipe_type(r, plan[i], 43, f32[i].type), plan[i].type) << name << " " << plan[i].name;
      ++checked;
    }
    EXPECT_GT(checked, 1000u) << name;
  }
}

TEST(Recipe, LayerSelectorsAndLastRuleWins) {
  const Recipe r = parse_recipe(
      "* q8_0\n"
      "blk.*.ffn_gate_exps.weight iq2_xxs\n"
      "blk.*.ffn_gate_exps.weight q4_K layers=first:1,last:2  # boosted\n"
      "blk.3.ffn_gate_exps.weight keep layers=3\n",
      "test");
  ASSERT_EQ(r.rules.size(), 4u);
  auto type_of = [&](const std::string& n) -> std::string {
    int i = match_rule(r, n, 6);
    if (i < 0) return "none";
    return r.rules[i].type ? std::string(traits(*r.rules[i].type).name) : "keep";
  };
  EXPECT_EQ(type_of("blk.0.ffn_gate_exps.weight"), "q4_K");
  EXPECT_EQ(type_of("blk.1.ffn_gate_exps.weight"), "iq2_xxs");
  EXPECT_EQ(type_of("blk.3.ffn_gate_exps.weight"), "keep");
  EXPECT_EQ(type_of("blk.4.ffn_gate_exps.weight"), "q4_K");
  EXPECT_EQ(type_of("blk.5.ffn_gate_exps.weight"), "q4_K");
  EXPECT_EQ(type_of("output.weight"), "q8_0");
  EXPECT_EQ(r.rules[2].line, 3);
}

TEST(Recipe, Glob) {
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("blk.*.attn_*", "blk.12.attn_q_a.weight"));
  EXPECT_TRUE(glob_match("*hc_*fn.weight", "output_hc_fn.weight"));
  EXPECT_FALSE(glob_match("*hc_*fn.weight", "blk.0.hc_attn_base.weight"));
  EXPECT_FALSE(glob_match("blk.*.x", "blk.1.xy"));
  EXPECT_TRUE(glob_match("a*b*c", "aXXbYYbc"));
  EXPECT_EQ(tensor_layer("blk.42.ffn_up_exps.weight"), 42);
  EXPECT_EQ(tensor_layer("output.weight"), -1);
  EXPECT_EQ(tensor_layer("blk.x.y"), -1);
}

TEST(Recipe, BadInputNamesLineAndProblem) {
  EXPECT_NE(error_of([] { parse_recipe("* q8_0\nblk.*.ffn_up_exps.weight q9_9\n", "r.txt"); })
                .find("recipe r.txt line 2: unknown tensor type 'q9_9'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_recipe("* q8_0 layers=5-2\n", "r"); }).find("line 1: layer range '5-2' is empty"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_recipe("* q8_0 layers=a\n", "r"); }).find("'a' is not a layer number"), std::string::npos);
  EXPECT_NE(error_of([] { parse_recipe("onlyone\n", "r"); }).find("expected 'PATTERN TYPE"), std::string::npos);
  EXPECT_NE(error_of([] { parse_recipe("# nothing\n", "r"); }).find("no rules"), std::string::npos);
  EXPECT_NE(error_of([] { load_recipe("/nonexistent/recipe.txt"); }).find("neither a built-in recipe"), std::string::npos);

  const std::vector<std::string> names{"output.weight", "blk.0.ffn_up_exps.weight", "blk.1.ffn_up_exps.weight"};
  EXPECT_NE(error_of([&] { check_recipe(parse_recipe("blk.0.ffn_upp_exps.weight q4_K\n", "r"), names, 2); })
                .find("unknown tensor 'blk.0.ffn_upp_exps.weight'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_recipe(parse_recipe("* q4_K layers=2\n", "r"), names, 2); })
                .find("layer 2 does not exist"),
            std::string::npos);
  // A wildcard that matches nothing is a warning, not an error (built-ins cover optional tensors).
  auto w = check_recipe(parse_recipe("blk.*.indexer.* f16\n", "r"), names, 2);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("matches no tensor"), std::string::npos);
}
