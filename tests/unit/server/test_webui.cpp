// The chat page's routes (src/server/webui/webui.cpp) over the files compiled into the binary:
// which paths are served, content types, security headers, gzip negotiation and ETags. The
// page's behaviour in a browser is tests/browser's.
#include <gtest/gtest.h>

#include <string>

#include "server/webui/webui.h"

namespace ds4::server {
namespace {

std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return {};
}

TEST(ServerWebui, Routes) {
  auto root = webui::serve("/", "", "");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 200);
  EXPECT_EQ(root->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(root->body.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(root->body.find("/webui/app.js"), std::string::npos);
  auto index = webui::serve("/index.html", "", "");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->body, root->body);
  auto js = webui::serve("/webui/app.js", "", "");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->content_type, "text/javascript; charset=utf-8");
  EXPECT_GT(js->body.size(), 1000u);
  auto css = webui::serve("/webui/app.css", "", "");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->content_type, "text/css; charset=utf-8");
  // Not the page's: left to the API routes (404 there).
  for (const char* p : {"/webui/", "/webui/index.html", "/webui/app.js.gz", "/webui/nothing.js", "/webui/../app.js",
                        "/app.js", "/v1/models", "/index.htm", "//"}) {
    EXPECT_FALSE(webui::serve(p, "", "gzip")) << p;
  }
}

TEST(ServerWebui, SecurityHeaders) {
  auto r = webui::serve("/", "", "");
  ASSERT_TRUE(r);
  std::string csp = header(*r, "Content-Security-Policy");
  EXPECT_EQ(csp, webui::kContentSecurityPolicy);
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos);
  EXPECT_EQ(header(*r, "X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(header(*r, "X-Frame-Options"), "DENY");
  EXPECT_EQ(header(*r, "Vary"), "Accept-Encoding");
}

TEST(ServerWebui, GzipWhenAccepted) {
  auto plain = webui::serve("/webui/app.js", "", "");
  auto gz = webui::serve("/webui/app.js", "", "br, gzip, deflate");
  ASSERT_TRUE(plain && gz);
  EXPECT_EQ(header(*plain, "Content-Encoding"), "");
  EXPECT_EQ(header(*gz, "Content-Encoding"), "gzip");
  ASSERT_GE(gz->body.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(gz->body[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>(gz->body[1]), 0x8b);
  EXPECT_LT(gz->body.size(), plain->body.size() / 2);
  EXPECT_NE(header(*gz, "ETag"), header(*plain, "ETag"));  // two representations, two tags

  EXPECT_TRUE(webui::accepts_gzip("gzip"));
  EXPECT_TRUE(webui::accepts_gzip("GZIP;q=0.5"));
  EXPECT_TRUE(webui::accepts_gzip("deflate, *"));
  EXPECT_TRUE(webui::accepts_gzip("x-gzip"));
  EXPECT_FALSE(webui::accepts_gzip(""));
  EXPECT_FALSE(webui::accepts_gzip("identity"));
  EXPECT_FALSE(webui::accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(webui::accepts_gzip("gzip; q=0.000, *"));  // named with q=0: the star does not bring it back
  EXPECT_FALSE(webui::accepts_gzip("gzipped"));
}

TEST(ServerWebui, EtagGives304) {
  auto r = webui::serve("/", "", "gzip");
  ASSERT_TRUE(r);
  std::string tag = header(*r, "ETag");
  ASSERT_EQ(tag.size(), 18u);  // "..." around 16 hex digits
  auto again = webui::serve("/", tag, "gzip");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 304);
  EXPECT_TRUE(again->body.empty());
  // The gzip tag does not validate the plain representation.
  EXPECT_EQ(webui::serve("/", tag, "")->status, 200);
  EXPECT_EQ(webui::serve("/", "\"0000000000000000\"", "gzip")->status, 200);
}

}  // namespace
}  // namespace ds4::server
