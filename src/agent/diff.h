#pragma once
// Unified diffs of text files (shown before an edit or an overwrite is confirmed).
#include <string>
#include <string_view>

namespace ds4::agent {

// `diff -u`-style hunks (3 lines of context) between `before` and `after`, headed by
// "--- a/NAME" / "+++ b/NAME". Empty when the texts are equal. Common leading and trailing
// lines are trimmed first; when the remaining middle is too large for the quadratic line
// matcher (more than 4M line pairs) the whole middle is shown as removed and re-added.
std::string unified_diff(std::string_view before, std::string_view after, const std::string& name);

}  // namespace ds4::agent
