#pragma once
// Internal: per-API writer factories (writer_openai.cpp, writer_responses.cpp,
// writer_anthropic.cpp) and helpers they share.
#include <memory>
#include <string>
#include <vector>

#include "server/writers.h"

namespace ds4::server {

std::unique_ptr<ApiWriter> make_chat_writer(const GenRequest& req, std::string id, int64_t created);
std::unique_ptr<ApiWriter> make_completions_writer(const GenRequest& req, std::string id, int64_t created);
std::unique_ptr<ApiWriter> make_responses_writer(const GenRequest& req, std::string id, int64_t created);
std::unique_ptr<ApiWriter> make_messages_writer(const GenRequest& req, std::string id, int64_t created);

// A token's bytes as a JSON-safe string and as the OpenAI "bytes" array.
nlohmann::json token_json_bytes(const std::string& token);

}  // namespace ds4::server
