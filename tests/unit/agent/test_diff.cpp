// unified_diff, checked by an independent implementation: GNU patch must turn `before` into
// `after` with the diff, for random edits (insertions, deletions, changes, missing final
// newline) and the trimmed / fallback paths.
#include "agent/diff.h"

#include <random>

#include "agent_test_util.h"

namespace ds4::agent::test {
namespace {

// Applies `diff` to `before` with GNU patch; returns the patched text.
std::string apply_with_patch(const TempDir& t, const std::string& before, const std::string& diff) {
  write(t / "f.txt", before);
  write(t / "f.diff", diff);
  const std::string cmd = "patch --quiet --force --no-backup-if-mismatch " + (t / "f.txt").string() + " " +
                          (t / "f.diff").string() + " >" + (t / "patch.log").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << slurp(t / "patch.log") << "\n" << diff;
  return slurp(t / "f.txt");
}

std::string random_text(std::mt19937& rng, int lines) {
  std::string s;
  for (int i = 0; i < lines; ++i) s += "line " + std::to_string(rng() % 12) + "\n";
  return s;
}

std::string mutate(std::mt19937& rng, const std::string& s) {
  std::vector<std::string> L;
  size_t at = 0;
  while (at < s.size()) {
    size_t e = s.find('\n', at);
    L.push_back(s.substr(at, e - at + 1));
    at = e + 1;
  }
  const int edits = 1 + static_cast<int>(rng() % 5);
  for (int k = 0; k < edits; ++k) {
    const size_t pos = L.empty() ? 0 : rng() % (L.size() + 1);
    switch (rng() % 3) {
      case 0: L.insert(L.begin() + static_cast<long>(pos), "new " + std::to_string(rng() % 100) + "\n"); break;
      case 1: if (pos < L.size()) L.erase(L.begin() + static_cast<long>(pos)); break;
      default: if (pos < L.size()) L[pos] = "changed " + std::to_string(rng() % 100) + "\n"; break;
    }
  }
  std::string out;
  for (auto& l : L) out += l;
  if (!out.empty() && rng() % 4 == 0) out.pop_back();  // no final newline
  return out;
}

TEST(AgentDiff, EqualTextsGiveNothing) { EXPECT_EQ(unified_diff("a\nb\n", "a\nb\n", "x"), ""); }

TEST(AgentDiff, ContextAndHeaders) {
  const std::string before = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n";
  const std::string after = "1\n2\n3\n4\n5\nsix\n7\n8\n9\n10\n";
  EXPECT_EQ(unified_diff(before, after, "n.txt"),
            "--- a/n.txt\n+++ b/n.txt\n@@ -3,7 +3,7 @@\n 3\n 4\n 5\n-6\n+six\n 7\n 8\n 9\n");
}

TEST(AgentDiff, NoFinalNewlineIsMarked) {
  EXPECT_EQ(unified_diff("a\nb", "a\nc", "f"),
            "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n");
}

TEST(AgentDiff, RandomEditsApplyWithGnuPatch) {
  if (std::system("command -v patch >/dev/null") != 0) GTEST_SKIP() << "GNU patch not installed";
  TempDir t;
  std::mt19937 rng(12345);
  for (int iter = 0; iter < 60; ++iter) {
    const std::string before = random_text(rng, static_cast<int>(rng() % 40));
    const std::string after = mutate(rng, before);
    const std::string d = unified_diff(before, after, "f.txt");
    if (before == after) {
      EXPECT_EQ(d, "");
      continue;
    }
    EXPECT_EQ(apply_with_patch(t, before, d), after) << "iteration " << iter << "\n" << d;
  }
}

TEST(AgentDiff, LargeMiddleFallsBackToReplaceAndStillApplies) {
  if (std::system("command -v patch >/dev/null") != 0) GTEST_SKIP() << "GNU patch not installed";
  TempDir t;
  std::string before = "head\n", after = "head\n";
  for (int i = 0; i < 2100; ++i) before += "a" + std::to_string(i) + "\n";
  for (int i = 0; i < 2100; ++i) after += "b" + std::to_string(i) + "\n";
  before += "tail\n";
  after += "tail\n";
  const std::string d = unified_diff(before, after, "f.txt");
  EXPECT_NE(d.find("@@ -1,2102 +1,2102 @@"), std::string::npos) << d.substr(0, 200);
  EXPECT_EQ(apply_with_patch(t, before, d), after);
}

}  // namespace
}  // namespace ds4::agent::test
