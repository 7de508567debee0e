#pragma once
// GenEvents → each API's response: the streamed SSE events and the non-streamed JSON body.
// A writer sees every event of one job in order. on_event() returns the SSE text to send
// for it (ignored when not streaming); final_body() is the complete non-streamed response.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/gen_types.h"

namespace ds4::server {

struct ToolCallOut {
  std::string id, name, arguments;
  bool complete = false;
};

class ApiWriter {
 public:
  ApiWriter(const GenRequest& req, std::string id, int64_t created);
  virtual ~ApiWriter() = default;
  virtual std::string begin() = 0;  // SSE text before any event
  virtual std::string on_event(const GenEvent& e);
  // Sent while nothing else happens (long queue waits and prefills): an SSE comment, plus an
  // event that clients ignoring comments still see without effect.
  virtual std::string keepalive() = 0;
  // SSE text for a failure after streaming began.
  virtual std::string stream_error(int status, const std::string& message) = 0;
  virtual nlohmann::json final_body() = 0;

 protected:
  virtual std::string on_reasoning(const std::string& text) = 0;
  virtual std::string on_text(const std::string& text, const std::vector<LogprobEntry>& lp) = 0;
  virtual std::string on_tool_start(const GenEvent& e) = 0;
  virtual std::string on_tool_args(const GenEvent& e) = 0;
  virtual std::string on_tool_end(const GenEvent& e) = 0;
  virtual std::string on_done(const GenEvent& e) = 0;

  static std::string sse(const nlohmann::json& data);                          // "data: ...\n\n"
  static std::string sse(const std::string& event, const nlohmann::json& data); // with "event:"
  static std::string dump(const nlohmann::json& j);

  const GenRequest& req_;
  std::string id_;
  int64_t created_;
  std::string content_, reasoning_;
  std::vector<ToolCallOut> tools_;
  std::vector<LogprobEntry> logprobs_;
  Usage usage_;
  Finish finish_ = Finish::Stop;
  std::string stop_sequence_;
};

// `id` and `created` are fixed by the caller (tests pass constants).
std::unique_ptr<ApiWriter> make_writer(const GenRequest& req, std::string id, int64_t created);
// A fresh response id in the API's style (chatcmpl-…, cmpl-…, resp_…, msg_…).
std::string new_response_id(ApiKind api);

}  // namespace ds4::server
