#include "server/webui/webui.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "server/webui/assets.h"

namespace ds4::server::webui {

// default-src 'none': nothing is allowed unless named. The page loads its own script and style
// (no inline code), talks only to this server, and shows images only from data: URLs (Markdown
// images pointing elsewhere are blocked, so an answer cannot make the browser call out).
const char* const kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

namespace {

std::string_view content_type(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

// FNV-1a 64 of the bytes: stable for one build of the page, different when it changes.
std::string etag(const Asset& a) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < a.size; ++i) {
    h ^= a.data[i];
    h *= 0x100000001b3ull;
  }
  return fmt::format("\"{:016x}\"", h);
}

const Asset* find(std::string_view name) {
  for (size_t i = 0; i < kAssetCount; ++i) {
    if (name == kAssets[i].name) return &kAssets[i];
  }
  return nullptr;
}

}  // namespace

std::optional<HttpResponse> serve(std::string_view path, std::string_view if_none_match) {
  std::string_view name;
  if (path == "/" || path == "/index.html") {
    name = "index.html";
  } else if (path.rfind("/webui/", 0) == 0 && path.size() > 7) {
    name = path.substr(7);
    if (name == "index.html") return std::nullopt;  // only at /
  } else {
    return std::nullopt;
  }
  const Asset* a = find(name);
  if (!a) return std::nullopt;
  HttpResponse r;
  std::string tag = etag(*a);
  r.headers = {{"Content-Security-Policy", kContentSecurityPolicy},
               {"X-Content-Type-Options", "nosniff"},
               {"Referrer-Policy", "no-referrer"},
               {"X-Frame-Options", "DENY"},
               {"Cache-Control", "no-cache"},
               {"ETag", tag}};
  if (if_none_match == tag) {
    r.status = 304;
    r.content_type.clear();
    return r;
  }
  r.content_type = std::string(content_type(name));
  r.body.assign(reinterpret_cast<const char*>(a->data), a->size);
  return r;
}

}  // namespace ds4::server::webui
