#!/usr/bin/env bash
# The npm side of the tests, installed when missing (idempotently): Node.js and npm from Debian
# if absent, then the packages of package-lock.json (playwright-core for the browser tests;
# @xterm/headless, the reference terminal of the Rust reflow tests). Reinstalled when the lock
# file changes. Used by tests/run before `cargo test`, and by tests/browser/run.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

say() { printf '\n== %s\n' "$*"; }

need_apt=()
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
if [ "${#need_apt[@]}" -gt 0 ]; then
  say "installing ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

lock_sum="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
stamp="$here/node_modules/.ptyhub-lock-sha256"
if [ ! -d "$here/node_modules/playwright-core" ] || [ ! -d "$here/node_modules/@xterm/headless" ] \
  || [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  say "npm ci (tests/browser)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" >"$stamp"
fi

# The language servers and the LSP client of tests/lsp.rs.
"$here/../lsp/install.sh"
