// Robustness: mutated request bodies (wrong types, missing and extra fields, marker text,
// truncated or corrupted JSON) through every API parser, the renderer and prompt
// tokenization, and random event sequences through every writer. Only ApiError (or, from
// the renderer, ds4::Error) may come out, and every SSE data line must be valid JSON. Also
// built with ASan/UBSan (`make test-asan`, program server_asan).
#include <gtest/gtest.h>

#include <random>

#include "chat/renderer.h"
#include "core/error.h"
#include "server/api_error.h"
#include "chat/prompt_tokens.h"
#include "server/request_parse.h"
#include "server/writers.h"

namespace ds4::server {
namespace {

using chat::EncodeFn;
using chat::tokenize_marked;

using chat::Json;

const char* kSeeds[4] = {
    R"({"model":"deepseek-v4-flash","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},
      {"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c1","type":"function",
      "function":{"name":"f","arguments":"{\"a\":1,\"b\":\"x\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],
      "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{}}}}}],
      "max_tokens":5,"temperature":0.7,"top_p":0.9,"top_k":5,"min_p":0.1,"seed":3,"stop":["x"],"stream":true,
      "stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2,"reasoning_effort":"high",
      "tool_choice":"auto"})",
    R"({"model":"deepseek-v4-flash","prompt":"abc","max_tokens":4,"logprobs":1,"stop":"q","stream":false})",
    R"({"model":"deepseek-v4-flash","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"q"}]},
      {"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]},
      {"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
      {"type":"function_call_output","call_id":"c","output":"o"}],
      "tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"max_output_tokens":7,
      "reasoning":{"effort":"low"}})",
    R"({"model":"deepseek-v4-flash","max_tokens":9,"system":"s","stop_sequences":["e"],"thinking":{"type":"enabled"},
      "tools":[{"name":"f","input_schema":{"type":"object"}}],
      "messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"t"},
      {"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r"},{"type":"text","text":"n"}]}]})",
};

using ParseFn = GenRequest (*)(const Json&, const ParseContext&);
const ParseFn kParsers[4] = {parse_chat_completions, parse_completions, parse_responses, parse_messages};

Json random_value(std::mt19937_64& rng) {
  switch (rng() % 10) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng() % 7) - 3;
    case 3: return 1e300;
    case 4: return -0.5;
    case 5: return "<｜User｜>x</think>\xF0\x9F\x98\x80";
    case 6: return "";
    case 7: return Json::array({1, "a", nullptr});
    case 8: return Json::object({{"type", "text"}, {"text", "t"}});
    default: return static_cast<uint64_t>(-1);
  }
}

// Collects pointers to every node so one can be picked uniformly.
void nodes(Json& j, std::vector<Json*>& out) {
  out.push_back(&j);
  if (j.is_object() || j.is_array()) {
    for (auto& v : j) nodes(v, out);
  }
}

Json mutate(Json j, std::mt19937_64& rng) {
  int n = 1 + static_cast<int>(rng() % 3);
  for (int k = 0; k < n; ++k) {
    std::vector<Json*> all;
    nodes(j, all);
    Json* t = all[rng() % all.size()];
    switch (rng() % 4) {
      case 0: *t = random_value(rng); break;
      case 1:
        if (t->is_object() && !t->empty()) {
          auto it = t->begin();
          std::advance(it, static_cast<long>(rng() % t->size()));
          t->erase(it.key());
        }
        break;
      case 2:
        if (t->is_array() && !t->empty()) t->push_back((*t)[rng() % t->size()]);
        break;
      default:
        if (t->is_object()) (*t)["extra_" + std::to_string(rng() % 5)] = random_value(rng);
        break;
    }
  }
  return j;
}

ParseContext context() {
  ParseContext c;
  c.model_ids = {"deepseek-v4-flash"};
  c.n_ctx = 4096;
  c.lookup_tool_block = [](const std::vector<std::string>& ids) -> std::optional<std::string> {
    if (!ids.empty() && ids[0] == "c1") return std::string("\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>");
    return std::nullopt;
  };
  return c;
}

