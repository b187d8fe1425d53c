#!/usr/bin/env bash
# The language servers tests/lsp.rs runs, installed when missing (idempotently): gopls from
# Debian (with golang-go, which it needs), then the npm packages of package-lock.json (pyright,
# typescript-language-server with typescript, and the client's vscode-ws-jsonrpc,
# vscode-jsonrpc and ws). Reinstalled when the lock file changes. Called by
# tests/browser/install.sh, which has made sure node and npm are there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

say() { printf '\n== %s\n' "$*"; }

need_apt=()
command -v gopls >/dev/null || need_apt+=(gopls)
command -v go >/dev/null || need_apt+=(golang-go)
if [ "${#need_apt[@]}" -gt 0 ]; then
  say "installing ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

lock_sum="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
stamp="$here/node_modules/.ptyhub-lock-sha256"
if [ ! -x "$here/node_modules/.bin/pyright-langserver" ] \
  || [ ! -x "$here/node_modules/.bin/typescript-language-server" ] \
  || [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  say "npm ci (tests/lsp)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" >"$stamp"
fi
