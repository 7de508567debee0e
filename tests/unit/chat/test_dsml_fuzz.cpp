// Fuzzes the streaming DSML parser with >= 100k generated and mutated completions, each
// fed in randomly cut pieces (deterministic seed). Checked for every input:
//   * at most one Error event, and nothing after it;
//   * text already emitted is never taken back: the bytes rebuilt from the events are a
//     prefix of the input;
//   * accepted input is reproduced exactly: reasoning + "</think>" + text + each tool-call
//     block + EOS rebuilt from the events equals the input, and every block equals the
//     canonical re-rendering of the calls parsed from it;
//   * well-formed generated input is always accepted and yields the generated calls.
// Memory errors are caught when this binary runs under ASan/UBSan.
#include "chat/dsml.h"
#include "chat/dsml_parser.h"
#include "chat/markers.h"
#include "chat/py_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

namespace ds4::chat {
namespace {

using Rng = std::mt19937_64;

size_t pick(Rng& r, size_t n) { return static_cast<size_t>(r() % n); }

// Fragments chosen to collide with the markers the parser looks for.
const std::vector<std::string>& fragments() {
  static const std::vector<std::string> f = {
      "a", "Z", " ", "\n", "\n\n", "<", ">", "/", "\"", "=", "｜", "DSML", "｜DSML｜", "<｜",
      "</", "think", "<think>", "</thi", "tool_calls", "<｜DSML｜tool_call", "invoke", "name=\"",
      "string=\"true\">", "parameter", "é", "日本", "🚀", "\t", "{", "}", "[1]", "end",
      "<｜end▁of▁sentence", "▁", "\\", "&lt;"};
  return f;
}

std::string random_text(Rng& r, size_t max_frags) {
  std::string s;
  size_t n = pick(r, max_frags + 1);
  for (size_t i = 0; i < n; ++i) s += fragments()[pick(r, fragments().size())];
  return s;
}

bool contains(const std::string& s, std::string_view m) { return s.find(m) != std::string::npos; }

// Random text that cannot close the region it sits in.
std::string safe_text(Rng& r, size_t max_frags, std::initializer_list<std::string_view> banned) {
  for (;;) {
    std::string s = random_text(r, max_frags);
    bool ok = true;
    for (auto b : banned) ok = ok && !contains(s, b);
    if (ok) return s;
  }
}

Json random_json(Rng& r, int depth) {
  switch (pick(r, depth > 2 ? 5 : 7)) {
    case 0: return Json(static_cast<std::int64_t>(r() % 2001) - 1000);
    case 1: {  // two draws, sequenced so every compiler sees the same stream
      double mant = static_cast<double>(r() % 100000) - 50000;
      int exp2 = static_cast<int>(pick(r, 80)) - 40;
      return Json(std::ldexp(mant, exp2));
    }
    case 2: return Json(pick(r, 2) == 0);
    case 3: return Json(nullptr);
    case 4: return Json(random_text(r, 3));
    case 5: {
      Json a = Json::array();
      for (size_t i = pick(r, 4); i > 0; --i) a.push_back(random_json(r, depth + 1));
      return a;
    }
    default: {
      Json o = Json::object();
      for (size_t i = pick(r, 4); i > 0; --i) o[safe_text(r, 2, {})] = random_json(r, depth + 1);
      return o;
    }
  }
}

std::vector<DsmlCall> random_calls(Rng& r) {
  std::vector<DsmlCall> calls;
  size_t n = 1 + pick(r, 3);
  for (size_t i = 0; i < n; ++i) {
    DsmlCall c;
    std::string name;
    // Within the name limit used by feed_randomly (64 bytes).
    while (name.empty() || name.size() > 64) name = safe_text(r, 3, {"\">\n"});
    c.name = name;
    size_t np = pick(r, 4);
    for (size_t k = 0; k < np; ++k) {
      DsmlParam p;
      p.name = safe_text(r, 3, {"\" string=\"true\">", "\" string=\"false\">"});
      if (p.name.size() > 64) continue;
      bool dup = false;
      for (const auto& q : c.params) dup = dup || q.name == p.name;
      if (dup) continue;
      p.is_string = pick(r, 2) == 0;
      if (p.is_string) {
        p.value = safe_text(r, 8, {mark::kParamClose});
      } else {
        // The canonical encoder writes top-level strings with string="true" only.
        Json v = random_json(r, 0);
        while (v.is_string()) v = random_json(r, 0);
        p.value = py_json_dumps(v);
        if (contains(p.value, mark::kParamClose) || p.value.size() > 4096) continue;
      }
      c.params.push_back(std::move(p));
    }
    calls.push_back(std::move(c));
  }
  return calls;
}

struct Generated {
  std::string text;
  bool thinking;
  std::vector<DsmlCall> calls;
};

Generated well_formed(Rng& r) {
  Generated g;
  g.thinking = pick(r, 2) == 0;
  if (g.thinking) {
    g.text += safe_text(r, 10, {mark::kThinkClose, mark::kToolCallsLead, mark::kEos});
    g.text += mark::kThinkClose;
  }
  std::string content = safe_text(r, 10, {mark::kToolCallsLead, mark::kEos});
  g.text += content;
  if (pick(r, 3) != 0) {
    // Content must not end in a way that fuses with the lead into an earlier match.
    g.calls = random_calls(r);
    g.text += render_tool_calls_block(g.calls);
  }
  if (pick(r, 2) == 0) g.text += mark::kEos;
  return g;
}

std::string mutate(Rng& r, std::string s) {
  size_t n = 1 + pick(r, 4);
  for (size_t i = 0; i < n; ++i) {
    size_t at = s.empty() ? 0 : pick(r, s.size() + 1);
    switch (pick(r, 6)) {
      case 0:  // delete a range
        if (!s.empty() && at < s.size()) s.erase(at, 1 + pick(r, std::min<size_t>(16, s.size() - at)));
        break;
      case 1:  // insert a fragment or a marker
        s.insert(at, fragments()[pick(r, fragments().size())]);
        break;
      case 2:  // flip a byte
        if (at < s.size()) s[at] = static_cast<char>(r());
        break;
      case 3:  // truncate
        s.resize(at);
        break;
      case 4: {  // duplicate a chunk
        size_t len = pick(r, 40);
        if (at < s.size()) s.insert(at, s.substr(at, len));
        break;
      }
      default: {  // insert a real marker
        static const std::string_view marks[] = {mark::kThinkClose, mark::kToolCallsLead,
                                                 mark::kInvokeOpen, mark::kInvokeClose,
                                                 mark::kParamOpen, mark::kParamClose,
                                                 mark::kToolCallsClose, mark::kEos};
        s.insert(at, std::string(marks[pick(r, 8)]));
      }
    }
  }
  return s;
}

struct Outcome {
  std::string rebuilt;        // bytes rebuilt from completed events
  size_t errors = 0;
  bool event_after_error = false;
  std::vector<std::vector<DsmlCall>> blocks;
  bool blocks_canonical = true;
};

Outcome feed_randomly(Rng& r, const std::string& text, bool thinking) {
  DsmlParserLimits lim;
  lim.max_name_bytes = 64;
  lim.max_value_bytes = 4096;
  DsmlStreamParser p(thinking, lim);
  std::vector<DsmlEvent> ev;
  size_t pos = 0;
  size_t mode = pick(r, 3);
  while (pos < text.size()) {
    size_t len = mode == 0 ? 1 : mode == 1 ? 1 + pick(r, 8) : 1 + pick(r, 64);
    len = std::min(len, text.size() - pos);
    p.feed(std::string_view(text).substr(pos, len), ev);
    pos += len;
  }
  p.finish(ev);

  Outcome o;
  std::vector<DsmlCall> calls;
  DsmlCall cur;
  for (const DsmlEvent& e : ev) {
    if (o.errors) o.event_after_error = true;
    switch (e.kind) {
      case DsmlEventKind::Reasoning:
      case DsmlEventKind::Text: o.rebuilt += e.text; break;
      case DsmlEventKind::ReasoningEnd: o.rebuilt += mark::kThinkClose; break;
      case DsmlEventKind::Eos: o.rebuilt += mark::kEos; break;
      case DsmlEventKind::ToolCallsBegin: calls.clear(); break;
      case DsmlEventKind::ToolCallStart: cur = DsmlCall{e.name, {}}; break;
      case DsmlEventKind::Parameter: cur.params.push_back({e.name, e.is_string, e.text}); break;
      case DsmlEventKind::ToolCallEnd: calls.push_back(cur); break;
      case DsmlEventKind::ToolCallsEnd:
        o.rebuilt += e.text;
        if (render_tool_calls_block(calls) != e.text) o.blocks_canonical = false;
        o.blocks.push_back(calls);
        break;
      case DsmlEventKind::Error: ++o.errors; break;
    }
  }
  return o;
}

TEST(ChatDsmlFuzz, HundredThousandSplitAndMutatedInputs) {
  Rng r(0xD5D5C0DEULL);
  constexpr size_t kInputs = 120000;
  size_t accepted = 0, rejected = 0, with_calls = 0;
  for (size_t i = 0; i < kInputs; ++i) {
    Generated g = well_formed(r);
    bool mutated = pick(r, 10) < 7;
    std::string input = mutated ? mutate(r, g.text) : g.text;
    Outcome o = feed_randomly(r, input, g.thinking);

    ASSERT_LE(o.errors, 1u) << "input " << i;
    ASSERT_FALSE(o.event_after_error) << "input " << i;
    ASSERT_EQ(input.compare(0, o.rebuilt.size(), o.rebuilt), 0)
        << "input " << i << ": emitted bytes are not a prefix of the input";
    ASSERT_TRUE(o.blocks_canonical) << "input " << i << ": block differs from its re-rendering";
    if (o.errors == 0) {
      ++accepted;
      ASSERT_EQ(o.rebuilt, input) << "input " << i << ": accepted input not reproduced";
    } else {
      ++rejected;
    }
    if (!mutated) {
      ASSERT_EQ(o.errors, 0u) << "well-formed input " << i << " rejected: " << Json(input).dump();
      if (!g.calls.empty()) {
        ASSERT_EQ(o.blocks.size(), 1u);
        ASSERT_EQ(o.blocks[0], g.calls) << "input " << i;
        // JSON tool calls made from the parse re-render to the same canonical block.
        std::vector<ToolCall> json_calls;
        for (const DsmlCall& c : o.blocks[0]) json_calls.push_back(tool_call_from_dsml(c, "id"));
        ASSERT_EQ(render_tool_calls_block(json_calls), render_tool_calls_block(g.calls))
            << "input " << i;
        ++with_calls;
      }
    }
  }
  // Both outcomes must be well represented or the fuzzing is not exercising anything.
  EXPECT_GT(accepted, kInputs / 5);
  EXPECT_GT(rejected, kInputs / 5);
  EXPECT_GT(with_calls, kInputs / 10);
  std::printf("fuzzed %zu inputs: %zu accepted, %zu rejected, %zu well-formed with calls\n",
              kInputs, accepted, rejected, with_calls);
}

}  // namespace
}  // namespace ds4::chat
