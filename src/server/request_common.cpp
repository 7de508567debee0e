#include "server/request_common.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "chat/json_limits.h"
#include "chat/markers.h"

namespace ds4::server {

using chat::Json;

chat::Json parse_body(std::string_view body) {
  if (auto e = chat::json_limit_error(body)) throw ApiError(400, "request: " + *e, "request");
  try {
    return Json::parse(body);
  } catch (const Json::parse_error& e) {
    throw ApiError(400, fmt::format("request: not valid JSON (byte {})", e.byte), "request");
  } catch (const Json::exception&) {
    // out_of_range 406 ("1e400"): the library's text is not an API message.
    throw ApiError(400, "request: not valid JSON (a number is out of range)", "request");
  }
}

namespace detail {

void bad(const std::string& field, const std::string& what) {
  throw ApiError(400, fmt::format("{}: {}", field, what), field);
}

const Json* field(const Json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> opt_string(const Json& obj, const char* name) {
  const Json* f = field(obj, name);
  if (!f) return std::nullopt;
  if (!f->is_string()) bad(name, fmt::format("expected a string, got {}", type_name(*f)));
  return f->get<std::string>();
}

std::optional<bool> opt_bool(const Json& obj, const char* name) {
  const Json* f = field(obj, name);
  if (!f) return std::nullopt;
  if (!f->is_boolean()) bad(name, fmt::format("expected a boolean, got {}", type_name(*f)));
  return f->get<bool>();
}

std::optional<double> opt_number(const Json& obj, const char* name, double lo, double hi) {
  const Json* f = field(obj, name);
  if (!f) return std::nullopt;
  if (!f->is_number()) bad(name, fmt::format("expected a number, got {}", type_name(*f)));
  double v = f->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) bad(name, fmt::format("{} is outside [{}, {}]", v, lo, hi));
  return v;
}

std::optional<int64_t> opt_int(const Json& obj, const char* name, int64_t lo, int64_t hi) {
  const Json* f = field(obj, name);
  if (!f) return std::nullopt;
  bool integral = f->is_number_integer() || f->is_number_unsigned() ||
                  (f->is_number_float() && std::floor(f->get<double>()) == f->get<double>());
  if (!integral) bad(name, fmt::format("expected an integer, got {}", type_name(*f)));
  double d = f->get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    bad(name, fmt::format("{} is outside [{}, {}]", f->dump(), lo, hi));
  }
  if (f->is_number_unsigned()) return static_cast<int64_t>(f->get<uint64_t>());
  if (f->is_number_integer()) return f->get<int64_t>();
  return static_cast<int64_t>(d);
}

void require_object(const Json& body) {
  if (!body.is_object()) bad("request", fmt::format("expected a JSON object, got {}", type_name(body)));
}

std::string check_model(const Json& body, const ParseContext& ctx) {
  auto m = opt_string(body, "model");
  if (!m || m->empty()) return ctx.model_ids.empty() ? std::string() : ctx.model_ids.front();
  for (const auto& id : ctx.model_ids) {
    if (*m == id) return *m;
  }
  throw ApiError(404, fmt::format("model '{}' not found (this server has: {})", *m, fmt::join(ctx.model_ids, ", ")),
                 "model", "model_not_found");
}

void parse_sampling(const Json& body, GenRequest& r) {
  if (auto t = opt_number(body, "temperature", 0.0, 2.0)) r.sampling.temperature = static_cast<float>(*t);
  if (auto p = opt_number(body, "top_p", 0.0, 1.0)) r.sampling.top_p = static_cast<float>(*p);
  if (auto k = opt_int(body, "top_k", -1, 1 << 30)) r.sampling.top_k = static_cast<int32_t>(*k);
  if (auto p = opt_number(body, "min_p", 0.0, 1.0)) r.sampling.min_p = static_cast<float>(*p);
  if (const Json* s = field(body, "seed")) {
    if (s->is_number_unsigned()) {
      r.sampling.seed = s->get<uint64_t>();
    } else if (s->is_number_integer()) {
      r.sampling.seed = static_cast<uint64_t>(s->get<int64_t>());
    } else {
      bad("seed", fmt::format("expected an integer, got {}", type_name(*s)));
    }
  } else {
    r.sampling.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  }
}

std::vector<std::string> parse_stop(const Json& body, const char* name) {
  std::vector<std::string> out;
  const Json* f = field(body, name);
  if (!f) return out;
  if (f->is_string()) {
    if (!f->get_ref<const std::string&>().empty()) out.push_back(f->get<std::string>());
    return out;
  }
  if (!f->is_array()) bad(name, fmt::format("expected a string or an array of strings, got {}", type_name(*f)));
  if (f->size() > 16) bad(name, fmt::format("at most 16 stop sequences, got {}", f->size()));
  for (size_t i = 0; i < f->size(); ++i) {
    const Json& s = (*f)[i];
    if (!s.is_string()) bad(fmt::format("{}[{}]", name, i), fmt::format("expected a string, got {}", type_name(s)));
    if (!s.get_ref<const std::string&>().empty()) out.push_back(s.get<std::string>());
  }
  return out;
}

namespace {

// Effort names of the OpenAI, Responses and Anthropic APIs, mapped as DeepSeek's API maps them
// onto V4's two levels: "max" (and DeepSeek's "ultra") → Think-Max, "none" → off, anything
// else → high. nullopt: the field was null (no change).
std::optional<chat::ThinkingMode> effort_of(const Json& obj, const char* name, const std::string& path,
                                            bool allow_none) {
  const Json* e = field(obj, name);
  if (!e) return std::nullopt;
  if (!e->is_string()) bad(path, fmt::format("expected a string, got {}", type_name(*e)));
  const std::string& v = e->get_ref<const std::string&>();
  if (v == "max" || v == "ultra") return chat::ThinkingMode::Max;
  if (allow_none && v == "none") return chat::ThinkingMode::None;
  if (v == "minimal" || v == "low" || v == "medium" || v == "high" || v == "xhigh") return chat::ThinkingMode::High;
  bad(path, fmt::format("unknown effort '{}' ({}minimal, low, medium, high, xhigh, max)", v, allow_none ? "none, " : ""));
}

// `thinking` of DeepSeek's OpenAI format and of Anthropic's: {"type": "enabled" | "disabled"},
// Anthropic also "adaptive" and budget_tokens. nullopt when absent or null.
std::optional<bool> thinking_switch(const Json& body, bool anthropic) {
  const Json* t = field(body, "thinking");
  if (!t) return std::nullopt;
  if (!t->is_object()) bad("thinking", fmt::format("expected an object, got {}", type_name(*t)));
  auto type = opt_string(*t, "type");
  if (!type) bad("thinking.type", "missing");
  if (anthropic) {
    if (const Json* b = field(*t, "budget_tokens"); b && !b->is_number_integer() && !b->is_number_unsigned()) {
      bad("thinking.budget_tokens", fmt::format("expected an integer, got {}", type_name(*b)));
    }
  }
  if (*type == "disabled") return false;
  if (*type == "enabled" || *type == "adaptive") return true;
  bad("thinking.type", fmt::format("unknown value '{}' (enabled, adaptive, disabled)", *type));
}

}  // namespace

void parse_thinking(const Json& body, const ParseContext& ctx, const std::string& model, GenRequest& r) {
  // Each API reads its own controls. `enabled` is the on/off switch, `effort` the level; as in
  // DeepSeek's API an effort of "none" turns thinking off and "max" asks for Think-Max.
  std::optional<bool> enabled;
  std::optional<chat::ThinkingMode> effort;
  bool default_on = true;
  switch (r.api) {
    case ApiKind::Chat:
      // DeepSeek's OpenAI format: thinking {type}, reasoning_effort; also the OpenRouter-style
      // reasoning {effort} and Ollama's think: bool that OpenAI-compatible clients send.
      enabled = thinking_switch(body, false);
      if (auto t = opt_bool(body, "think")) enabled = *t;
      // vLLM / llama-server clients of Qwen switch thinking with chat_template_kwargs.
      if (const Json* k = field(body, "chat_template_kwargs")) {
        if (!k->is_object()) bad("chat_template_kwargs", fmt::format("expected an object, got {}", type_name(*k)));
        if (auto t = opt_bool(*k, "enable_thinking")) enabled = *t;
        // Qwen3.6's template keeps every turn's reasoning with preserve_thinking (ChatML only).
        if (auto t = opt_bool(*k, "preserve_thinking")) r.render.preserve_thinking = *t;
      }
      if (const Json* rs = field(body, "reasoning")) {
        if (!rs->is_object()) bad("reasoning", fmt::format("expected an object, got {}", type_name(*rs)));
        effort = effort_of(*rs, "effort", "reasoning.effort", true);
      }
      if (auto e = effort_of(body, "reasoning_effort", "reasoning_effort", true)) effort = e;
      break;
    case ApiKind::Responses:
      // reasoning {effort, summary}; "none" turns it off.
      if (const Json* rs = field(body, "reasoning")) {
        if (!rs->is_object()) bad("reasoning", fmt::format("expected an object, got {}", type_name(*rs)));
        effort = effort_of(*rs, "effort", "reasoning.effort", true);
      }
      break;
    case ApiKind::Messages:
      // Anthropic: no thinking unless the request asks for it (thinking {type: enabled |
      // adaptive}); output_config {effort} sets the level.
      default_on = false;
      enabled = thinking_switch(body, true);
      if (const Json* oc = field(body, "output_config")) {
        if (!oc->is_object()) bad("output_config", fmt::format("expected an object, got {}", type_name(*oc)));
        effort = effort_of(*oc, "effort", "output_config.effort", false);
      }
      break;
    case ApiKind::Completions: break;
  }
  // Model aliases decide only when the request has no switch of its own (as ds4).
  if (!enabled && model == "deepseek-chat") enabled = false;
  if (!enabled && model == "deepseek-reasoner") enabled = true;
  bool on = enabled.value_or(default_on);
  chat::ThinkingMode mode = chat::ThinkingMode::High;
  if (effort) mode = *effort;
  if (!on) mode = chat::ThinkingMode::None;
  if (effort == chat::ThinkingMode::None) mode = chat::ThinkingMode::None;
  r.render.thinking = mode;
  r.render.context_size = static_cast<uint64_t>(ctx.n_ctx);
  r.render.format = ctx.chat_format;
  r.render.chatml_template = ctx.chatml_template;
}

void fold_late_system_turns(chat::Conversation& conv) {
  auto& ms = conv.messages;
  auto plain_system = [](const chat::Message& m) {
    return m.role == chat::Role::System && m.tools.empty() && !m.response_format;
  };
  for (size_t i = 1; i < ms.size();) {
    if (!plain_system(ms[i])) {
      ++i;
      continue;
    }
    // Only where the encoder would leave the assistant without its transition: the run of
    // system turns ends the conversation or is followed by the assistant (or a reminder).
    // Before a user turn the encoder's bytes are already right (that turn opens with its marker).
    size_t k = i;
    while (k < ms.size() && plain_system(ms[k])) ++k;
    bool needs_transition = k == ms.size() || ms[k].role == chat::Role::Assistant ||
                            ms[k].role == chat::Role::LatestReminder;
    chat::Message& prev = ms[i - 1];
    if (needs_transition && prev.role == chat::Role::User && prev.task == chat::Task::None) {
      prev.content = prev.content.value_or("") + ms[i].content.value_or("");
      ms.erase(ms.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (needs_transition && prev.role == chat::Role::Tool) {
      ms[i].role = chat::Role::User;
      if (!ms[i].content) ms[i].content = "";
    }
    ++i;
  }
}

void attach_tool_blocks(chat::Conversation& conv, const ParseContext& ctx) {
  if (!ctx.lookup_tool_block) return;
  for (auto& m : conv.messages) {
    if (m.role != chat::Role::Assistant || m.tool_calls.empty()) continue;
    std::vector<std::string> ids;
    for (const auto& tc : m.tool_calls) ids.push_back(tc.id);
    if (auto block = ctx.lookup_tool_block(ids)) m.raw_tool_block = std::move(*block);
  }
}

bool tool_choice_allows_tools(const Json& body) {
  const Json* tc = field(body, "tool_choice");
  if (!tc) return true;
  if (tc->is_string()) {
    const auto& s = tc->get_ref<const std::string&>();
    if (s == "none") return false;
    if (s == "auto" || s == "required" || s == "any") return true;
    bad("tool_choice", fmt::format("unknown value '{}' (auto, none, required)", s));
  }
  if (tc->is_object()) {
    auto type = opt_string(*tc, "type");
    return !(type && *type == "none");
  }
  bad("tool_choice", fmt::format("expected a string or an object, got {}", type_name(*tc)));
}

}  // namespace detail

}  // namespace ds4::server
