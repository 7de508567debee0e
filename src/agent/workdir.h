#pragma once
// The directory the file tools are confined to. Paths the model gives are relative to it;
// absolute paths, ".." components and symlinks that lead out of it are refused.
#include <filesystem>
#include <stdexcept>
#include <string>

namespace ds4::agent {

// A tool failed in a way the model should hear about (bad argument, missing file, refused
// path). The message is what the model reads.
class ToolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Workdir {
 public:
  // Throws ds4::Error when `root` is not an existing directory.
  explicit Workdir(const std::filesystem::path& root);

  const std::filesystem::path& root() const { return root_; }

  // The path inside the workdir that `rel` names ("" and "." name the workdir itself).
  // Throws ToolError for an absolute path, a ".." component, or a path whose existing part
  // resolves (through symlinks) outside the workdir; for `for_write`, also when the final
  // component is a symlink (writes never follow links).
  std::filesystem::path resolve(const std::string& rel, bool for_write = false) const;

  // `p` (inside the workdir) relative to it, with '/' separators; "." for the root.
  std::string relative(const std::filesystem::path& p) const;
  // True when canonical path `p` is the root or below it.
  bool contains(const std::filesystem::path& canonical) const;

 private:
  std::filesystem::path root_;  // canonical
};

}  // namespace ds4::agent
