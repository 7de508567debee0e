// OpenAI chat.completion / chat.completion.chunk and text_completion shapes.
#include "server/api_error.h"
#include "server/text_stream.h"
#include "server/writer_impl.h"

namespace ds4::server {

using nlohmann::json;

json token_json_bytes(const std::string& token) {
  json arr = json::array();
  for (unsigned char c : token) arr.push_back(static_cast<int>(c));
  return arr;
}

namespace {

const char* chat_finish(Finish f) {
  switch (f) {
    case Finish::Length: return "length";
    case Finish::ToolCalls: return "tool_calls";
    default: return "stop";
  }
}

json chat_logprobs(const std::vector<LogprobEntry>& lp) {
  json content = json::array();
  for (const auto& e : lp) {
    json top = json::array();
    for (const auto& [tok, l] : e.top) {
      top.push_back({{"token", repair_utf8(tok)}, {"logprob", l}, {"bytes", token_json_bytes(tok)}});
    }
    content.push_back({{"token", repair_utf8(e.token)}, {"logprob", e.logprob}, {"bytes", token_json_bytes(e.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

json openai_usage(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
}

// llama-server's names, so that clients written for it (and the web page) read them as is.
// Rates are tokens per second of wall time; 0 when nothing was evaluated.
json openai_timings(const Usage& u) {
  auto rate = [](int64_t n, double ms) { return n > 0 && ms > 0 ? static_cast<double>(n) * 1e3 / ms : 0.0; };
  return json{{"cache_n", u.cached_tokens},
              {"prompt_n", u.prefill_evaluated},
              {"prompt_ms", u.prefill_ms},
              {"prompt_per_second", rate(u.prefill_evaluated, u.prefill_ms)},
              {"predicted_n", u.completion_tokens},
              {"predicted_ms", u.generation_ms},
              {"predicted_per_second", rate(u.completion_tokens, u.generation_ms)}};
}

class ChatWriter final : public ApiWriter {
 public:
  using ApiWriter::ApiWriter;

  std::string begin() override { return chunk(json{{"role", "assistant"}, {"content", ""}}); }
  std::string keepalive() override {
    // Comment for SSE-aware clients, empty delta for those that drop comments.
    return ": keepalive\n\n" + chunk(json::object());
  }
  std::string stream_error(int status, const std::string& message) override {
    return sse(error_body(ApiKind::Chat, status, message)) + "data: [DONE]\n\n";
  }
  json final_body() override {
    json msg{{"role", "assistant"}, {"content", content_.empty() && !tools_.empty() ? json(nullptr) : json(content_)}};
    if (!reasoning_.empty()) msg["reasoning_content"] = reasoning_;
    if (!tools_.empty()) {
      json calls = json::array();
      for (const auto& t : tools_) {
        calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      }
      msg["tool_calls"] = std::move(calls);
    }
    json choice{{"index", 0}, {"message", std::move(msg)}, {"finish_reason", chat_finish(finish_)}};
    choice["logprobs"] = req_.top_logprobs >= 0 ? chat_logprobs(logprobs_) : json(nullptr);
    return json{{"id", id_},          {"object", "chat.completion"}, {"created", created_},
                {"model", req_.model}, {"choices", json::array({std::move(choice)})},
                {"usage", openai_usage(usage_)}, {"timings", openai_timings(usage_)}, {"system_fingerprint", "ds4"}};
  }

 protected:
  std::string on_reasoning(const std::string& text) override { return chunk(json{{"reasoning_content", text}}); }
  std::string on_text(const std::string& text, const std::vector<LogprobEntry>& lp) override {
    if (text.empty() && lp.empty()) return {};
    json extra;
    if (req_.top_logprobs >= 0 && !lp.empty()) extra = chat_logprobs(lp);
    return chunk(json{{"content", text}}, nullptr, extra);
  }
  std::string on_tool_start(const GenEvent& e) override {
    json tc{{"index", e.tool_index}, {"id", e.tool_id}, {"type", "function"},
            {"function", {{"name", e.tool_name}, {"arguments", ""}}}};
    return chunk(json{{"tool_calls", json::array({std::move(tc)})}});
  }
  std::string on_tool_args(const GenEvent& e) override {
    json tc{{"index", e.tool_index}, {"function", {{"arguments", e.text}}}};
    return chunk(json{{"tool_calls", json::array({std::move(tc)})}});
  }
  std::string on_tool_end(const GenEvent&) override { return {}; }
  std::string on_done(const GenEvent& e) override {
    if (e.finish == Finish::Cancelled) return {};
    std::string out = chunk(json::object(), chat_finish(finish_));
    if (req_.include_usage) {
      json u{{"id", id_},          {"object", "chat.completion.chunk"}, {"created", created_},
             {"model", req_.model}, {"choices", json::array()},          {"usage", openai_usage(usage_)},
             {"timings", openai_timings(usage_)}};
      out += sse(u);
    }
    return out + "data: [DONE]\n\n";
  }

 private:
  std::string chunk(json delta, const char* finish = nullptr, json logprobs = nullptr) {
    json choice{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}};
    choice["finish_reason"] = finish ? json(finish) : json(nullptr);
    return sse(json{{"id", id_},
                    {"object", "chat.completion.chunk"},
                    {"created", created_},
                    {"model", req_.model},
                    {"system_fingerprint", "ds4"},
                    {"choices", json::array({std::move(choice)})}});
  }
};

json completion_logprobs(const std::vector<LogprobEntry>& lp, size_t offset0) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = offset0;
  for (const auto& e : lp) {
    tokens.push_back(repair_utf8(e.token));
    lps.push_back(e.logprob);
    json t = json::object();
    for (const auto& [tok, l] : e.top) t[repair_utf8(tok)] = l;
    tops.push_back(std::move(t));
    offs.push_back(off);
    off += e.token.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

class CompletionsWriter final : public ApiWriter {
 public:
  using ApiWriter::ApiWriter;

  std::string begin() override { return {}; }
  std::string keepalive() override { return ": keepalive\n\n"; }
  std::string stream_error(int status, const std::string& message) override {
    return sse(error_body(ApiKind::Completions, status, message)) + "data: [DONE]\n\n";
  }
  json final_body() override {
    json choice{{"index", 0}, {"text", content_}, {"finish_reason", finish_ == Finish::Length ? "length" : "stop"}};
    choice["logprobs"] = req_.top_logprobs >= 0 ? completion_logprobs(logprobs_, 0) : json(nullptr);
    return json{{"id", id_},          {"object", "text_completion"}, {"created", created_},
                {"model", req_.model}, {"choices", json::array({std::move(choice)})},
                {"usage", openai_usage(usage_)}, {"timings", openai_timings(usage_)}, {"system_fingerprint", "ds4"}};
  }

 protected:
  std::string on_reasoning(const std::string&) override { return {}; }
  std::string on_text(const std::string& text, const std::vector<LogprobEntry>& lp) override {
    if (text.empty() && lp.empty()) return {};
    json lpj = nullptr;
    if (req_.top_logprobs >= 0 && !lp.empty()) lpj = completion_logprobs(lp, sent_);
    for (const auto& e : lp) sent_ += e.token.size();
    return chunk(text, nullptr, std::move(lpj));
  }
  std::string on_tool_start(const GenEvent&) override { return {}; }
  std::string on_tool_args(const GenEvent&) override { return {}; }
  std::string on_tool_end(const GenEvent&) override { return {}; }
  std::string on_done(const GenEvent& e) override {
    if (e.finish == Finish::Cancelled) return {};
    std::string out = chunk("", finish_ == Finish::Length ? "length" : "stop", nullptr);
    if (req_.include_usage) {
      out += sse(json{{"id", id_},          {"object", "text_completion"}, {"created", created_},
                      {"model", req_.model}, {"choices", json::array()},    {"usage", openai_usage(usage_)},
                      {"timings", openai_timings(usage_)}});
    }
    return out + "data: [DONE]\n\n";
  }

 private:
  std::string chunk(const std::string& text, const char* finish, json logprobs) {
    json choice{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)}};
    choice["finish_reason"] = finish ? json(finish) : json(nullptr);
    return sse(json{{"id", id_},
                    {"object", "text_completion"},
                    {"created", created_},
                    {"model", req_.model},
                    {"choices", json::array({std::move(choice)})}});
  }
  size_t sent_ = 0;
};

}  // namespace

std::unique_ptr<ApiWriter> make_chat_writer(const GenRequest& req, std::string id, int64_t created) {
  return std::unique_ptr<ApiWriter>(new ChatWriter(req, std::move(id), created));
}
std::unique_ptr<ApiWriter> make_completions_writer(const GenRequest& req, std::string id, int64_t created) {
  return std::unique_ptr<ApiWriter>(new CompletionsWriter(req, std::move(id), created));
}

}  // namespace ds4::server
