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

// The response for a GET of `path`, or nullopt when `path` is none of the page's. The file is
// sent gzip-compressed (the copy build.mjs made) when `accept_encoding` allows gzip. A request
// whose If-None-Match holds that representation's ETag gets 304 with no body.
std::optional<HttpResponse> serve(std::string_view path, std::string_view if_none_match,
                                  std::string_view accept_encoding);

// Whether an Accept-Encoding header value allows gzip ("gzip", "gzip;q=0.5", "*"; not "gzip;q=0").
bool accepts_gzip(std::string_view accept_encoding);

}  // namespace ds4::server::webui
