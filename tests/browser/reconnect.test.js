// Losing the connection: a dead socket found by the heartbeat, the daemon going away, retries (at most 2.5 s apart while the page is seen, backing off while hidden), and the screen restored once.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WAIT, launchBrowser, newId, newPage, openSession, screenText, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

describe('reconnecting', () => {
  let daemon;
  let browser;

  before(async () => {
    daemon = await startDaemon();
    browser = await launchBrowser();
  });

  after(async () => {
    if (daemon) {
      try {
        process.kill(daemon.pid, 'SIGCONT');
      } catch {
        // Already gone.
      }
      await daemon.stop();
    }
    await browser?.close();
  });

  it('a connection that stops answering is dropped after two missed pongs, then restored without duplicates', async () => {
    const p = await newPage(browser, daemon.url);
    // A fast heartbeat so the test does not wait a minute; the logic is the same.
    await p.addInitScript(() => {
      window.ptyhubTimings = { pingEveryMs: 400 };
    });
    await openSession(p, daemon.url, newId(), 'shell');
    await typeInTerminal(p, 'echo before-freeze\n');
    await waitForScreen(p, /^before-freeze$/m);
    process.kill(daemon.pid, 'SIGSTOP'); // the socket stays open, but nothing answers
    try {
      await p.waitForFunction(() => window.ptyhub.conn.state === 'waiting' || window.ptyhub.conn.state === 'connecting', null, { timeout: WAIT });
      await p.locator('#banner').waitFor({ state: 'visible', timeout: WAIT });
      assert.notEqual(await p.locator('#conn').getAttribute('data-state'), 'live');
      await p.waitForFunction(() => /Reconnecting/.test(document.getElementById('banner').textContent), null, { timeout: WAIT });
      await shot(p, 'connection-lost');
    } finally {
      process.kill(daemon.pid, 'SIGCONT');
    }
    await p.waitForFunction(() => window.ptyhub.state.ready && window.ptyhub.conn.state === 'open', null, { timeout: WAIT });
    await p.locator('#banner').waitFor({ state: 'hidden', timeout: WAIT });
    await waitForScreen(p, /^before-freeze$/m);
    const lines = (await screenText(p)).split('\n').filter((l) => l === 'before-freeze');
    assert.equal(lines.length, 1, 'the screen is restored once');
    await typeInTerminal(p, 'echo after-thaw\n');
    await waitForScreen(p, /^after-thaw$/m);
    assert.deepEqual(p.errors.filter((e) => !/WebSocket|ERR_|net::/.test(e)), []);
  });

  it('when ptyhub goes away (crashed, unreachable) the page says so and retries every few seconds while seen, less often while hidden', async () => {
    const p = await newPage(browser, daemon.url);
    await openSession(p, daemon.url, newId(), 'shell');
    await p.evaluate(() => {
      window.waits = [];
      const on = window.ptyhub.conn.on;
      const report = on.state;
      on.state = (s) => {
        if (s.state === 'waiting') window.waits.push(s.retryAt - Date.now());
        report(s);
      };
    });
    // A crash, not a shutdown: a shutdown ends the sessions first, and then there is nothing to
    // reconnect to (the page shows the exit dialog instead).
    process.kill(daemon.pid, 'SIGKILL');
    await p.waitForFunction(() => window.waits.length >= 4, null, { timeout: WAIT });
    const waits = await p.evaluate(() => window.waits);
    // 1 s, 2 s, then 2.5 s while the page is in view, each measured a moment after it was set.
    for (const [i, want] of [1000, 2000, 2500, 2500].entries()) {
      assert.ok(waits[i] > want - 400 && waits[i] <= want, `retry ${i + 1} after about ${want} ms (got ${waits.join(', ')})`);
    }
    const banner = await p.locator('#banner').textContent();
    assert.match(banner, /Reconnecting in \d+ s/);
    await shot(p, 'daemon-gone');
    // Hidden (another tab in front), it backs off further: nobody is looking.
    await p.evaluate(() => Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true }));
    const seen = await p.evaluate(() => window.waits.length);
    await p.waitForFunction((n) => window.waits.length > n, seen, { timeout: WAIT });
    const hidden = await p.evaluate((n) => window.waits[n], seen);
    assert.ok(hidden > 2500, `a longer wait while hidden (${hidden} ms)`);
  });
});
