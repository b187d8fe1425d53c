// Deployment in a real browser: ptyhub serving https:// itself ([tls], a certificate made now,
// Chromium with --ignore-certificate-errors), and ptyhub under /ptyhub/ behind real nginx running
// the shipped config/nginx/ptyhub.conf (only its ports and certificate paths substituted): the
// pages load from under the prefix, the terminal works over its WebSocket, an upload lands.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  ROOT,
  WAIT,
  eventually,
  launchBrowser,
  newId,
  newPage,
  openSession,
  shot,
  startDaemon,
  typeInTerminal,
  waitForScreen,
} from './helpers.js';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));

/** A self-signed certificate for 127.0.0.1 in `dir` (openssl; the Rust tests use rcgen). */
function certificate(dir) {
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1',
    '-addext', 'subjectAltName=IP:127.0.0.1',
  ], { stdio: 'ignore' });
  return { cert, key };
}

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

/** nginx with the shipped file in front of `upstream` (host:port); `stop()` ends it. */
async function startNginx(upstream, { cert, key }) {
  const dir = mkdtempSync(join(tmpdir(), 'ptyhub-nginx-'));
  const port = await freePort();
  const site = readFileSync(join(ROOT, 'config', 'nginx', 'ptyhub.conf'), 'utf8')
    .replace('server 127.0.0.1:1977;', `server ${upstream};`)
    .replace('listen 443 ssl;', `listen 127.0.0.1:${port} ssl;`)
    .replace('listen [::]:443 ssl;\n', '')
    .replace('/etc/letsencrypt/live/dev.example.com/fullchain.pem', cert)
    .replace('/etc/letsencrypt/live/dev.example.com/privkey.pem', key);
  assert.ok(site.includes(`server ${upstream};`) && site.includes(`:${port} ssl;`), 'the shipped file changed shape');
  writeFileSync(join(dir, 'ptyhub.conf'), site);
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
  include ${dir}/ptyhub.conf;
}
`,
  );
  const child = spawn(NGINX, ['-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: 'ignore' });
  const exited = new Promise((r) => child.once('exit', r));
  await eventually(
    async () => {
      if (child.exitCode !== null) throw new Error(`nginx exited: ${readFileSync(join(dir, 'error.log'), 'utf8')}`);
      return fetch(`http://127.0.0.1:${port}/`).then(
        () => true, // an HTTP request to a TLS port: answered (400), so nginx listens
        () => false,
      );
    },
    { what: 'nginx to listen' },
  );
  return {
    url: `https://127.0.0.1:${port}/ptyhub/`,
    async stop() {
      child.kill('SIGTERM'); // fast: open WebSockets would hold a graceful quit
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

describe('deployment', () => {
  let browser;
  let certDir;
  let pem;
  before(async () => {
    browser = await launchBrowser({ args: ['--ignore-certificate-errors'] });
    certDir = mkdtempSync(join(tmpdir(), 'ptyhub-cert-'));
    pem = certificate(certDir);
  });
  after(async () => {
    await browser?.close();
    if (certDir) rmSync(certDir, { recursive: true, force: true });
  });

  it('ptyhub with [tls] serves the UI and the terminal over https:// and wss://', async () => {
    const daemon = await startDaemon({ config: `[tls]\ncert = ${JSON.stringify(pem.cert)}\nkey = ${JSON.stringify(pem.key)}\n` });
    try {
      assert.match(daemon.url, /^https:\/\//);
      const page = await newPage(browser, daemon.url);
      const cookies = await page.context().cookies();
      assert.ok(cookies.some((c) => c.secure), 'the token cookie is Secure over https');
      const id = newId();
      await openSession(page, daemon.url, id, 'shell');
      await waitForScreen(page, '$ ');
      await typeInTerminal(page, 'echo tls-$((6*7))\n');
      await waitForScreen(page, 'tls-42');
      assert.deepEqual(page.errors, []);
    } finally {
      await daemon.stop();
    }
  });

  it('under /ptyhub/ behind nginx: home page, terminal, WebSocket and upload', async (t) => {
    if (!NGINX) {
      t.skip('nginx is not installed (tests/run installs Debian\'s nginx package)');
      return;
    }
    const daemon = await startDaemon({ config: '[server]\nbase_path = "/ptyhub"\n[proxy]\ntrusted = ["127.0.0.1/32"]\n' });
    const upstream = new URL(daemon.url).host;
    const nginx = await startNginx(upstream, pem);
    try {
      const page = await newPage(browser, nginx.url);
      assert.equal(new URL(page.url()).pathname, '/ptyhub/');
      // The home page's own requests (its list of sessions, its assistants) went under the prefix.
      await page.locator('#new-session, form').first().waitFor({ timeout: WAIT });
      const id = newId();
      const sockets = [];
      page.on('websocket', (ws) => sockets.push(ws.url()));
      await openSession(page, nginx.url, id, 'shell');
      await waitForScreen(page, '$ ');
      assert.ok(sockets.some((u) => u.startsWith(`wss://${new URL(nginx.url).host}/ptyhub/ws/${id}`)), sockets.join('\n'));
      await typeInTerminal(page, 'echo via-$((6*7))-nginx\n');
      await waitForScreen(page, 'via-42-nginx');
      // Links the page builds stay under the prefix.
      assert.equal(await page.locator('#home-link').getAttribute('href'), '/ptyhub/');
      assert.match(await page.locator('#replay-link').getAttribute('href'), /^\/ptyhub\/replay\//);
      // An upload through nginx.
      const bytes = Buffer.alloc(256 * 1024, 7);
      await page.locator('#file-input').setInputFiles({ name: 'via-nginx.bin', mimeType: 'application/octet-stream', buffer: bytes });
      await page.locator('.toast-ok', { hasText: 'Uploaded via-nginx.bin' }).waitFor({ timeout: WAIT });
      const workDir = await page.evaluate(() => window.ptyhub.state.status.workDir);
      assert.deepEqual(readFileSync(join(workDir, '.ptyhub', 'uploads', 'via-nginx.bin')), bytes);
      await shot(page, 'behind-nginx');
      assert.deepEqual(page.errors, []);
    } finally {
      await nginx.stop();
      await daemon.stop();
    }
  });
});
