// Shared writer plumbing and the factory; the per-API writers live in writer_*.cpp.
#include "server/writers.h"

#include <random>

#include "server/text_stream.h"
#include "server/writer_impl.h"

namespace ds4::server {

ApiWriter::ApiWriter(const GenRequest& req, std::string id, int64_t created)
    : req_(req), id_(std::move(id)), created_(created) {}

std::string ApiWriter::dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ApiWriter::sse(const nlohmann::json& data) { return "data: " + dump(data) + "\n\n"; }

std::string ApiWriter::sse(const std::string& event, const nlohmann::json& data) {
  return "event: " + event + "\ndata: " + dump(data) + "\n\n";
}

std::string ApiWriter::on_event(const GenEvent& e) {
  using K = GenEvent::Kind;
  switch (e.kind) {
    case K::Reasoning:
      reasoning_ += e.text;
      return on_reasoning(e.text);
    case K::Text:
      content_ += e.text;
      logprobs_.insert(logprobs_.end(), e.logprobs.begin(), e.logprobs.end());
      return on_text(e.text, e.logprobs);
    case K::ToolStart:
      tools_.push_back({e.tool_id, e.tool_name, "", false});
      return on_tool_start(e);
    case K::ToolArgs:
      if (!tools_.empty()) tools_.back().arguments += e.text;
      return on_tool_args(e);
    case K::ToolEnd:
      if (!tools_.empty()) {
        tools_.back().arguments = e.text;
        tools_.back().complete = true;
      }
      return on_tool_end(e);
    case K::Done:
      usage_ = e.usage;
      finish_ = e.finish;
      stop_sequence_ = e.stop_sequence;
      // A tool call cut off by the token limit is not a call.
      while (!tools_.empty() && !tools_.back().complete) tools_.pop_back();
      return on_done(e);
    case K::Failed:
      return stream_error(e.status, e.text);
  }
  return {};
}

std::string new_response_id(ApiKind api) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s;
  switch (api) {
    case ApiKind::Chat: s = "chatcmpl-"; break;
    case ApiKind::Completions: s = "cmpl-"; break;
    case ApiKind::Responses: s = "resp_"; break;
    case ApiKind::Messages: s = "msg_"; break;
  }
  for (int i = 0; i < 24; ++i) s += alphabet[rng() % 36];
  return s;
}

std::unique_ptr<ApiWriter> make_writer(const GenRequest& req, std::string id, int64_t created) {
  switch (req.api) {
    case ApiKind::Chat: return make_chat_writer(req, std::move(id), created);
    case ApiKind::Completions: return make_completions_writer(req, std::move(id), created);
    case ApiKind::Responses: return make_responses_writer(req, std::move(id), created);
    case ApiKind::Messages: return make_messages_writer(req, std::move(id), created);
  }
  return nullptr;
}

}  // namespace ds4::server
