// The file tools through Tools::run, as the loop calls them: results are what the model reads.
#include "agent/tools.h"

#include "agent_test_util.h"

namespace ds4::agent::test {
namespace {

using chat::Json;

struct ToolsFixture : ::testing::Test {
  TempDir t;
  RecordingHost host;
  std::unique_ptr<Tools> tools;
  void SetUp() override { make(false); }
  void make(bool yes, ToolLimits lim = {}) { tools = std::make_unique<Tools>(Workdir(t.dir), yes, lim); }
  ToolOutcome run(const std::string& name, Json args) { return tools->run(call(name, std::move(args)), host, nullptr); }
};

TEST_F(ToolsFixture, ReadFileNumbersLinesAndReadsRanges) {
  write(t / "f.txt", "one\ntwo\nthree\nfour\n");
  auto r = run("read_file", {{"path", "f.txt"}});
  ASSERT_TRUE(r.ok) << r.text;
  EXPECT_EQ(r.text, "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n");
  r = run("read_file", {{"path", "f.txt"}, {"start_line", 2}, {"end_line", 3}});
  EXPECT_EQ(r.text, "     2\ttwo\n     3\tthree\n[lines 2-3 of 4; read more with start_line]");
  // Numbers written as text (string="true" parameters) are accepted.
  r = run("read_file", {{"path", "f.txt"}, {"start_line", "4"}});
  EXPECT_EQ(r.text, "     4\tfour\n[lines 4-4 of 4]");
  r = run("read_file", {{"path", "f.txt"}, {"start_line", 9}});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.text, "error: read_file: f.txt: start_line 9 is past the end of the file (4 lines)");
  r = run("read_file", {{"path", "nope.txt"}});
  EXPECT_EQ(r.text, "error: read_file: nope.txt: no such file");
  r = run("read_file", {});
  EXPECT_EQ(r.text, "error: read_file: missing required argument 'path'");
  r = run("read_file", {{"path", 7}});
  EXPECT_EQ(r.text, "error: read_file: argument 'path' must be a string");
  write(t / "bin", std::string("a\0b", 3));
  EXPECT_EQ(run("read_file", {{"path", "bin"}}).text, "error: read_file: bin: binary file (3 bytes)");
}

TEST_F(ToolsFixture, ReadFileCapsLines) {
  ToolLimits lim;
  lim.read_max_lines = 3;
  make(false, lim);
  write(t / "f.txt", "1\n2\n3\n4\n5\n");
  const auto r = run("read_file", {{"path", "f.txt"}});
  EXPECT_EQ(r.text, "     1\t1\n     2\t2\n     3\t3\n[lines 1-3 of 5; read more with start_line]");
}

TEST_F(ToolsFixture, WriteFileAsksShowsTheDiffAndCreatesDirectories) {
  host.answers = {Answer::Yes};
  auto r = run("write_file", {{"path", "d/e/new.txt"}, {"content", "a\nb\n"}});
  ASSERT_TRUE(r.ok) << r.text;
  EXPECT_EQ(r.text, "created d/e/new.txt (2 lines, 4 bytes)");
  EXPECT_EQ(slurp(t / "d/e/new.txt"), "a\nb\n");
  ASSERT_EQ(host.questions.size(), 1u);
  EXPECT_EQ(host.questions[0], "Create d/e/new.txt?");
  ASSERT_EQ(host.diffs.size(), 1u);
  EXPECT_EQ(host.diffs[0], "--- a/d/e/new.txt\n+++ b/d/e/new.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n");
}

TEST_F(ToolsFixture, DeclinedWriteLeavesTheFileAlone) {
  write(t / "keep.txt", "old\n");
  host.answers = {Answer::No};
  const auto r = run("write_file", {{"path", "keep.txt"}, {"content", "new\n"}});
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.declined);
  EXPECT_EQ(r.text, "error: the user declined this action");
  EXPECT_EQ(slurp(t / "keep.txt"), "old\n");
  EXPECT_EQ(host.questions.at(0), "Overwrite keep.txt?");
}

