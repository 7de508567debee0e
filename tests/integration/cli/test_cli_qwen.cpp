// The ds4 CLI on a qwen35moe model (a random checkpoint converted by convert-hf, whose
// placeholder vocabulary carries the ChatML control tokens): the chat prompt format comes from
// general.architecture, so the first turn is exactly what Qwen3.6's Jinja template renders
// (the expected strings are the template's own output, tests/fixtures/chat/
// chatml36_render_cases.json, written by tools/oracle/chat/gen_chatml_fixtures.py), and a later
// REPL turn appends the template's turn separator after the generated answer.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/test_paths.h"
#include "convert/convert_hf.h"
#include "ds4/tokenizer.h"
#include "unit/model/qwen35moe_checkpoint.h"

namespace fs = std::filesystem;

namespace {

const fs::path& scratch() {
  static const fs::path d = [] {
    const fs::path p = ds4::test::test_tmp_dir() / ("ds4_cli_qwen_" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

const std::string& model() {
  static const std::string path = [] {
    ds4::test::QwenTiny c;
    c.vocab = 272;  // room for the ChatML control tokens after the 256 byte tokens
    c.layers = {"linear_attention", "full_attention", "linear_attention"};
    ds4::test::write_qwen_checkpoint((scratch() / "hf").string(), c, 47);
    ds4::convert::ConvertOptions o;
    o.hf_dir = (scratch() / "hf").string();
    o.out_path = (scratch() / "qwen.gguf").string();
    o.recipe = ds4::convert::Recipe::F32;
    ds4::convert::convert_hf(o);
    return o.out_path;
  }();
  return path;
}

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Run {
  int rc = -1;
  std::string out, err;
};

Run run_ds4(const std::string& args, const std::string& input = "") {
  static int n = 0;
  const std::string base = (scratch() / ("run" + std::to_string(n++))).string();
  std::ofstream(base + ".in", std::ios::binary) << input;
  const std::string cmd = std::string(DS4_BIN) + " -m " + model() + " -t 2 " + args + " <" + base + ".in >" + base +
                          ".out 2>" + base + ".err";
  const int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, read_file(base + ".out"), read_file(base + ".err")};
}

std::vector<nlohmann::json> trace_events(const std::string& path, const std::string& kind) {
  std::vector<nlohmann::json> v;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && nlohmann::json::parse(line)["event"] == kind) v.push_back(nlohmann::json::parse(line));
  return v;
}

// The Jinja template's rendering of one fixture case (add_generation_prompt).
std::string template_output(const std::string& case_name) {
  std::ifstream in(std::string(DS4_FIXTURES_DIR) + "/chat/chatml36_render_cases.json");
  const auto fixture = nlohmann::json::parse(in);
  for (const auto& c : fixture.at("cases"))
    if (c.at("name") == case_name) return c.at("expected").get<std::string>();
  throw std::runtime_error("no fixture case " + case_name);
}

// Session tokens of a /save payload (docs/FORMATS.md, qwen35moe body: n_pos at 48, tokens at 80).
std::vector<int32_t> payload_tokens(const std::string& path) {
  const std::string p = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, p.data() + 48, 8);
  std::vector<int32_t> t(n);
  std::memcpy(t.data(), p.data() + 80, n * 4);
  return t;
}

}  // namespace

// One-shot prompts in both thinking modes: the tokens evaluated are the template's text.
TEST(CliQwen, OneShotPromptIsTheChatmlTemplatesOutput) {
  const ds4::Tokenizer tok = ds4::Tokenizer::load(model());
  // no_thinking: user "2+2?" with enable_thinking false; user_only: "Hello!", thinking on.
  for (const auto& [flag, text, name] :
       {std::tuple{"--nothink", "2+2?", "no_thinking"}, std::tuple{"--think", "Hello!", "user_only"}}) {
    const std::string tr = (scratch() / (std::string(name) + ".trace")).string();
    const auto r = run_ds4(std::string(flag) + " -p '" + text + "' --temp 0 -n 6 --ignore-eos --trace " + tr);
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto pre = trace_events(tr, "prefill");
    ASSERT_EQ(pre.size(), 1u);
    EXPECT_EQ(pre[0]["evaluated"].get<size_t>(), tok.encode(template_output(name), /*parse_special=*/true).size())
        << name;
    EXPECT_EQ(trace_events(tr, "token").size(), 6u);
  }
}

// Two piped turns: the saved session holds the template's first prompt, the first answer, the
// template's separator (the answer's <|im_end|> unless the model produced it, then the next
// user turn and the assistant opening, as in the fixture's multi_turn case) and the second answer.
TEST(CliQwen, ReplTurnsAppendTheTemplatesSeparator) {
  const std::string tr = (scratch() / "repl.trace").string(), sv = (scratch() / "repl.ds4s").string();
  const auto r =
      run_ds4("--nothink --temp 0 -n 8 --ignore-eos --trace " + tr, "2+2?\nagain\n/save " + sv + "\n/quit\n");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<std::vector<int32_t>> turns(1);
  for (const auto& e : trace_events(tr, "token")) turns.back().push_back(e["id"].get<int32_t>());
  ASSERT_EQ(trace_events(tr, "turn_end").size(), 2u);
  // Split the 16 generated ids into the two answers of 8.
  ASSERT_EQ(turns[0].size(), 16u);
  const std::vector<int32_t> gen1(turns[0].begin(), turns[0].begin() + 8), gen2(turns[0].begin() + 8, turns[0].end());

  const ds4::Tokenizer tok = ds4::Tokenizer::load(model());
  const auto im_end = tok.find_token("<|im_end|>");
  ASSERT_TRUE(im_end);
  std::vector<int32_t> want = tok.encode(template_output("no_thinking"), /*parse_special=*/true);
  want.insert(want.end(), gen1.begin(), gen1.end());
  const std::string sep = std::string(gen1.back() == *im_end ? "" : "<|im_end|>") +
                          "\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  const auto sep_ids = tok.encode(sep, /*parse_special=*/true);
  want.insert(want.end(), sep_ids.begin(), sep_ids.end());
  want.insert(want.end(), gen2.begin(), gen2.end());
  EXPECT_EQ(payload_tokens(sv), want);
  const auto pre = trace_events(tr, "prefill");
  ASSERT_EQ(pre.size(), 2u);
  EXPECT_EQ(pre[1]["evaluated"].get<size_t>(), sep_ids.size());
}
