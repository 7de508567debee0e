#pragma once
// ds4-server's chat page: GET / (index.html) and GET /webui/<file> (its script and style),
// served from the files compiled into the binary (assets.h), with a Content-Security-Policy
// that allows only the page's own script, style and API (no inline script, no other origin).
#include <optional>
#include <string_view>

#include "server/http_transport.h"

namespace ds4::server::webui {

// Sent with every file of the page.
extern const char* const kContentSecurityPolicy;

// The response for a GET of `path`, or nullopt when `path` is none of the page's. A request
// whose If-None-Match holds the file's ETag gets 304 with no body.
std::optional<HttpResponse> serve(std::string_view path, std::string_view if_none_match);

}  // namespace ds4::server::webui
