#!/usr/bin/env bash
# The browser tests: installs Debian's Chromium and the npm packages if missing, builds ptyhub, runs every *.test.js.
# Usage: tests/browser/run.sh [test files...]   (from anywhere; exits non-zero when a test fails)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

say() { printf '\n== %s\n' "$*"; }

# Debian's Chromium: no test tool may download a browser of its own.
need_apt=()
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
if [ "${#need_apt[@]}" -gt 0 ]; then
  say "installing ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

# playwright-core from the lock file (it brings no browser). Reinstalled when the lock changes.
lock_sum="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
stamp="$here/node_modules/.ptyhub-lock-sha256"
if [ ! -d "$here/node_modules/playwright-core" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  say "npm ci (tests/browser)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" >"$stamp"
fi

say "cargo build"
cd "$root"
# daemon/build.rs rebuilds the binary whenever anything under static/ changes.
cargo build --quiet

say "browser tests"
mkdir -p tests/artifacts/browser
if [ "$#" -gt 0 ]; then
  files=("$@")
else
  files=("$here"/*.test.js)
  rm -f tests/artifacts/browser/*.png # every screenshot is of this run
fi
exec node --test --test-concurrency=1 --test-timeout=180000 --test-reporter=spec "${files[@]}"
