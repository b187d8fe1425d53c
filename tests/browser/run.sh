#!/usr/bin/env bash
# The browser tests: installs Debian's Chromium and the npm packages if missing, builds ptyhub, runs every *.test.js.
# Usage: tests/browser/run.sh [test files...]   (from anywhere; exits non-zero when a test fails)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

say() { printf '\n== %s\n' "$*"; }

# Debian's Chromium: no test tool may download a browser of its own.
if [ ! -x /usr/bin/chromium ]; then
  say "installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi

# Node.js, npm and the packages of the lock file (playwright-core brings no browser).
"$here/install.sh"

say "cargo test --no-run (the binary)"
cd "$root"
# daemon/build.rs rebuilds the binary whenever anything under static/ changes. Built as
# `cargo test` builds it: a plain `cargo build` resolves the dependencies' features without the
# dev-dependencies' and so rebuilt the library and 20 crates after `cargo test` (about 105 s
# of tests/run); this is a no-op after `cargo test`.
cargo test --no-run --quiet

say "browser tests"
mkdir -p tests/artifacts/browser
if [ "$#" -gt 0 ]; then
  files=("$@")
else
  files=("$here"/*.test.js)
  rm -f tests/artifacts/browser/*.png # every screenshot is of this run
fi
exec node --test --test-concurrency=1 --test-timeout=180000 --test-reporter=spec "${files[@]}"
