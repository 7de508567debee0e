#!/usr/bin/env bash
# Runs the chat page's browser test (webui.test.mjs) with node's test runner. Skips (exit 77,
# which ctest reports as skipped) only when Debian's chromium is not installed; scripts/setup.sh
# installs it, so CI runs the test.
set -euo pipefail
chromium=${DS4_CHROMIUM:-/usr/bin/chromium}
if [[ ! -x $chromium ]]; then
  echo "webui browser test SKIPPED: $chromium not found (apt-get install chromium chromium-driver, or run scripts/setup.sh)"
  exit 77
fi
if [[ ! -f ${DS4_WEBUI_MODULES:-}/playwright-core/package.json ]]; then
  echo "webui browser test: playwright-core missing in '${DS4_WEBUI_MODULES:-}' (run scripts/setup.sh)" >&2
  exit 1
fi
export DS4_CHROMIUM=$chromium
exec "$@"
