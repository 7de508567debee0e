#include "server/request_common.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "chat/json_limits.h"
#include "chat/markers.h"

namespace ds4::server {

using chat::Json;

chat::Json parse_body(std::string_view body) {
  if (size_t at = chat::json_depth_violation(body); at != std::string_view::npos) {
    throw ApiError(400, fmt::format("request: JSON nested deeper than {} levels (byte {})", chat::kMaxJsonDepth, at + 1),
                   "request");
  }
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

chat::ThinkingMode effort_mode(const std::string& effort, const std::string& field_name) {
  if (effort == "none") return chat::ThinkingMode::None;
  if (effort == "max") return chat::ThinkingMode::Max;
  if (effort == "minimal" || effort == "low" || effort == "medium" || effort == "high" || effort == "xhigh") {
    return chat::ThinkingMode::High;
  }
  bad(field_name, fmt::format("unknown effort '{}' (none, minimal, low, medium, high, xhigh, max)", effort));
}

}  // namespace

void parse_thinking(const Json& body, const ParseContext& ctx, const std::string& model, GenRequest& r) {
  chat::ThinkingMode mode = chat::ThinkingMode::High;  // ds4 defaults to thinking
  if (model == "deepseek-chat") mode = chat::ThinkingMode::None;
  if (model == "deepseek-reasoner") mode = chat::ThinkingMode::High;
  if (auto e = opt_string(body, "reasoning_effort")) mode = effort_mode(*e, "reasoning_effort");
  if (const Json* reasoning = field(body, "reasoning")) {
    if (!reasoning->is_object()) bad("reasoning", fmt::format("expected an object, got {}", type_name(*reasoning)));
    const Json* e = field(*reasoning, "effort");
    if (e) {
      if (!e->is_string()) bad("reasoning.effort", fmt::format("expected a string, got {}", type_name(*e)));
      mode = effort_mode(e->get<std::string>(), "reasoning.effort");
    }
  }
  if (const Json* t = field(body, "thinking")) {
    if (!t->is_object()) bad("thinking", fmt::format("expected an object, got {}", type_name(*t)));
    auto type = opt_string(*t, "type");
    if (!type) bad("thinking.type", "missing");
    if (*type == "disabled") {
      mode = chat::ThinkingMode::None;
    } else if (*type == "enabled" || *type == "adaptive") {
      if (mode == chat::ThinkingMode::None) mode = chat::ThinkingMode::High;
    } else {
      bad("thinking.type", fmt::format("unknown value '{}' (enabled, disabled)", *type));
    }
  }
  if (auto think = opt_bool(body, "think")) {
    if (!*think) mode = chat::ThinkingMode::None;
    else if (mode == chat::ThinkingMode::None) mode = chat::ThinkingMode::High;
  }
  r.render.thinking = mode;
  r.render.context_size = static_cast<uint64_t>(ctx.n_ctx);
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
