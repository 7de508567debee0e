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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] + 32) : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

}  // namespace

bool accepts_gzip(std::string_view accept_encoding) {
  bool star = false, gzip = false, gzip_named = false;
  while (!accept_encoding.empty()) {
    size_t comma = accept_encoding.find(',');
    std::string_view item = accept_encoding.substr(0, comma);
    accept_encoding = comma == std::string_view::npos ? std::string_view() : accept_encoding.substr(comma + 1);
    size_t semi = item.find(';');
    std::string_view coding = trim(item.substr(0, semi));
    bool zero = false;
    if (semi != std::string_view::npos) {
      std::string_view q = trim(item.substr(semi + 1));
      if (q.size() >= 2 && (q[0] == 'q' || q[0] == 'Q') && q[1] == '=') {
        q = trim(q.substr(2));
        zero = !q.empty() && q.find_first_not_of("0.") == std::string_view::npos;
      }
    }
    if (iequals(coding, "gzip") || iequals(coding, "x-gzip")) {
      gzip_named = true;
      gzip = gzip || !zero;
    } else if (coding == "*") {
      star = !zero;
    }
  }
  return gzip || (!gzip_named && star);
}

std::optional<HttpResponse> serve(std::string_view path, std::string_view if_none_match,
                                  std::string_view accept_encoding) {
  std::string_view name;
  if (path == "/" || path == "/index.html") {
    name = "index.html";
  } else if (path.rfind("/webui/", 0) == 0 && path.size() > 7) {
    name = path.substr(7);
    // index.html only at /; the .gz copies only through Accept-Encoding.
    if (name == "index.html" || (name.size() > 3 && name.substr(name.size() - 3) == ".gz")) return std::nullopt;
  } else {
    return std::nullopt;
  }
  const Asset* plain = find(name);
  if (!plain) return std::nullopt;
  const Asset* gz = accepts_gzip(accept_encoding) ? find(std::string(name) + ".gz") : nullptr;
  const Asset* a = gz ? gz : plain;
  HttpResponse r;
  std::string tag = etag(*a);
  r.headers = {{"Content-Security-Policy", kContentSecurityPolicy},
               {"X-Content-Type-Options", "nosniff"},
               {"Referrer-Policy", "no-referrer"},
               {"X-Frame-Options", "DENY"},
               {"Cache-Control", "no-cache"},
               {"Vary", "Accept-Encoding"},
               {"ETag", tag}};
  if (gz) r.headers.emplace_back("Content-Encoding", "gzip");
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
