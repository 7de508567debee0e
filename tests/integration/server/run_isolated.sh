#!/usr/bin/env bash
# Runs a command in a new network namespace whose only interface is loopback (as root, with
# util-linux unshare), so the coding-agent clients can reach ds4-server and nothing else.
# Where that is not possible (no root, no unshare) it says so and runs the command as is.
set -euo pipefail
if [[ ${DS4_NO_NETNS:-} != 1 ]] && command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 &&
   unshare -n true 2>/dev/null; then
  exec unshare -n bash -c 'ip link set lo up && echo "# network: loopback only (unshare -n)" && exec "$@"' run_isolated "$@"
fi
echo "# network: NOT isolated (unshare -n unavailable); clients were only told not to call out"
exec "$@"
