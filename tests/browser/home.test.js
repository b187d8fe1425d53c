// The home page in a real browser: empty state, the new-session form, the live list, ending sessions, errors; the list marked stale while ptyhub is away, the recordings of ended sessions.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  SIZES,
  TOKEN,
  WAIT,
  eventually,
  launchBrowser,
  newId,
  newPage,
  openSession,
  press,
  rest,
  shot,
  startDaemon,
  typeInTerminal,
  waitForScreen,
} from './helpers.js';

describe('home page', () => {
  let daemon;
  let browser;

  before(async () => {
    daemon = await startDaemon();
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await daemon?.stop();
  });

  const sessions = (page) => page.evaluate(() => fetch('/api/sessions').then((r) => r.json()));

  it('lists, creates and ends sessions', async () => {
    const home = await newPage(browser, daemon.url);
    // Empty state, and the assistants from the API (an unavailable one disabled, with its reason).
    await home.locator('#empty').waitFor({ state: 'visible', timeout: WAIT });
    assert.match(await home.locator('#empty').textContent(), /Start session/);
    await home.locator('#assistant option[value=shell]').waitFor({ state: 'attached', timeout: WAIT });
    assert.equal(await home.locator('#assistant option[value=missing]').isDisabled(), true);
    assert.match(await home.locator('#assistant-note summary').textContent(), /Not available on this machine: .*Missing/);
    assert.match(await home.locator('#assistant-note').textContent(), /Missing: program `ptyhub-test-no-such-program` not found/);
    await shot(home, 'home-empty');

    // A bad working directory is refused with the server's reason, in the form.
    await home.selectOption('#assistant', 'shell');
    await home.fill('#new-cwd', '/no/such/dir');
    await home.click('#new-submit');
    await home.locator('#new-error').waitFor({ state: 'visible', timeout: WAIT });
    assert.match(await home.locator('#new-error').textContent(), /not started: .*\/no\/such\/dir/);
    await shot(home, 'home-form-error');

    // Create: the browser goes to the new session's terminal.
    await home.fill('#new-cwd', '');
    await home.fill('#new-name', 'from-home');
    await home.click('#new-submit');
    await home.waitForURL(/\/session\/[0-9a-f-]{36}$/, { timeout: WAIT });
    await home.waitForFunction(() => window.ptyhub?.state?.ready, null, { timeout: WAIT });
    await waitForScreen(home, /^\$ $/m);
    assert.equal(await home.locator('#name .name-text').textContent(), 'from-home');

    // A second session made elsewhere appears without a reload, with its details.
    const other = await newPage(browser, daemon.url);
    const otherId = newId();
    await openSession(other, daemon.url, otherId, 'agent');
    await home.goto(daemon.url);
    const row = home.locator(`.session[data-id="${otherId}"]`);
    await row.waitFor({ timeout: WAIT });
    assert.match(await row.textContent(), /Agent/);
    assert.match(await row.locator('.session-viewers').textContent(), /1 viewer/);
    assert.match(await row.locator('.session-state').textContent(), /running/);
    assert.match(await row.locator('.session-size').textContent(), /^\d+×\d+$/);
    await home.locator('.session', { hasText: 'from-home' }).waitFor({ timeout: WAIT });
    await typeInTerminal(other, 'typed\n');
    await other.close();
    await home.locator(`.session[data-id="${otherId}"] .session-viewers`, { hasText: '0 viewers' }).waitFor({ timeout: WAIT });
    await shot(home, 'home-list');

    // Open goes to the session's page.
    await home.locator('.session', { hasText: 'from-home' }).locator('.open-btn').click();
    await home.waitForFunction(() => window.ptyhub?.state?.ready, null, { timeout: WAIT });
    await home.goBack();

    // End asks for a second click, then the session is gone.
    const end = home.locator(`.session[data-id="${otherId}"] .end-btn`);
    await end.click();
    assert.match(await end.textContent(), /again/);
    await end.click();
    await home.locator(`.session[data-id="${otherId}"]`).waitFor({ state: 'detached', timeout: WAIT });
    assert.equal((await sessions(home)).some((s) => s.id === otherId), false);
    // The refused POST (bad directory) is the only error the browser logged.
    assert.deepEqual(home.errors, ['console: Failed to load resource: the server responded with a status of 404 (Not Found)']);
  });

  it('ending a session from the home page shows the session-ended dialog in its open page', async () => {
    const term = await newPage(browser, daemon.url);
    const id = newId();
    await openSession(term, daemon.url, id, 'shell', { name: 'to-end' });
    const home = await newPage(browser, daemon.url);
    const end = home.locator(`.session[data-id="${id}"] .end-btn`);
    await end.click();
    await end.click();
    await term.locator('#exit-dialog[open]').waitFor({ timeout: WAIT });
    // The program's exit (by hang-up) can come a moment before the session's end: wait for the latter's words.
    await term.locator('#exit-dialog', { hasText: 'This session was ended' }).waitFor({ state: 'visible', timeout: WAIT });
    assert.equal(await term.locator('#conn').getAttribute('data-state'), 'ended');
    await shot(term, 'session-ended-dialog');
    await home.locator(`.session[data-id="${id}"]`).waitFor({ state: 'detached', timeout: WAIT });
    // No reconnect after the end.
    await term.waitForFunction(() => window.ptyhub.conn.state === 'stopped', null, { timeout: WAIT });
    await term.locator('#exit-home').click();
    await term.waitForURL(daemon.url, { timeout: WAIT });
  });

  it('keeps query parameters it does not know in its links', async () => {
    const home = await newPage(browser, daemon.url);
    const id = newId();
    await openSession(home, daemon.url, id, 'shell');
    await home.goto(`${daemon.url}?proxy_hint=abc`);
    const link = home.locator(`.session[data-id="${id}"] .open-btn`);
    await link.waitFor({ timeout: WAIT });
    assert.equal(await link.getAttribute('href'), `/session/${id}?proxy_hint=abc`);
    await link.click();
    await home.waitForFunction(() => window.ptyhub?.state?.ready, null, { timeout: WAIT });
    assert.equal(new URL(home.url()).search, '?proxy_hint=abc');
    assert.equal(await home.locator('#home-link').getAttribute('href'), '/?proxy_hint=abc');
    await home.evaluate((sid) => fetch(`/api/sessions/${sid}`, { method: 'DELETE' }), id);
  });

  it('fits a phone and follows a dark system theme', async () => {
    const home = await newPage(browser, daemon.url);
    await home.evaluate(() =>
      fetch('/api/sessions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ assistant: 'agent', name: 'phone-list' }) }),
    );
    await home.emulateMedia({ colorScheme: 'dark' });
    await home.locator('.session', { hasText: 'phone-list' }).waitFor({ timeout: WAIT });
    assert.equal(await home.evaluate(() => getComputedStyle(document.body).backgroundColor), 'rgb(13, 17, 23)');
    await shot(home, 'home-dark');
    await home.setViewportSize({ width: 375, height: 667 });
    const width = await home.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= 375, `no sideways scrolling (${width})`);
    await shot(home, 'home-mobile-dark');
  });

  it('says so in words when the API refuses it (not authorised)', async () => {
    const home = await newPage(browser, daemon.url);
    await home.locator('#assistant option[value=shell]').waitFor({ state: 'attached', timeout: WAIT });
    // The cookie goes away (ptyhub restarted with a new token, say): the next refresh is refused.
    await home.context().clearCookies();
    await home.evaluate(() => window.ptyhub.refresh());
    await home.locator('#page-error').waitFor({ state: 'visible', timeout: WAIT });
    assert.match(await home.locator('#page-error').textContent(), /Not authorised: open the link with the token that ptyhub printed/);
    assert.doesNotMatch(await home.locator('body').innerText(), /[{}]/);
    await shot(home, 'home-unauthorised');
    // And a terminal page whose WebSocket is refused says the same.
    await home.goto(`${daemon.url}?token=${TOKEN}`);
    const id = newId();
    await openSession(home, daemon.url, id, 'shell');
    await home.context().clearCookies();
    await home.evaluate(() => window.ptyhub.conn.ws.close());
    await home.locator('#fatal', { hasText: 'Not authorised' }).waitFor({ timeout: WAIT });
    await eventually(async () => (await home.evaluate(() => window.ptyhub.conn.state)) === 'stopped', { what: 'no more retries' });
  });
});