TEST_F(ToolsFixture, AlwaysStopsAskingForThatKindOnly) {
  host.answers = {Answer::Always, Answer::No};
  EXPECT_TRUE(run("write_file", {{"path", "a.txt"}, {"content", "1"}}).ok);
  EXPECT_TRUE(run("write_file", {{"path", "b.txt"}, {"content", "2"}}).ok);  // not asked
  EXPECT_EQ(host.questions.size(), 1u);
  // Commands are another kind: asked, and this one declined.
  const auto r = run("run_command", {{"command", "touch ran"}});
  EXPECT_TRUE(r.declined);
  EXPECT_EQ(host.questions.size(), 2u);
  EXPECT_EQ(host.questions[1], "Run `touch ran`?");
  EXPECT_FALSE(fs::exists(t / "ran"));
}

TEST_F(ToolsFixture, YesNeverAsks) {
  make(true);
  EXPECT_TRUE(run("write_file", {{"path", "a.txt"}, {"content", "1"}}).ok);
  EXPECT_TRUE(run("run_command", {{"command", "true"}}).ok);
  EXPECT_TRUE(host.questions.empty());
}

TEST_F(ToolsFixture, EditReplacesExactlyOneOccurrence) {
  make(true);
  write(t / "c.txt", "alpha\nbeta\ngamma\n");
  const auto r = run("edit", {{"path", "c.txt"}, {"old_text", "beta\n"}, {"new_text", "BETA\nbeta2\n"}});
  ASSERT_TRUE(r.ok) << r.text;
  EXPECT_EQ(r.text, "edited c.txt: lines 2-2 replaced by 2 lines");
  EXPECT_EQ(slurp(t / "c.txt"), "alpha\nBETA\nbeta2\ngamma\n");
  ASSERT_EQ(host.diffs.size(), 1u);
  EXPECT_EQ(host.diffs[0], "--- a/c.txt\n+++ b/c.txt\n@@ -1,3 +1,4 @@\n alpha\n-beta\n+BETA\n+beta2\n gamma\n");
}

TEST_F(ToolsFixture, EditErrorsNameTheProblem) {
  make(true);
  write(t / "c.txt", "x = 1\ny = 2\nx = 1\n");
  auto r = run("edit", {{"path", "c.txt"}, {"old_text", "z = 3"}, {"new_text", "z = 4"}});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.text.find("error: edit: c.txt: old_text was not found"), std::string::npos) << r.text;
  r = run("edit", {{"path", "c.txt"}, {"old_text", "x = 1"}, {"new_text", "x = 5"}});
  EXPECT_EQ(r.text,
            "error: edit: c.txt: old_text occurs 2 times (at lines 1, 3); include more surrounding text so it "
            "matches exactly once");
  r = run("edit", {{"path", "c.txt"}, {"old_text", ""}, {"new_text", "q"}});
  EXPECT_NE(r.text.find("old_text is empty"), std::string::npos);
  r = run("edit", {{"path", "c.txt"}, {"old_text", "y = 2"}, {"new_text", "y = 2"}});
  EXPECT_EQ(r.text, "error: edit: old_text and new_text are the same");
  EXPECT_EQ(slurp(t / "c.txt"), "x = 1\ny = 2\nx = 1\n");  // untouched by all of the above
  EXPECT_TRUE(host.diffs.empty());
}

TEST_F(ToolsFixture, FileToolsStayInsideTheWorkdir) {
  make(true);
  TempDir outside;
  write(outside / "s.txt", "secret");
  fs::create_directory_symlink(outside.dir, t / "out");
  EXPECT_NE(run("read_file", {{"path", "../s.txt"}}).text.find("'..' is not allowed"), std::string::npos);
  EXPECT_NE(run("read_file", {{"path", (outside / "s.txt").string()}}).text.find("absolute paths are not allowed"),
            std::string::npos);
  EXPECT_NE(run("read_file", {{"path", "out/s.txt"}}).text.find("resolves outside the workdir"), std::string::npos);
  EXPECT_NE(run("write_file", {{"path", "out/w.txt"}, {"content", "x"}}).text.find("resolves outside"),
            std::string::npos);
  EXPECT_NE(run("edit", {{"path", "out/s.txt"}, {"old_text", "secret"}, {"new_text", "x"}}).text.find("resolves outside"),
            std::string::npos);
  EXPECT_NE(run("list", {{"path", "out"}}).text.find("resolves outside"), std::string::npos);
  EXPECT_NE(run("grep", {{"pattern", "secret"}, {"path", "out"}}).text.find("resolves outside"), std::string::npos);
  EXPECT_EQ(slurp(outside / "s.txt"), "secret");
  EXPECT_FALSE(fs::exists(outside / "w.txt"));
  // grep over the whole workdir does not follow the link either.
  EXPECT_EQ(run("grep", {{"pattern", "secret"}}).text, "no matches for secret");
}

