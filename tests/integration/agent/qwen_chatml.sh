#!/usr/bin/env bash
# ds4-agent on a qwen35moe model (tests/unit/model/make_qwen_model.cpp): the agent picks ChatML
# and Qwen's <tool_call> syntax from general.architecture. The scripted model (qwen_script.json)
# writes a ChatML tool call; the test checks that the tool ran with the parsed arguments, that
# the next turn reused the whole history (no resync) and that the run answered.
# Usage: qwen_chatml.sh DS4_AGENT MODEL SCRIPT
set -euo pipefail
agent=$1 model=$2 script=$3
wd=$(mktemp -d)
trap 'rm -rf "$wd"' EXIT
out=$("$agent" -m "$model" --workdir "$wd" --debug-script "$script" -p "WRITETEST please" --yes --max-turns 3 \
      --json -t 2 -c 8192)
fail() { echo "FAIL: $*"; echo "$out" | grep -v '"event":"text"\|"event":"reasoning"'; exit 1; }
[[ "$(cat "$wd/hello.txt" 2>/dev/null)" == "hi from qwen" ]] || fail "hello.txt not written as the tool call asked"
grep -q '"event":"tool_call","id":"call_1","name":"write_file","arguments":{"path":"hello.txt","content":"hi from qwen"}' \
  <<<"$out" || fail "tool call not parsed"
grep -q '"resynced":true' <<<"$out" && fail "the second turn re-tokenized the history"
grep -q '"event":"done","outcome":"answered","turns":2' <<<"$out" || fail "run did not answer in 2 turns"
echo "ok"
