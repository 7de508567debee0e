#include "server/api_error.h"

#include <cstdio>

#include "core/error.h"

namespace ds4::server {

const char* api_name(ApiKind k) {
  switch (k) {
    case ApiKind::Chat: return "chat";
    case ApiKind::Completions: return "completions";
    case ApiKind::Responses: return "responses";
    case ApiKind::Messages: return "messages";
  }
  return "?";
}

namespace {

// A leading "a.b[3].c: " names the offending field.
std::string leading_path(const std::string& msg) {
  size_t colon = msg.find(": ");
  if (colon == std::string::npos || colon == 0 || colon > 200) return {};
  for (size_t i = 0; i < colon; ++i) {
    char c = msg[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '[' || c == ']';
    if (!ok) return {};
  }
  return msg.substr(0, colon);
}

const char* openai_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: case 503: return "server_overloaded";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

const char* anthropic_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

std::string client_message(const std::exception& e) {
  if (dynamic_cast<const ds4::Error*>(&e) || dynamic_cast<const ApiError*>(&e)) return e.what();
  // A library's exception (nlohmann, std): its text describes our internals, not the request.
  std::fprintf(stderr, "ds4-server: request rejected by an internal check: %s\n", e.what());
  return "request: a value could not be processed";
}

ApiError bad_request_from(const std::exception& e) {
  if (auto* api = dynamic_cast<const ApiError*>(&e)) return *api;
  std::string msg = client_message(e);
  return ApiError(400, msg, leading_path(msg));
}

nlohmann::json error_body(ApiKind api, int status, const std::string& message, const std::string& param,
                          const std::string& code) {
  using nlohmann::json;
  if (api == ApiKind::Messages) {
    return json{{"type", "error"}, {"error", {{"type", anthropic_type(status)}, {"message", message}}}};
  }
  json err{{"message", message}, {"type", openai_type(status)}};
  err["param"] = param.empty() ? json(nullptr) : json(param);
  err["code"] = code.empty() ? json(nullptr) : json(code);
  return json{{"error", err}};
}

nlohmann::json error_body(ApiKind api, const ApiError& e) {
  return error_body(api, e.status(), e.what(), e.param(), e.code());
}

}  // namespace ds4::server
