// Single sign-on in a real browser: ptyhub behind real nginx running the shipped
// config/nginx/ptyhub-sso.conf (only its addresses and port substituted), nginx asking a stand-in
// for oauth2-proxy (served here) whether the browser's session cookie names someone, and passing
// their email in X-Forwarded-Email. Pages opened with that cookie only (no ptyhub token) work,
// and presence shows each signed-in person by name.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ROOT, WAIT, eventually, launchBrowser, newId, newPage, openSession, shot, startDaemon, waitForScreen, typeInTerminal } from './helpers.js';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
const COOKIE = 'sso_user';
const ALICE = 'alice@example.com';
const BOB = 'bob@example.com';

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** oauth2-proxy's /oauth2/auth as nginx asks it: 202 with X-Auth-Request-Email, or 401. */
async function startAuthService() {
  const server = createHttpServer((req, res) => {
    const cookie = (req.headers.cookie || '').split(';').map((c) => c.trim().split('=')).find(([k]) => k === COOKIE);
    if (cookie && cookie[1]) {
      res.writeHead(202, { 'X-Auth-Request-Email': cookie[1] });
    } else {
      res.writeHead(401);
    }
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { host: `127.0.0.1:${server.address().port}`, stop: () => new Promise((r) => server.close(r)) };
}

/** nginx with the shipped single sign-on file in front of `upstream`, asking `auth`; `stop()` ends it. */
async function startNginx(upstream, auth) {
  const dir = mkdtempSync(join(tmpdir(), 'ptyhub-sso-nginx-'));
  const port = await freePort();
  const site = readFileSync(join(ROOT, 'config', 'nginx', 'ptyhub-sso.conf'), 'utf8')
    .replace('server 127.0.0.1:1977;', `server ${upstream};`)
    .replace('server 127.0.0.1:4180;', `server ${auth};`)
    .replace('listen 80;', `listen 127.0.0.1:${port};`);
  assert.ok(
    site.includes(`server ${upstream};`) && site.includes(`server ${auth};`) && site.includes(`listen 127.0.0.1:${port};`),
    'the shipped file changed shape',
  );
  writeFileSync(join(dir, 'site.conf'), site);
  const root = process.getuid?.() === 0 ? 'user root;' : '';
  writeFileSync(
    join(dir, 'nginx.conf'),
    `${root}
worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log info;
events { worker_connections 256; }
http {
  access_log ${dir}/access.log;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  include ${dir}/site.conf;
}
`,
  );
  const child = spawn(NGINX, ['-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: 'ignore' });
  const exited = new Promise((r) => child.once('exit', r));
  await eventually(
    async () => {
      if (child.exitCode !== null) throw new Error(`nginx exited: ${readFileSync(join(dir, 'error.log'), 'utf8')}`);
      return fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.status === 401, // not signed in: nginx listens and asks the auth service
        () => false,
      );
    },
    { what: 'nginx to listen' },
  );
  return {
    url: `http://127.0.0.1:${port}/`,
    async stop() {
      child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A page whose browser is signed in (the stand-in's cookie) as `user`, with no ptyhub token. */
async function signedIn(browser, url, user) {
  const page = await newPage(browser);
  await page.context().addCookies([{ name: COOKIE, value: user, url }]);
  return page;
}

describe('single sign-on', () => {
  let browser;
  before(async () => {
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
  });

  it('through nginx auth_request, a signed-in person is named in presence', async (t) => {
    if (!NGINX) {
      t.skip('nginx is not installed (tests/run installs Debian\'s nginx package)');
      return;
    }
    const daemon = await startDaemon({
      config: `[proxy]\ntrusted = ["127.0.0.1/32"]\n[auth]\nuser_header = "X-Forwarded-Email"\n[auth.users]\n"${ALICE}" = ["admin"]\n"${BOB}" = ["view"]\n`,
    });
    const auth = await startAuthService();
    const nginx = await startNginx(new URL(daemon.url).host, auth.host);
    try {
      // Not signed in: nginx refuses the page.
      assert.equal((await fetch(nginx.url)).status, 401);

      const alice = await signedIn(browser, nginx.url, ALICE);
      const id = newId();
      await openSession(alice, nginx.url, id, 'shell');
      await waitForScreen(alice, '$ ');
      await typeInTerminal(alice, 'echo sso-$((6*7))\n');
      await waitForScreen(alice, 'sso-42');

      const bob = await signedIn(browser, nginx.url, BOB);
      await openSession(bob, nginx.url, id);
      await waitForScreen(bob, 'sso-42');

      // Each is told both verified names (presence's `user`), and shows them in the list.
      for (const page of [alice, bob]) {
        await page.waitForFunction(
          (names) => names.every((n) => window.ptyhub.presence.people.some((p) => p.user === n && p.guest === false)),
          [ALICE, BOB],
          { timeout: WAIT },
        );
      }
      for (const page of [alice, bob]) {
        for (const name of [ALICE, BOB]) {
          await page.locator('.person-name', { hasText: name }).first().waitFor({ state: 'attached', timeout: WAIT });
        }
      }
      // The list as people see it: opened from the bar's viewer count.
      await alice.locator('[aria-controls="people"]').click();
      await alice.locator('#people .person-name', { hasText: BOB }).waitFor({ timeout: WAIT });
      await shot(alice, 'sso-presence');
      assert.deepEqual(alice.errors, []);
      assert.deepEqual(bob.errors, []);
    } finally {
      await nginx.stop();
      await auth.stop();
      await daemon.stop();
    }
  });
});