describe('home page while ptyhub restarts', () => {
  it('marks its list stale while ptyhub cannot be reached, is current again within seconds of its return, and lists the recordings of sessions that ended', async () => {
    const recordings = mkdtempSync(join(tmpdir(), 'ptyhub-recordings-'));
    const config = `[recording]\ndir = ${JSON.stringify(recordings)}\n`;
    const first = await startDaemon({ config });
    const browser = await launchBrowser();
    let second = null;
    try {
      const { id } = await rest(first, 'POST', 'api/sessions', { assistant: 'shell', name: 'before-restart' });
      // An exited session stays listed until reaped: no Share or Embed for it, its replay kept.
      const { id: done } = await rest(first, 'POST', 'api/sessions', { cmd: ['true'], name: 'exited-early' });
      const homes = {};
      for (const [size, options] of Object.entries(SIZES)) {
        const home = await newPage(browser, first.url, options);
        await home.locator(`.session[data-id="${id}"] .state-text`, { hasText: 'running' }).waitFor({ timeout: WAIT });
        const row = home.locator(`.session[data-id="${done}"]`);
        await row.locator('.end-btn', { hasText: 'Remove' }).waitFor({ timeout: WAIT });
        assert.equal(await row.locator('.share-btn').isHidden(), true, 'no Share for an ended session');
        assert.equal(await row.locator('.embed-btn').isHidden(), true, 'no Embed for an ended session');
        assert.equal(await row.locator('.replay-btn').isVisible(), true);
        assert.equal(await home.locator(`.session[data-id="${id}"] .share-btn`).isVisible(), true);
        homes[size] = home;
      }
      await first.stop();
      for (const [size, home] of Object.entries(homes)) {
        await home.locator('#stale-note').waitFor({ state: 'visible', timeout: WAIT });
        assert.match(await home.locator('#stale-note').textContent(), /ptyhub cannot be reached: these are the sessions as it was at .*, and may have changed since/);
        const state = home.locator(`.session[data-id="${id}"] .state-text`);
        assert.equal(await state.textContent(), 'last seen running', 'not shown as running');
        await home.locator('#stale-note').scrollIntoViewIfNeeded();
        await shot(home, `home-stale-${size}`);
      }
      const port = new URL(first.url).port;
      second = await startDaemon({ listen: `127.0.0.1:${port}`, config });
      const back = Date.now();
      await Promise.all(Object.values(homes).map((home) => home.locator('#stale-note').waitFor({ state: 'hidden', timeout: WAIT })));
      assert.ok(Date.now() - back < 5000, `current again within seconds (${Date.now() - back} ms)`);
      for (const [size, home] of Object.entries(homes)) {
        await home.locator(`.session[data-id="${id}"]`).waitFor({ state: 'detached', timeout: WAIT });
        // The sessions that did not survive are reachable by their recordings.
        const section = home.locator('#ended-recordings');
        await section.waitFor({ state: 'visible', timeout: WAIT });
        await press(home, '#ended-recordings summary');
        const rec = home.locator(`#ended-recordings .recording[data-id="${id}"]`);
        await rec.waitFor({ state: 'visible', timeout: WAIT });
        assert.match(await rec.textContent(), /before-restart/);
        assert.equal(await home.locator(`#ended-recordings .recording[data-id="${done}"]`).count(), 1);
        await rec.scrollIntoViewIfNeeded();
        await shot(home, `home-ended-recordings-${size}`);
        assert.equal(await home.evaluate(() => document.documentElement.scrollWidth <= innerWidth), true, 'no sideways scrolling');
        if (size === 'desktop') {
          await rec.locator('.replay-btn').click();
          await home.waitForURL(new RegExp(`/replay/${id}$`), { timeout: WAIT });
          await home.locator('#title', { hasText: 'before-restart' }).waitFor({ timeout: WAIT });
          const cast = await home.evaluate((sid) => fetch(`api/sessions/${sid}/recording`).then((r) => r.status), id);
          assert.equal(cast, 200, 'the Download link works for a session that is gone');
        }
        assert.deepEqual(home.errors.filter((e) => !/ERR_|net::|Failed to load resource/.test(e)), []);
        await home.context().close();
      }
    } finally {
      await browser.close();
      await second?.stop();
      await first.stop();
      rmSync(recordings, { recursive: true, force: true });
    }
  });
});
