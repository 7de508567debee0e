#pragma once
// An HTTP-level failure with its status, and the JSON error bodies of the two API families:
//   OpenAI:    {"error": {"message", "type", "param", "code"}}
//   Anthropic: {"type": "error", "error": {"type", "message"}}
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

#include "server/gen_types.h"

namespace ds4::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_;
  std::string code_;
};

// 400 from a ds4::Error whose message starts with a JSON path ("messages[2].role: ..."):
// the path becomes the error's `param`.
ApiError bad_request_from(const std::exception& e);
// The text of `e` when it is one of ours (ds4::Error, ApiError), which name the field;
// a fixed message for anything else (library texts are logged to stderr, not sent).
std::string client_message(const std::exception& e);

// Error body for `api` (Messages → Anthropic shape, everything else → OpenAI shape).
nlohmann::json error_body(ApiKind api, int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});
nlohmann::json error_body(ApiKind api, const ApiError& e);

}  // namespace ds4::server
