#!/usr/bin/env bash
# Writes the prompt sets of the steering benchmark (docs/BENCHMARKS.md "Directional steering"):
# KJV passages (verses 1-3 of each chapter, one JSON object {"text": ...} per line) of two
# kinds, each split into a set that builds the direction and a held-out set that measures it:
#   poetic_build.jsonl     Psalms 1-25, Proverbs 1-15          (40)
#   poetic_heldout.jsonl   Psalms 101-115, Proverbs 16-30      (30)
#   narrative_build.jsonl  Genesis 12-31, 1 Samuel 1-20        (40)
#   narrative_heldout.jsonl Genesis 37-50, 2 Kings 1-16        (30)
# Needs the `bible` program: apt-get install bible-kjv bible-kjv-text (docs/DEPENDENCIES.md).
# Usage: bench/steer/make_kjv_sets.sh [OUT_DIR]   (default: bench/steer)
set -euo pipefail
out=${1:-$(dirname "$0")}
command -v bible >/dev/null || { echo "make_kjv_sets.sh: install bible-kjv bible-kjv-text" >&2; exit 1; }
passage() {  # book abbreviation, chapter -> one line of text
  bible -l 1000000 "$1$2:1-3" | awk '/^  *[0-9]+ / { sub(/^  *[0-9]+ /, ""); printf "%s%s", sep, $0; sep = " " }'
}
emit() {  # file, then "book first last" triples
  local f=$1; shift
  : >"$f"
  while [ $# -gt 0 ]; do
    for c in $(seq "$2" "$3"); do
      passage "$1" "$c" | python3 -c 'import json,sys; print(json.dumps({"text": sys.stdin.read()}))' >>"$f"
    done
    shift 3
  done
}
emit "$out/poetic_build.jsonl" Ps 1 25 Prov 1 15
emit "$out/poetic_heldout.jsonl" Ps 101 115 Prov 16 30
emit "$out/narrative_build.jsonl" Gen 12 31 1Sam 1 20
emit "$out/narrative_heldout.jsonl" Gen 37 50 2Kings 1 16
wc -l "$out"/*.jsonl
