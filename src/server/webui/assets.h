#pragma once
// The chat page's files, compiled into ds4-server. The table is generated at build time by
// embed.cmake from dist/ (the committed bundle that build.mjs writes; docs/DEPENDENCIES.md).
#include <cstddef>

namespace ds4::server::webui {

struct Asset {
  const char* name;  // file name in dist/ ("index.html", "app.js", ...)
  const unsigned char* data;
  size_t size;
};

extern const Asset kAssets[];
extern const size_t kAssetCount;

}  // namespace ds4::server::webui
