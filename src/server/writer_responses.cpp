// OpenAI Responses API: the response object and its streamed event lifecycle
// (response.created → output items with their deltas → response.completed / incomplete / failed).
#include "server/api_error.h"
#include "server/text_stream.h"
#include "server/writer_impl.h"

#include <random>

namespace ds4::server {

using nlohmann::json;

namespace {

std::string item_id(const char* prefix) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += alphabet[rng() % 36];
  return s;
}

class ResponsesWriter final : public ApiWriter {
 public:
  using ApiWriter::ApiWriter;

  std::string begin() override {
    json r = response("in_progress");
    std::string out = event("response.created", json{{"response", r}});  // sequence numbers in order
    return out + event("response.in_progress", json{{"response", r}});
  }
  std::string keepalive() override { return ": keepalive\n\n"; }
  std::string stream_error(int status, const std::string& message) override {
    std::string out = close_open();
    json r = response("failed");
    r["error"] = {{"code", status >= 500 ? "server_error" : "invalid_request"}, {"message", message}};
    return out + event("response.failed", json{{"response", r}});
  }
  json final_body() override {
    close_open();
    return response(status());
  }

 protected:
  std::string on_reasoning(const std::string& text) override {
    std::string out;
    if (open_ != Open::Reasoning) {
      out += close_open();
      Item it{"reasoning", item_id("rs_"), "", "", "", false};
      items_.push_back(it);
      open_ = Open::Reasoning;
      out += event("response.output_item.added", {{"output_index", idx()}, {"item", item_json(items_.back(), "in_progress")}});
      out += event("response.content_part.added", {{"item_id", items_.back().id}, {"output_index", idx()},
                                                   {"content_index", 0}, {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
    }
    items_.back().text += text;
    out += event("response.reasoning_text.delta",
                 {{"item_id", items_.back().id}, {"output_index", idx()}, {"content_index", 0}, {"delta", text}});
    return out;
  }
  std::string on_text(const std::string& text, const std::vector<LogprobEntry>&) override {
    if (text.empty()) return {};
    std::string out;
    if (open_ != Open::Message) {
      out += close_open();
      items_.push_back(Item{"message", item_id("msg_"), "", "", "", false});
      open_ = Open::Message;
      out += event("response.output_item.added", {{"output_index", idx()}, {"item", item_json(items_.back(), "in_progress")}});
      out += event("response.content_part.added",
                   {{"item_id", items_.back().id}, {"output_index", idx()}, {"content_index", 0},
                    {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
    }
    items_.back().text += text;
    out += event("response.output_text.delta", {{"item_id", items_.back().id}, {"output_index", idx()},
                                                {"content_index", 0}, {"delta", text}, {"logprobs", json::array()}});
    return out;
  }
  std::string on_tool_start(const GenEvent& e) override {
    std::string out = close_open();
    Item it{"function_call", item_id("fc_"), "", "", "", false};
    it.call_id = e.tool_id;
    it.name = e.tool_name;
    items_.push_back(it);
    open_ = Open::Call;
    out += event("response.output_item.added", {{"output_index", idx()}, {"item", item_json(items_.back(), "in_progress")}});
    return out;
  }
  std::string on_tool_args(const GenEvent& e) override {
    if (open_ != Open::Call) return {};
    items_.back().text += e.text;
    return event("response.function_call_arguments.delta",
                 {{"item_id", items_.back().id}, {"output_index", idx()}, {"delta", e.text}});
  }
  std::string on_tool_end(const GenEvent& e) override {
    if (open_ != Open::Call) return {};
    items_.back().text = e.text;
    items_.back().complete = true;
    return close_open();
  }
  std::string on_done(const GenEvent& e) override {
    if (e.finish == Finish::Cancelled) return {};
    std::string out = close_open();
    // An unfinished call (token limit) is dropped from the final output.
    std::string st = status();
    json r = response(st);
    const char* name = st == "completed" ? "response.completed" : "response.incomplete";
    return out + event(name, json{{"response", r}});
  }

 private:
  enum class Open { None, Reasoning, Message, Call };
  struct Item {
    std::string type, id;
    std::string text;  // reasoning / output text / arguments
    std::string call_id, name;
    bool complete = false;
  };

  int idx() const { return static_cast<int>(items_.size()) - 1; }
  std::string status() const { return finish_ == Finish::Length ? "incomplete" : "completed"; }

  json item_json(const Item& it, const char* status) const {
    if (it.type == "reasoning") {
      json content = json::array();
      if (std::string(status) != "in_progress") content.push_back({{"type", "reasoning_text"}, {"text", it.text}});
      return json{{"type", "reasoning"}, {"id", it.id}, {"summary", json::array()}, {"content", content}};
    }
    if (it.type == "message") {
      json content = json::array();
      if (std::string(status) != "in_progress") {
        content.push_back({{"type", "output_text"}, {"text", it.text}, {"annotations", json::array()}, {"logprobs", json::array()}});
      }
      return json{{"type", "message"}, {"id", it.id}, {"status", status}, {"role", "assistant"}, {"content", content}};
    }
    return json{{"type", "function_call"}, {"id", it.id}, {"call_id", it.call_id}, {"name", it.name},
                {"arguments", std::string(status) == "in_progress" ? std::string() : it.text}, {"status", status}};
  }

  std::string close_open() {
    std::string out;
    if (open_ == Open::None) return out;
    Item& it = items_.back();
    if (open_ == Open::Reasoning) {
      out += event("response.reasoning_text.done", {{"item_id", it.id}, {"output_index", idx()}, {"content_index", 0}, {"text", it.text}});
      out += event("response.content_part.done", {{"item_id", it.id}, {"output_index", idx()}, {"content_index", 0},
                                                  {"part", {{"type", "reasoning_text"}, {"text", it.text}}}});
    } else if (open_ == Open::Message) {
      out += event("response.output_text.done", {{"item_id", it.id}, {"output_index", idx()}, {"content_index", 0},
                                                 {"text", it.text}, {"logprobs", json::array()}});
      out += event("response.content_part.done",
                   {{"item_id", it.id}, {"output_index", idx()}, {"content_index", 0},
                    {"part", {{"type", "output_text"}, {"text", it.text}, {"annotations", json::array()}}}});
    } else if (open_ == Open::Call) {
      if (!it.complete) {  // cut off by the token limit: not a call
        items_.pop_back();
        open_ = Open::None;
        return out;
      }
      out += event("response.function_call_arguments.done",
                   {{"item_id", it.id}, {"output_index", idx()}, {"name", it.name}, {"arguments", it.text}});
    }
    out += event("response.output_item.done", {{"output_index", idx()}, {"item", item_json(it, "completed")}});
    open_ = Open::None;
    return out;
  }

  json response(const std::string& status) const {
    json output = json::array();
    for (const auto& it : items_) output.push_back(item_json(it, "completed"));
    json r{{"id", id_},
           {"object", "response"},
           {"created_at", created_},
           {"status", status},
           {"model", req_.model},
           {"output", std::move(output)},
           {"parallel_tool_calls", true},
           {"tool_choice", "auto"},
           {"tools", json::array()},
           {"error", nullptr},
           {"incomplete_details", nullptr}};
    if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (status != "in_progress") {
      r["usage"] = {{"input_tokens", usage_.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", usage_.cached_tokens}}},
                    {"output_tokens", usage_.completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", usage_.reasoning_tokens}}},
                    {"total_tokens", usage_.prompt_tokens + usage_.completion_tokens}};
    } else {
      r["usage"] = nullptr;
    }
    std::string text;
    for (const auto& it : items_) {
      if (it.type == "message") text += it.text;
    }
    r["output_text"] = text;
    return r;
  }

  std::string event(const char* type, json data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return sse(type, data);
  }

  std::vector<Item> items_;
  Open open_ = Open::None;
  int64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<ApiWriter> make_responses_writer(const GenRequest& req, std::string id, int64_t created) {
  return std::unique_ptr<ApiWriter>(new ResponsesWriter(req, std::move(id), created));
}

}  // namespace ds4::server
