// Anthropic Messages API: the message object and its streamed events (message_start,
// content_block_start / delta / stop for thinking, text and tool_use, message_delta with
// usage, message_stop). Usage: input_tokens excludes cache reads, as Anthropic counts;
// message_start announces the whole prompt as input_tokens (the cached part is known only
// after prefill) and message_delta the final split.
#include "server/api_error.h"
#include "server/writer_impl.h"

namespace ds4::server {

using nlohmann::json;

namespace {

const char* stop_reason(Finish f) {
  switch (f) {
    case Finish::Length: return "max_tokens";
    case Finish::ToolCalls: return "tool_use";
    case Finish::StopSequence: return "stop_sequence";
    default: return "end_turn";
  }
}

class MessagesWriter final : public ApiWriter {
 public:
  using ApiWriter::ApiWriter;

  std::string begin() override {
    json msg{{"id", id_},
             {"type", "message"},
             {"role", "assistant"},
             {"model", req_.model},
             {"content", json::array()},
             {"stop_reason", nullptr},
             {"stop_sequence", nullptr},
             // The prompt's size is known before prefill; how much of it the live session
             // already holds is not, so message_delta carries the final split.
             {"usage", {{"input_tokens", req_.prompt_tokens}, {"output_tokens", 0}, {"cache_creation_input_tokens", 0},
                        {"cache_read_input_tokens", 0}}}};
    return event("message_start", {{"message", msg}});
  }
  std::string keepalive() override { return ": keepalive\n\n" + event("ping", json::object()); }
  std::string stream_error(int status, const std::string& message) override {
    return sse("error", error_body(ApiKind::Messages, status, message));
  }
  json final_body() override {
    json content = json::array();
    for (const auto& b : blocks_) {
      if (b.type == "tool_use" && !b.complete) continue;  // cut off by the token limit
      content.push_back(block_json(b, true));
    }
    return json{{"id", id_},
                {"type", "message"},
                {"role", "assistant"},
                {"model", req_.model},
                {"content", std::move(content)},
                {"stop_reason", stop_reason(finish_)},
                {"stop_sequence", finish_ == Finish::StopSequence ? json(stop_sequence_) : json(nullptr)},
                {"usage", usage_json()}};
  }

 protected:
  std::string on_reasoning(const std::string& text) override {
    std::string out = open("thinking");
    blocks_.back().text += text;
    return out + delta({{"type", "thinking_delta"}, {"thinking", text}});
  }
  std::string on_text(const std::string& text, const std::vector<LogprobEntry>&) override {
    if (text.empty()) return {};
    std::string out = open("text");
    blocks_.back().text += text;
    return out + delta({{"type", "text_delta"}, {"text", text}});
  }
  std::string on_tool_start(const GenEvent& e) override {
    std::string out = close();
    blocks_.push_back(Block{"tool_use", "", e.tool_id, e.tool_name});
    open_ = true;
    return out + event("content_block_start", {{"index", idx()}, {"content_block", block_json(blocks_.back(), false)}});
  }
  std::string on_tool_args(const GenEvent& e) override {
    if (!open_ || blocks_.back().type != "tool_use") return {};
    blocks_.back().text += e.text;
    return delta({{"type", "input_json_delta"}, {"partial_json", e.text}});
  }
  std::string on_tool_end(const GenEvent& e) override {
    if (!open_ || blocks_.back().type != "tool_use") return {};
    blocks_.back().text = e.text;
    blocks_.back().complete = true;
    return close();
  }
  std::string on_done(const GenEvent& e) override {
    if (e.finish == Finish::Cancelled) return {};
    std::string out = close();
    json d{{"stop_reason", stop_reason(finish_)},
           {"stop_sequence", finish_ == Finish::StopSequence ? json(stop_sequence_) : json(nullptr)}};
    out += event("message_delta", {{"delta", d}, {"usage", usage_json()}});
    return out + event("message_stop", json::object());
  }

 private:
  struct Block {
    std::string type, text, id, name;  // text: thinking / text / input JSON
    bool complete = false;
  };

  int idx() const { return static_cast<int>(blocks_.size()) - 1; }

  json usage_json() const {
    return json{{"input_tokens", usage_.prompt_tokens - usage_.cached_tokens},
                {"output_tokens", usage_.completion_tokens},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", usage_.cached_tokens}};
  }

  json block_json(const Block& b, bool final) const {
    if (b.type == "thinking") {
      return json{{"type", "thinking"}, {"thinking", final ? b.text : ""}, {"signature", ""}};
    }
    if (b.type == "text") return json{{"type", "text"}, {"text", final ? b.text : ""}};
    json input = json::object();
    if (final) {
      json parsed = json::parse(b.text, nullptr, false);
      if (!parsed.is_discarded() && parsed.is_object()) input = std::move(parsed);
    }
    return json{{"type", "tool_use"}, {"id", b.id}, {"name", b.name}, {"input", std::move(input)}};
  }

  std::string open(const char* type) {
    if (open_ && blocks_.back().type == type) return {};
    std::string out = close();
    blocks_.push_back(Block{type, "", "", ""});
    open_ = true;
    return out + event("content_block_start", {{"index", idx()}, {"content_block", block_json(blocks_.back(), false)}});
  }
  std::string close() {
    if (!open_) return {};
    open_ = false;
    if (blocks_.back().type == "tool_use" && !blocks_.back().complete) {
      // Cut off by the token limit. The block was announced, so it must be closed.
      return event("content_block_stop", {{"index", idx()}});
    }
    return event("content_block_stop", {{"index", idx()}});
  }
  std::string delta(json d) { return event("content_block_delta", {{"index", idx()}, {"delta", std::move(d)}}); }
  std::string event(const char* type, json data) {
    data["type"] = type;
    return sse(type, data);
  }

  std::vector<Block> blocks_;
  bool open_ = false;
};

}  // namespace

std::unique_ptr<ApiWriter> make_messages_writer(const GenRequest& req, std::string id, int64_t created) {
  return std::unique_ptr<ApiWriter>(new MessagesWriter(req, std::move(id), created));
}

}  // namespace ds4::server
