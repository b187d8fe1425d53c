// Shared test plumbing: a real ptyhub daemon per test file, headless Debian Chromium, screen reading and screenshots.

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(here, '..', '..');
export const ARTIFACTS = join(ROOT, 'tests', 'artifacts', 'browser');
const BINARY = process.env.PTYHUB_BIN || join(ROOT, 'target', 'debug', 'ptyhub');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

/** Generous: the machine may be busy (2 cores, a Rust build next door). */
export const WAIT = 30000;

/** The daemon token of every test daemon; pages get it the way people do, from a `?token=` link. */
export const TOKEN = 'browser-test-token-0123456789abcdef';

/**
 * The test "agent": prints `agent-WORD`, then idles. Asked to stop (SIGTERM) it takes a second to
 * go, as a real assistant saving its state would, so a YOLO restart lasts long enough to be seen.
 */
const agent = (word) => JSON.stringify(['bash', '-c', `trap 'sleep 1; exit 0' HUP TERM; echo agent-${word}; while :; do sleep 0.2; done`]);

// A quiet shell (no rc files, a fixed "$ " prompt) and a YOLO-capable test "agent" made of shell scripts.
const CONFIG = `
[session]
kill_grace = "2s"

[assistants.shell]
name = "Shell"
command = ["bash", "--norc", "--noprofile", "-i"]
env = { PS1 = "$ ", HISTFILE = "/dev/null" }

[assistants.agent]
name = "Agent"
command = ${agent('start')}
resume = ${agent('resume')}
yolo = ${agent('yolo')}

[assistants.missing]
name = "Missing"
command = ["ptyhub-test-no-such-program"]
`;

function withoutToken(env) {
  const { PTYHUB_TOKEN, PTYHUB_LISTEN, PTYHUB_CONFIG, ...rest } = env;
  return rest;
}

/**
 * Starts `target/debug/ptyhub --listen 127.0.0.1:0` in a fresh temp dir and waits for its first
 * stdout line, `ptyhub listening on http://127.0.0.1:PORT/`. `stop()` sends SIGTERM and waits.
 * `config` is TOML added to the test configuration (e.g. an `[auth]` table); `listen` the address
 * (a restarted daemon takes its predecessor's port). Recordings go to the temp dir unless
 * `config` has a `[recording]` table; its state directory (tokens, audit trail) always does.
 */
export async function startDaemon({ config = '', listen = '127.0.0.1:0' } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'ptyhub-browser-'));
  const configPath = join(dir, 'ptyhub.toml');
  // Recordings go to the temp dir (removed by stop()), not the user's state directory, unless
  // the test says where.
  const recording = config.includes('[recording]') ? '' : `\n[recording]\ndir = ${JSON.stringify(join(dir, 'recordings'))}\n`;
  writeFileSync(configPath, CONFIG + config + recording);
  const child = spawn(BINARY, ['--listen', listen, '--config', configPath, '--token', TOKEN], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its state (API tokens, the audit trail) in the temp dir too: never the user's, and every
    // run starts from none.
    env: {
      ...withoutToken(process.env),
      XDG_STATE_HOME: join(dir, 'state'),
      STATE_DIRECTORY: '',
      RUST_LOG: process.env.RUST_LOG || 'ptyhub=info',
    },
  });
  const log = [];
  child.stderr.on('data', (d) => {
    log.push(d.toString());
    if (log.length > 2000) log.shift();
  });
  const exited = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error(`ptyhub did not start in time:\n${log.join('')}`)), WAIT);
    lines.once('line', (line) => {
      clearTimeout(timer);
      // https:// with [tls]; the base path before the last / with [server] base_path.
      const m = /^ptyhub listening on (https?:\/\/127\.0\.0\.1:\d+\/(?:[\w.~-]+\/)*)$/.exec(line);
      if (m) resolveUrl(m[1]);
      else reject(new Error(`unexpected first line from ptyhub: ${line}`));
    });
    exited.then(({ code, signal }) => reject(new Error(`ptyhub exited (${code ?? signal}) at start:\n${log.join('')}`)));
  });
  lines.on('line', () => {}); // keep draining stdout
  let stopped = null;
  return {
    url,
    dir,
    log,
    pid: child.pid,
    /** SIGTERM, then SIGKILL if it is still there after 15 s; removes the temp dir. Idempotent. */
    stop() {
      if (!stopped) {
        stopped = (async () => {
          if (child.exitCode === null && child.signalCode === null) {
            child.kill('SIGTERM');
            const late = setTimeout(() => child.kill('SIGKILL'), 15000);
            const result = await exited;
            clearTimeout(late);
            stopped.result = result;
          }
          rmSync(dir, { recursive: true, force: true });
        })();
      }
      return stopped;
    },
  };
}

/** Headless Debian Chromium with the flags this machine needs; playwright makes a fresh profile dir. */
export function launchBrowser({ args = [] } = {}) {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      ...args,
    ],
  });
}

/**
 * A page in a fresh browser context, signed in as a person would be: by opening the link with
 * `?token=` that ptyhub printed (the daemon swaps it for a cookie and redirects to `/`).
 * Uncaught page errors and console errors are collected in `page.errors`.
 */
