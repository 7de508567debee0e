#pragma once
// Where tests write their scratch files: <build dir>/test-tmp. Runs from different checkouts or
// build directories (worktrees, a CI clone, the sanitizer build) then never share or overwrite
// each other's files, while the test processes of one build still find what an earlier one wrote
// under the same name (the generated models several tests reuse). Without DS4_BUILD_DIR (a
// program built outside ds4_add_test): the system temp directory, per process.
#include <unistd.h>

#include <filesystem>
#include <string>

namespace ds4::test {

inline std::filesystem::path test_tmp_dir() {
#ifdef DS4_BUILD_DIR
  static const std::filesystem::path dir = std::filesystem::path(DS4_BUILD_DIR) / "test-tmp";
#else
  static const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ds4-test-" + std::to_string(::getpid()));
#endif
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace ds4::test
