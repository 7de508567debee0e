// Path confinement: absolute paths, ".." and symlinks out of the workdir are refused, with a
// message naming the path.
#include "agent/workdir.h"

#include "agent_test_util.h"
#include "core/error.h"

namespace ds4::agent::test {
namespace {

std::string refusal(const Workdir& w, const std::string& p, bool for_write = false) {
  try {
    w.resolve(p, for_write);
  } catch (const ToolError& e) {
    return e.what();
  }
  return "";
}

TEST(AgentWorkdir, ResolvesRelativePathsInside) {
  TempDir t;
  write(t / "a/b.txt", "x");
  const Workdir w(t.dir);
  EXPECT_EQ(w.resolve("a/b.txt"), fs::canonical(t.dir) / "a/b.txt");
  EXPECT_EQ(w.resolve("./a/./b.txt"), fs::canonical(t.dir) / "a/b.txt");
  EXPECT_EQ(w.resolve("new/file.txt", true), fs::canonical(t.dir) / "new/file.txt");  // need not exist
  EXPECT_EQ(w.relative(w.resolve("a/b.txt")), "a/b.txt");
  EXPECT_EQ(w.relative(w.resolve(".")), ".");
}

TEST(AgentWorkdir, RefusesAbsoluteDotDotAndHome) {
  TempDir t;
  const Workdir w(t.dir);
  EXPECT_NE(refusal(w, "/etc/passwd").find("/etc/passwd: absolute paths are not allowed"), std::string::npos);
  EXPECT_NE(refusal(w, "../x").find("../x: '..' is not allowed"), std::string::npos);
  EXPECT_NE(refusal(w, "a/../../x").find("'..' is not allowed"), std::string::npos);
  EXPECT_NE(refusal(w, "a/..").find("'..' is not allowed"), std::string::npos);  // even when it stays inside
  EXPECT_NE(refusal(w, "~/x").find("absolute paths are not allowed"), std::string::npos);
}

TEST(AgentWorkdir, RefusesSymlinksLeadingOut) {
  TempDir outside, t;
  write(outside / "secret.txt", "s");
  write(t / "in.txt", "i");
  fs::create_symlink(outside / "secret.txt", t / "link_file");
  fs::create_directory_symlink(outside.dir, t / "link_dir");
  fs::create_symlink(t / "in.txt", t / "inner_link");
  fs::create_symlink(t / "missing.txt", t / "dangling");
  const Workdir w(t.dir);
  EXPECT_NE(refusal(w, "link_file").find("link_file: resolves outside the workdir"), std::string::npos);
  EXPECT_NE(refusal(w, "link_dir/secret.txt").find("resolves outside the workdir"), std::string::npos);
  EXPECT_NE(refusal(w, "link_dir/new.txt", true).find("resolves outside the workdir"), std::string::npos);
  // A link that stays inside may be read, but writes never follow links.
  EXPECT_EQ(refusal(w, "inner_link"), "");
  EXPECT_NE(refusal(w, "inner_link", true).find("inner_link: is a symlink; writes do not follow symlinks"),
            std::string::npos);
  EXPECT_NE(refusal(w, "dangling").find("dangling: is a symlink whose target does not exist"), std::string::npos);
  EXPECT_NE(refusal(w, "dangling", true).find("is a symlink"), std::string::npos);
}

TEST(AgentWorkdir, WorkdirMustExist) {
  EXPECT_THROW(Workdir("/nonexistent/dir/for/ds4"), Error);
}

}  // namespace
}  // namespace ds4::agent::test