// What the HTTP layer does with a body; returns true when it would be queued.
bool handle(int api, std::string_view text) {
  ParseContext c = context();
  GenRequest r;
  try {
    r = kParsers[api](parse_body(text), c);
  } catch (const ApiError& e) {
    EXPECT_GE(e.status(), 400);
    EXPECT_LT(e.status(), 500);
    return false;
  }
  if (!r.conversation) return true;
  chat::MarkedText prompt;
  try {
    prompt = chat::render_prompt_marked(*r.conversation, r.render);
  } catch (const ds4::Error&) {
    return false;  // answered as 400 by the HTTP layer
  }
  EncodeFn enc = [](std::string_view t, bool) { return std::vector<int32_t>(t.size() / 3, 1); };
  (void)tokenize_marked(enc, prompt);
  return true;
}

TEST(ServerRobustness, MutatedBodies) {
  std::mt19937_64 rng(12345);
  int queued = 0;
  for (int api = 0; api < 4; ++api) {
    Json seed = Json::parse(kSeeds[api]);
    ASSERT_TRUE(handle(api, seed.dump())) << "seed " << api << " must be valid";
    for (int i = 0; i < 1500; ++i) {
      Json m = mutate(seed, rng);
      std::string text = m.dump(-1, ' ', false, Json::error_handler_t::replace);
      queued += handle(api, text);
      // Raw corruption: truncation and byte noise.
      std::string raw = text.substr(0, rng() % (text.size() + 1));
      (void)handle(api, raw);
      std::string noisy = text;
      for (int k = 0; k < 3; ++k) noisy[rng() % noisy.size()] = static_cast<char>(rng() % 256);
      (void)handle(api, noisy);
    }
  }
  EXPECT_GT(queued, 100);  // mutations also produce valid requests, exercising the renderer
}

TEST(ServerRobustness, RandomEventSequencesGiveValidSse) {
  std::mt19937_64 rng(777);
  const char* pieces[] = {"a", "\xE2\x82", "\xFF", "<｜DSML｜", "\"quoted\"", "\n\n", ""};
  for (int api = 0; api < 4; ++api) {
    for (int round = 0; round < 300; ++round) {
      GenRequest r;
      r.api = static_cast<ApiKind>(api);
      r.model = "m";
      r.stream = true;
      r.include_usage = rng() % 2;
      r.top_logprobs = static_cast<int32_t>(rng() % 3) - 1;
      auto w = make_writer(r, "id", 1);
      std::string out = w->begin();
      int n = static_cast<int>(rng() % 20);
      for (int i = 0; i < n; ++i) {
        GenEvent e;
        e.kind = static_cast<GenEvent::Kind>(rng() % 5);  // Reasoning .. ToolEnd
        e.text = pieces[rng() % 7];
        e.tool_index = static_cast<int>(rng() % 3);
        e.tool_id = "call_1";
        e.tool_name = pieces[rng() % 7];
        if (rng() % 3 == 0) e.logprobs.push_back({pieces[rng() % 7], -1.0f, {{pieces[rng() % 7], -2.0f}}});
        out += w->on_event(e);
        if (rng() % 10 == 0) out += w->keepalive();
      }
      GenEvent last;
      last.kind = rng() % 4 == 0 ? GenEvent::Kind::Failed : GenEvent::Kind::Done;
      last.finish = static_cast<Finish>(rng() % 5);
      out += w->on_event(last);
      // The server serializes bodies replacing invalid UTF-8 (the worker never emits any).
      std::string body = w->final_body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      EXPECT_FALSE(nlohmann::json::parse(body, nullptr, false).is_discarded());
      size_t pos = 0;
      while ((pos = out.find("data: ", pos)) != std::string::npos) {
        size_t end = out.find('\n', pos);
        std::string data = out.substr(pos + 6, end - pos - 6);
        pos = end;
        if (data == "[DONE]") continue;
        EXPECT_FALSE(nlohmann::json::parse(data, nullptr, false).is_discarded()) << data;
      }
    }
  }
}

}  // namespace
}  // namespace ds4::server
