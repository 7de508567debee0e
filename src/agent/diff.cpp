#include "agent/diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ds4::agent {

namespace {

// Lines including their '\n' (the last one may lack it).
std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t nl = s.find('\n', at);
    size_t end = nl == std::string_view::npos ? s.size() : nl + 1;
    out.push_back(s.substr(at, end - at));
    at = end;
  }
  return out;
}

enum class Op : char { Keep = ' ', Del = '-', Add = '+' };

struct Line {
  Op op;
  std::string_view text;
  size_t a, b;  // 0-based line numbers in before / after at this point
};

}  // namespace

std::string unified_diff(std::string_view before, std::string_view after, const std::string& name) {
  if (before == after) return "";
  const auto A = split_lines(before), B = split_lines(after);
  size_t pre = 0;
  while (pre < A.size() && pre < B.size() && A[pre] == B[pre]) ++pre;
  size_t suf = 0;
  while (suf < A.size() - pre && suf < B.size() - pre && A[A.size() - 1 - suf] == B[B.size() - 1 - suf]) ++suf;
  const size_t n = A.size() - pre - suf, m = B.size() - pre - suf;

  std::vector<Line> ops;
  for (size_t i = 0; i < pre; ++i) ops.push_back({Op::Keep, A[i], i, i});
  if (n * m <= 4'000'000) {
    // LCS table over the middle, then walk it forwards.
    std::vector<uint32_t> L((n + 1) * (m + 1), 0);
    auto at = [&](size_t i, size_t j) -> uint32_t& { return L[i * (m + 1) + j]; };
    for (size_t i = n; i-- > 0;)
      for (size_t j = m; j-- > 0;)
        at(i, j) = A[pre + i] == B[pre + j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
    size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && A[pre + i] == B[pre + j]) {
        ops.push_back({Op::Keep, A[pre + i], pre + i, pre + j});
        ++i, ++j;
      } else if (i < n && (j == m || at(i + 1, j) >= at(i, j + 1))) {
        ops.push_back({Op::Del, A[pre + i], pre + i, pre + j});  // removals first, as diff -u
        ++i;
      } else {
        ops.push_back({Op::Add, B[pre + j], pre + i, pre + j});
        ++j;
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) ops.push_back({Op::Del, A[pre + i], pre + i, pre});
    for (size_t j = 0; j < m; ++j) ops.push_back({Op::Add, B[pre + j], pre + n, pre + j});
  }
  for (size_t k = 0; k < suf; ++k) ops.push_back({Op::Keep, A[pre + n + k], pre + n + k, pre + m + k});

  std::string out = fmt::format("--- a/{}\n+++ b/{}\n", name, name);
  const size_t ctx = 3;
  size_t k = 0;
  while (k < ops.size()) {
    // Next change.
    size_t c = k;
    while (c < ops.size() && ops[c].op == Op::Keep) ++c;
    if (c == ops.size()) break;
    size_t start = c >= ctx ? c - ctx : 0;
    start = std::max(start, k);
    // Extend the hunk while changes are within 2*ctx of each other.
    size_t end = c;
    for (;;) {
      while (end < ops.size() && ops[end].op != Op::Keep) ++end;
      size_t gap = end;
      while (gap < ops.size() && ops[gap].op == Op::Keep && gap - end < 2 * ctx + 1) ++gap;
      if (gap < ops.size() && ops[gap].op != Op::Keep) {
        end = gap;
        continue;
      }
      end = std::min(ops.size(), end + ctx);
      break;
    }
    size_t na = 0, nb = 0;
    for (size_t q = start; q < end; ++q) {
      if (ops[q].op != Op::Add) ++na;
      if (ops[q].op != Op::Del) ++nb;
    }
    const size_t a0 = ops[start].a, b0 = ops[start].b;
    out += fmt::format("@@ -{},{} +{},{} @@\n", na ? a0 + 1 : a0, na, nb ? b0 + 1 : b0, nb);
    for (size_t q = start; q < end; ++q) {
      out += static_cast<char>(ops[q].op);
      out += ops[q].text;
      if (ops[q].text.empty() || ops[q].text.back() != '\n') out += "\n\\ No newline at end of file\n";
    }
    k = end;
  }
  return out;
}

}  // namespace ds4::agent
