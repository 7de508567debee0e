#!/usr/bin/env bash
# Writes the demo model's training text: the King James Bible (public domain) as plain text,
# one chapter per block:
#
#   Genesis 1
#
#   In the beginning God created the heaven and the earth.
#   And the earth was without form, and void; ...
#
# Source: Debian package bible-kjv-text (data) read with the `bible` program of package
# bible-kjv (both from source package bible-kjv 4.38, Debian bookworm). The KJV text itself is
# public domain (1611 translation; see /usr/share/doc/bible-kjv-text/copyright); the packages'
# program code is GPL-2+, which does not cover the text it prints. The corpus (~4.2 MB) is not
# committed: this script regenerates it byte for byte from the package.
#
# Usage: tools/train_demo/extract_corpus.sh [OUT.txt]   (default: .demo-data/kjv.txt)
# Needs: apt-get install bible-kjv bible-kjv-text
set -euo pipefail

out=${1:-.demo-data/kjv.txt}
if ! command -v bible >/dev/null 2>&1; then
  echo "extract_corpus.sh: 'bible' not found; install it: apt-get install bible-kjv bible-kjv-text" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

# Pretty-printed output with an effectively unlimited line length: a blank line, "Book N", a
# blank line, then one verse per line as "  <verse number> <text>".
bible -l 1000000 "Gen1:1-Rev22:21" >"$tmp"

# Keep the chapter headings, drop verse numbers and indentation, one blank line between chapters.
awk '
  /^$/ { next }
  /^  *[0-9]+ / { sub(/^  *[0-9]+ /, ""); print; next }
  { if (n++) print ""; print; print "" }
' "$tmp" >"$out"

chapters=$(grep -c -E '^[1-3]? ?[A-Z][A-Za-z ]+ [0-9]+$' "$out" || true)
if [ "$chapters" -ne 1189 ]; then
  echo "extract_corpus.sh: expected 1189 chapter headings, found $chapters" >&2
  exit 1
fi
if LC_ALL=C grep -q -P '[^\x20-\x7e]' "$out"; then
  echo "extract_corpus.sh: unexpected non-ASCII bytes in $out" >&2
  exit 1
fi
echo "$out: $(wc -c <"$out") bytes, $(wc -l <"$out") lines, $chapters chapters; sha256 $(sha256sum "$out" | cut -c1-16)"
