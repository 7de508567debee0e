#include "agent/workdir.h"

#include <fmt/format.h>

#include "core/error.h"

namespace ds4::agent {

namespace fs = std::filesystem;

Workdir::Workdir(const fs::path& root) {
  std::error_code ec;
  const fs::path c = fs::canonical(root, ec);
  if (ec || !fs::is_directory(c)) fail("--workdir {}: not an existing directory", root.string());
  root_ = c;
}

bool Workdir::contains(const fs::path& p) const {
  auto r = root_.begin();
  auto q = p.begin();
  for (; r != root_.end(); ++r, ++q) {
    if (q == p.end() || *q != *r) return false;
  }
  return true;
}

fs::path Workdir::resolve(const std::string& rel, bool for_write) const {
  if (rel.find('\0') != std::string::npos) throw ToolError("path contains a NUL byte");
  const fs::path p(rel);
  if (p.is_absolute() || (!rel.empty() && rel[0] == '~'))
    throw ToolError(fmt::format("{}: absolute paths are not allowed; paths are relative to the workdir", rel));
  for (const auto& part : p) {
    if (part == "..") throw ToolError(fmt::format("{}: '..' is not allowed; paths stay inside the workdir", rel));
  }
  const fs::path full = (root_ / p).lexically_normal();
  std::error_code ec;
  // The existing part of the path with every symlink resolved must stay inside.
  const fs::path real = fs::weakly_canonical(full, ec);
  if (ec) throw ToolError(fmt::format("{}: {}", rel, ec.message()));
  if (!contains(real)) throw ToolError(fmt::format("{}: resolves outside the workdir (through a symlink)", rel));
  const fs::file_status ls = fs::symlink_status(full, ec);
  if (fs::is_symlink(ls)) {
    if (for_write) throw ToolError(fmt::format("{}: is a symlink; writes do not follow symlinks", rel));
    if (!fs::exists(full, ec)) throw ToolError(fmt::format("{}: is a symlink whose target does not exist", rel));
  }
  return full;
}

std::string Workdir::relative(const fs::path& p) const {
  const fs::path r = p.lexically_relative(root_);
  const std::string s = r.generic_string();
  return s.empty() ? "." : s;
}

}  // namespace ds4::agent