TEST_F(ToolsFixture, ListGlobGrep) {
  write(t / "src/a.cpp", "int main() {}\n// TODO fix\n");
  write(t / "src/sub/b.cpp", "void f();\n");
  write(t / "src/sub/b.h", "// todo later\n");
  write(t / "README", "hello\n");
  write(t / ".git/config", "TODO inside git\n");
  auto r = run("list", {});
  EXPECT_EQ(r.text, ".git/\nREADME  (6 bytes)\nsrc/\n");
  r = run("list", {{"path", "src"}});
  EXPECT_EQ(r.text, "a.cpp  (26 bytes)\nsub/\n");
  r = run("glob", {{"pattern", "src/**/*.cpp"}});
  EXPECT_EQ(r.text, "src/a.cpp\nsrc/sub/b.cpp\n");
  r = run("glob", {{"pattern", "**/*.h"}});
  EXPECT_EQ(r.text, "src/sub/b.h\n");
  EXPECT_EQ(run("glob", {{"pattern", "*.md"}}).text, "no files match *.md");
  r = run("grep", {{"pattern", "TODO"}});
  EXPECT_EQ(r.text, "src/a.cpp:2: // TODO fix\n");
  r = run("grep", {{"pattern", "todo"}, {"ignore_case", true}});
  EXPECT_EQ(r.text, "src/a.cpp:2: // TODO fix\nsrc/sub/b.h:1: // todo later\n");
  r = run("grep", {{"pattern", "todo"}, {"ignore_case", true}, {"glob", "**/*.h"}});
  EXPECT_EQ(r.text, "src/sub/b.h:1: // todo later\n");
  r = run("grep", {{"pattern", "(unclosed"}});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.text.find("error: grep: bad regular expression at offset"), std::string::npos) << r.text;
}

TEST_F(ToolsFixture, UnknownToolAndBadArguments) {
  EXPECT_EQ(run("rm_rf", {}).text,
            "error: rm_rf: unknown tool 'rm_rf' (tools: read_file, write_file, edit, list, glob, grep, run_command)");
  chat::ToolCall c = call("read_file", Json::array());
  EXPECT_EQ(tools->run(c, host, nullptr).text, "error: read_file: arguments must be a JSON object");
}

TEST(AgentGlob, Segments) {
  EXPECT_TRUE(glob_match("*.cpp", "a.cpp"));
  EXPECT_FALSE(glob_match("*.cpp", "src/a.cpp"));
  EXPECT_TRUE(glob_match("**/*.cpp", "a.cpp"));
  EXPECT_TRUE(glob_match("**/*.cpp", "x/y/a.cpp"));
  EXPECT_TRUE(glob_match("src/**", "src/x/y"));
  EXPECT_TRUE(glob_match("src/**/b.h", "src/b.h"));
  EXPECT_FALSE(glob_match("src/*/b.h", "src/b.h"));
  EXPECT_TRUE(glob_match("s?c/[ab].h", "src/a.h"));
  EXPECT_FALSE(glob_match("*", ".hidden"));  // like a shell: '*' does not match a leading dot
}

TEST(AgentToolSchemas, EveryToolHasAFunctionSchema) {
  const auto s = Tools::schemas();
  std::vector<std::string> names;
  for (const auto& t : s) {
    ASSERT_EQ(t["type"], "function");
    names.push_back(t["function"]["name"]);
    EXPECT_TRUE(t["function"]["parameters"]["properties"].is_object());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"read_file", "write_file", "edit", "list", "glob", "grep", "run_command"}));
}

}  // namespace
}  // namespace ds4::agent::test