export async function newPage(browser, base, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1200, height: 760 }, ...options });
  const page = await context.newPage();
  page.touch = Boolean(options.hasTouch);
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error') page.errors.push(`console: ${m.text()}`);
  });
  if (base) {
    await page.goto(`${base}?token=${TOKEN}`);
    if (new URL(page.url()).search !== '') throw new Error(`the token was not swapped for a cookie: ${page.url()}`);
  }
  return page;
}

export function newId() {
  return randomUUID();
}

/** The active xterm buffer as text (see window.ptyhub.text in terminal.js). */
export function screenText(page) {
  return page.evaluate(() => window.ptyhub.text());
}

/** Waits until the terminal shows `pattern` (string or RegExp); the last screen is in the error. */
export async function waitForScreen(page, pattern, timeout = WAIT) {
  const source = pattern instanceof RegExp ? pattern.source : null;
  const flags = pattern instanceof RegExp ? pattern.flags : '';
  try {
    await page.waitForFunction(
      ([text, src, fl]) => {
        if (!window.ptyhub?.term) return false;
        const screen = window.ptyhub.text();
        return src !== null ? new RegExp(src, fl).test(screen) : screen.includes(text);
      },
      [pattern instanceof RegExp ? null : pattern, source, flags],
      { timeout, polling: 100 },
    );
  } catch (e) {
    const screen = await screenText(page).catch(() => '(unreadable)');
    throw new Error(`terminal never showed ${pattern}; it shows:\n${screen}\n(${e.message.split('\n')[0]})`);
  }
}

/** Opens the terminal page of `id` (creating the session with `assistant` if given) and waits until it is live. */
export async function openSession(page, base, id, assistant, extra = {}) {
  const q = new URLSearchParams(assistant ? { assistant, ...extra } : extra).toString();
  await page.goto(`${base}session/${id}${q ? `?${q}` : ''}`);
  await page.waitForFunction(() => window.ptyhub?.state?.ready === true, null, { timeout: WAIT });
}

/** Polls `fn` until it returns a truthy value (or throws the last failure). */
export async function eventually(fn, { timeout = WAIT, every = 100, what = 'condition' } = {}) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

/** Where the screenshots the README shows are kept (committed, so each run refreshes them). */
export const README_SHOTS = join(ROOT, 'tests', 'screenshots');

/** Saves a full-page screenshot as tests/artifacts/browser/NAME.png; with `readme`, also as tests/screenshots/NAME.png. */
export async function shot(page, name, { readme = false } = {}) {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
  if (readme) {
    mkdirSync(README_SHOTS, { recursive: true });
    await page.screenshot({ path: join(README_SHOTS, `${name}.png`) });
  }
}

/** Types into the focused terminal like a person (xterm turns Enter into CR). */
export async function typeInTerminal(page, text) {
  await page.locator('.xterm-helper-textarea').focus();
  await page.keyboard.type(text);
}

/** Waits until the terminal has the size that fills its window (after a layout change, the session's resize comes back). */
export async function settled(page) {
  await page.waitForFunction(
    () => {
      const want = window.ptyhub.wantedSize();
      const t = window.ptyhub.term;
      return want && t.cols === want.cols && t.rows === want.rows;
    },
    null,
    { timeout: WAIT },
  );
}

/**
 * The screen sizes every UI item is tried at: a desktop window, and a phone (touch, scale 1:
 * headless Chromium's software GL leaves xterm's WebGL canvas out of screenshots at other
 * scales) held upright and sideways.
 */
export const SIZES = {
  desktop: { viewport: { width: 1200, height: 760 } },
  portrait: { viewport: { width: 375, height: 667 }, isMobile: true, hasTouch: true, deviceScaleFactor: 1 },
  landscape: { viewport: { width: 667, height: 375 }, isMobile: true, hasTouch: true, deviceScaleFactor: 1 },
};

/** Clicks like the device would: a tap on a touch screen, a click elsewhere. */
export async function press(page, selector) {
  const target = page.locator(selector).first();
  if (page.touch) await target.tap();
  else await target.click();
}

/** The daemon token as a Bearer header, for REST calls made by the test itself. */
export const AUTH = { authorization: `Bearer ${TOKEN}` };

/** A REST call to the test daemon with its token; resolves to the parsed JSON (null for 204). */
/**
 * A guest's page: a browser with no token that opens session `id` with a new share link of
 * `role`, having chosen the display name `name` before (so it is not asked again); ready.
 */
export async function guestPage(browser, daemon, id, name, options = {}, role = 'writer') {
  const share = await rest(daemon, 'POST', `api/sessions/${id}/share`, { role });
  const page = await newPage(browser, null, options);
  await page.addInitScript((n) => {
    localStorage.setItem('ptyhub.chatName', n);
    localStorage.setItem('ptyhub.guestNameAsked', '1');
  }, name);
  await page.goto(new URL(share.url, daemon.url).href);
  await page.waitForFunction(() => window.ptyhub?.state?.ready === true, null, { timeout: WAIT });
  return page;
}

/** The daemon token's user name (GET /api/me): every page opened with the token is this person, and is shown by it. */
export async function ownerName(daemon) {
  return (await rest(daemon, 'GET', 'api/me')).name;
}

export async function rest(daemon, method, path, body) {
  const res = await fetch(new URL(path, daemon.url), {
    method,
    headers: body === undefined ? AUTH : { ...AUTH, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.status === 204 ? null : res.json();
}
