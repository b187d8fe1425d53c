// The checks every raw-dialect client goes through in a real browser (type, resize, a dropped
// connection, exit), the rig they run on, and the pages that host those clients.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TOKEN, WAIT, eventually, launchBrowser, startDaemon } from './helpers.js';
import { startProxy, startSite } from './network.js';

const here = dirname(fileURLToPath(import.meta.url));

/**
 * What a compatibility test runs against: a site of its own origin (allowed by the daemon, as an
 * application embedding terminals would be), the daemon, a proxy in front of it, and Chromium.
 * `stop()` ends whichever of them started.
 */
export async function startRig() {
  const rig = {
    async stop() {
      await rig.browser?.close();
      await rig.proxy?.close();
      await rig.site?.close();
      await rig.daemon?.stop();
    },
  };
  try {
    rig.site = await startSite();
    rig.daemon = await startDaemon({ config: `\n[auth]\nallowed_origins = ["${rig.site.origin}"]\n` });
    rig.proxy = await startProxy(rig.daemon.url);
    rig.browser = await launchBrowser();
  } catch (e) {
    await rig.stop();
    throw e;
  }
  return rig;
}

/** Creates a bash session through REST (the daemon's token, as a script would) and returns it. */
export async function createShell(daemon) {
  const res = await fetch(new URL('api/sessions', daemon.url), {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ assistant: 'shell' }),
  });
  assert.equal(res.status, 201, await res.clone().text());
  return res.json();
}

/** The session as `GET /api/sessions` lists it. */
export async function listed(daemon, id) {
  const res = await fetch(new URL('api/sessions', daemon.url), { headers: { authorization: `Bearer ${TOKEN}` } });
  return (await res.json()).find((s) => s.id === id);
}

/**
 * Serves the page `name` from `site` (a loopback site of its own origin, as an application
 * embedding a terminal would be) and opens it: a terminal in a fixed box, xterm.js imported from
 * ptyhub (`base`, the proxy in front of it), then `script`, a module body with `window.term` and
 * `BASE` (ptyhub's URL). `files` are more files for the site ({ path under /compat/: file }).
 */
export async function hostPage(page, site, base, name, script, files = {}) {
  site.pages[`/compat/${name}.html`] = `<!doctype html>
<meta charset="utf-8">
<link rel="stylesheet" href="${base}vendor/xterm/xterm.css?v=6.0.0">
<div id="terminal" style="width: 900px; height: 480px"></div>
<script type="module">
import { Terminal } from '${base}vendor/xterm/xterm.mjs?v=6.0.0';
const BASE = ${JSON.stringify(base)};
window.term = new Terminal({ cols: 80, rows: 24 });
window.term.open(document.getElementById('terminal'));
${script}
</script>`;
  for (const [path, file] of Object.entries(files)) site.pages[`/compat/${path}`] = readFileSync(file);
  await page.goto(`${site.origin}/compat/${name}.html`);
}

/** @xterm/addon-attach as npm installed it (tests/browser/package.json pins the version). */
export const ATTACH_ADDON = join(here, 'node_modules', '@xterm', 'addon-attach', 'lib', 'addon-attach.mjs');

/** The whole xterm buffer (scrollback and screen), lines right-trimmed, trailing blank lines dropped. */
export function bufferText(page) {
  return page.evaluate(() => {
    const b = window.term.buffer.active;
    const lines = [];
    for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));
    return lines.join('\n').replace(/\n+$/, '');
  });
}

/** Waits until the buffer matches `pattern`; the buffer is in the error. */
export async function waitForBuffer(page, pattern) {
  let last = '';
  await eventually(
    async () => {
      last = await bufferText(page);
      return pattern.test(last);
    },
    { what: `${pattern}` },
  ).catch((e) => {
    throw new Error(`${e.message}; the terminal holds:\n${last}`);
  });
  return last;
}

/** Types like a person into the xterm on the page. */
export async function type(page, text) {
  await page.locator('.xterm-helper-textarea').focus();
  await page.keyboard.type(text);
}

/** How many whole lines of `text` are exactly `line`. */
export function count(text, line) {
  return text.split('\n').filter((l) => l === line).length;
}

/** The shell answers what is typed: the output is the computed `hi-42`, not the echoed command. */
export async function typesAndSees(page) {
  await waitForBuffer(page, /\$ /);
  await type(page, 'echo hi-$((6*7))\n');
  await waitForBuffer(page, /^hi-42$/m);
}

/** A resize of the xterm reaches the session (only this client writes, so its size is the session's). */
export async function resizes(page, daemon, id) {
  await page.evaluate(() => window.term.resize(97, 31));
  await eventually(async () => {
    const s = await listed(daemon, id);
    return s.cols === 97 && s.rows === 31;
  }, { what: 'the session at 97×31 in GET /api/sessions' });
}

/**
 * The proxy cuts the client's socket; `reconnected()` resolves once the client says it is back.
 * The replay restores the screen exactly once, and the connection is live again.
 */
export async function survivesADrop(page, proxy, reconnected) {
  const before = await bufferText(page);
  assert.equal(count(before, 'hi-42'), 1, before);
  assert.equal(proxy.drop(/^\/ws\/[^/]+\/raw/), 1, 'the raw socket was open through the proxy');
  await reconnected();
  // The replay is at the session's size (97×31 now): wait for it to be drawn, then compare.
  const after = await waitForBuffer(page, /^hi-42$/m);
  assert.equal(count(after, 'hi-42'), 1, `the output once after the reconnect:\n${after}`);
  assert.equal(after.split('\n').filter((l) => l.includes('echo hi-$((6*7))')).length, 1, `the command once:\n${after}`);
  await type(page, 'echo again-$((1+1))\n');
  await waitForBuffer(page, /^again-2$/m);
  return after;
}

/** `exit 7` ends bash; `exitCode()` (the page's idea of it) resolves to 7 and the session agrees. */
export async function exitsWithItsCode(page, daemon, id, exitCode) {
  await type(page, 'exit 7\n');
  await page.waitForFunction(exitCode, null, { timeout: WAIT, polling: 100 });
  assert.equal(await page.evaluate(exitCode), 7);
  await waitForBuffer(page, /\[Process exited \(code 7\)\]/);
  const s = await listed(daemon, id);
  assert.equal(s.alive, false);
  assert.equal(s.exitCode, 7);
}
