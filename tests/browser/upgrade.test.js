// A live upgrade (SIGUSR2) seen from the terminal page: told 1012, it reconnects at once (no backoff) to the same screen, and typing goes on.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { TOKEN, WAIT, eventually, launchBrowser, newId, newPage, openSession, screenText, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

async function upgrades(url) {
  const r = await fetch(new URL('api/version', url), { headers: { authorization: `Bearer ${TOKEN}` } });
  return (await r.json()).upgrades;
}

describe('live upgrade', () => {
  let daemon;
  let browser;

  before(async () => {
    daemon = await startDaemon();
    browser = await launchBrowser();
  });

  after(async () => {
    await daemon?.stop();
    await browser?.close();
  });

  it('the page reconnects at once to the same screen, and typing goes on', async () => {
    const p = await newPage(browser, daemon.url);
    await openSession(p, daemon.url, newId(), 'shell');
    await typeInTerminal(p, 'echo before-$((6*7))\n');
    await waitForScreen(p, /^before-42$/m);
    await p.evaluate(() => {
      window.waits = [];
      window.closes = [];
      const on = window.ptyhub.conn.on;
      const report = on.state;
      on.state = (s) => {
        if (s.state === 'waiting') window.waits.push(s.retryAt - Date.now());
        report(s);
      };
      const close = on.close;
      on.close = (c) => {
        window.closes.push(c.code);
        return close(c);
      };
    });
    process.kill(daemon.pid, 'SIGUSR2');
    await eventually(async () => (await upgrades(daemon.url)) === 1, { what: 'the upgrade' });
    await p.waitForFunction(() => window.closes.length > 0 && window.ptyhub.state.ready && window.ptyhub.conn.state === 'open', null, { timeout: WAIT });
    const { waits, closes } = await p.evaluate(() => ({ waits: window.waits, closes: window.closes }));
    assert.deepEqual(closes, [1012], 'told the daemon restarts');
    assert.ok(waits.every((w) => w <= 100), `reconnected at once, not after a backoff (waits: ${waits})`);
    await waitForScreen(p, /^before-42$/m);
    const lines = (await screenText(p)).split('\n').filter((l) => l === 'before-42');
    assert.equal(lines.length, 1, 'the screen is restored once');
    await typeInTerminal(p, 'echo after-$((7*7))\n');
    await waitForScreen(p, /^after-49$/m);
    await shot(p, 'after-upgrade');
    assert.deepEqual(p.errors.filter((e) => !/WebSocket|ERR_|net::/.test(e)), []);
  });
});
