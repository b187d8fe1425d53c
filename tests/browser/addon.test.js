// ptyhub's own xterm.js addon (static/addon/ptyhub.js) in Chromium: the raw dialect's checks,
// its states and backoff, the end of a session, and the home page's embed snippet as a page.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { TOKEN, WAIT, eventually, newId, newPage, shot } from './helpers.js';
import { bufferText, count, createShell, exitsWithItsCode, hostPage, listed, resizes, startRig, survivesADrop, typesAndSees, waitForBuffer } from './compat.js';

/** Chromium reports every refused WebSocket on the console; those are the point of these tests. */
const unexpected = (errors) => errors.filter((e) => !/WebSocket connection to .* failed/.test(e));

/** A page of the site with a terminal and the addon, its state changes in `window.states`. */
async function addonPage(browser, site, proxy, options) {
  const page = await newPage(browser);
  await hostPage(
    page,
    site,
    proxy.url,
    'addon',
    `import { PtyhubAddon } from '${proxy.url}addon/ptyhub.js';
window.states = [];
window.addon = new PtyhubAddon({ base: BASE, ...${JSON.stringify(options)} });
window.term.loadAddon(window.addon);
window.addon.onStateChange((state, error, detail) => window.states.push({ state, error: error ? error.message : null, detail: detail || null }));`,
  );
  return page;
}

/** Waits until the addon has gone through `wanted` (in order) since state change number `from`. */
async function reaches(page, from, ...wanted) {
  await page.waitForFunction(
    ([from, wanted]) => {
      let i = 0;
      for (const s of window.states.slice(from)) if (s.state === wanted[i]) i += 1;
      return i === wanted.length;
    },
    [from, wanted],
    { timeout: WAIT, polling: 50 },
  ).catch(async (e) => {
    const seen = await page.evaluate(() => window.states).catch(() => '(unreadable)');
    throw new Error(`never went through ${wanted.join(', ')}: ${JSON.stringify(seen)} ${page.errors.join('; ')} (${e.message.split('\n')[0]})`);
  });
}

const states = (page) => page.evaluate(() => window.states);

describe('the ptyhub addon', () => {
  let rig;
  before(async () => {
    rig = await startRig();
  });

  after(() => rig?.stop());

  it('types, resizes, comes back from a dropped connection with one screen, backs off, and exits with the code', async () => {
    const { daemon, browser, proxy, site } = rig;
    const { id } = await createShell(daemon);
    const page = await addonPage(browser, site, proxy, { token: TOKEN, minDelayMs: 200, maxDelayMs: 1600 });
    await page.evaluate((id) => window.addon.connect(id), id);
    await reaches(page, 0, 'connecting', 'open');
    await typesAndSees(page);
    await resizes(page, daemon, id);

    // A dropped connection: reconnecting, then open with the screen restored once.
    let from = (await states(page)).length;
    await survivesADrop(page, proxy, () => reaches(page, from, 'reconnecting', 'open'));
    const back = (await states(page)).slice(from);
    assert.equal(back[0].state, 'reconnecting');
    assert.match(back[0].error, /connection lost \(code 1006\)/);
    assert.equal(back[0].detail.attempt, 1);

    // ptyhub unreachable: each retry waits about twice as long (half fixed, half jitter), up to
    // the cap; the first success starts the count over.
    proxy.refuse(true);
    from = (await states(page)).length;
    assert.equal(proxy.drop(/^\/ws\//), 1);
    await page.waitForFunction((from) => window.states.slice(from).filter((s) => s.state === 'reconnecting').length >= 5, from, {
      timeout: WAIT,
      polling: 50,
    });
    const retries = (await states(page)).slice(from).filter((s) => s.state === 'reconnecting');
    for (const [i, r] of retries.slice(0, 5).entries()) {
      const cap = Math.min(1600, 200 * 2 ** i);
      assert.equal(r.detail.attempt, i + 1);
      assert.ok(r.detail.delayMs >= cap / 2 && r.detail.delayMs <= cap, `retry ${i + 1} waits ${r.detail.delayMs} ms, within [${cap / 2}, ${cap}]`);
    }
    assert.ok(!(await states(page)).slice(from).some((s) => s.state === 'open'), 'nothing opened while refused');
    proxy.refuse(false);
    await reaches(page, from, 'reconnecting', 'open');
    from = (await states(page)).length;
    assert.equal(proxy.drop(/^\/ws\//), 1);
    await reaches(page, from, 'reconnecting', 'open');
    assert.equal((await states(page))[from].detail.attempt, 1, 'a success resets the backoff');
    const screen = await bufferText(page);
    assert.equal(count(screen, 'hi-42'), 1, screen);
    assert.equal(count(screen, 'again-2'), 1, screen);
    await shot(page, 'addon-reconnected');

    await exitsWithItsCode(page, daemon, id, () => window.addon.state === 'exited' && window.addon.exitCode);
    assert.equal(await page.evaluate(() => window.addon.exitSignal), null);

    // Ending the session closes the socket with 4003: closed, with the reason, and no retry.
    from = (await states(page)).length;
    const res = await fetch(new URL(`api/sessions/${id}`, daemon.url), { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(res.status, 204);
    await reaches(page, from, 'closed');
    assert.deepEqual((await states(page)).slice(from), [{ state: 'closed', error: 'the session was ended', detail: null }]);
    assert.deepEqual(unexpected(page.errors), []);
  });

  it('a session that does not exist is closed, not retried; disconnect() stops for good', async () => {
    const { daemon, browser, proxy, site } = rig;
    const page = await addonPage(browser, site, proxy, { token: TOKEN, minDelayMs: 200 });
    await page.evaluate((id) => window.addon.connect(id), newId());
    await reaches(page, 0, 'connecting', 'closed');
    assert.deepEqual(await states(page), [
      { state: 'connecting', error: null, detail: null },
      { state: 'closed', error: 'no such session: Session not found', detail: null },
    ]);

    // By number, and then disconnect(): closed without an error, the socket is gone.
    const { id, num } = await createShell(daemon);
    await page.evaluate((num) => window.addon.connect(num), num);
    await reaches(page, 2, 'connecting', 'open');
    await waitForBuffer(page, /\$ /);
    await page.evaluate(() => window.addon.disconnect());
    const last = (await states(page)).at(-1);
    assert.deepEqual(last, { state: 'closed', error: null, detail: null });
    // The daemon sees the viewer go: the session lists no viewers.
    await eventually(async () => (await listed(daemon, id)).viewers === 0, { what: 'no viewers left' });
    assert.equal((await states(page)).at(-1).state, 'closed');
    assert.deepEqual(unexpected(page.errors), []);
  });

  it('the home page embed snippet, pasted into a page of another site, shows the session and types into it', async () => {
    const { daemon, browser, proxy, site } = rig;
    // The addon is served as a JavaScript module, importable from any origin.
    const served = await fetch(new URL('addon/ptyhub.js', daemon.url));
    assert.equal(served.status, 200);
    assert.match(served.headers.get('content-type'), /^(text|application)\/javascript/);
    assert.equal(served.headers.get('access-control-allow-origin'), '*');

    const created = await fetch(new URL('api/sessions', daemon.url), {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ assistant: 'shell', name: 'embedded' }),
    });
    const { id } = await created.json();
    const home = await newPage(browser, daemon.url, { permissions: ['clipboard-read', 'clipboard-write'] });
    await home.locator(`.session[data-id="${id}"] .embed-btn`).click();
    await home.locator('#embed-dialog[open]').waitFor({ timeout: WAIT });
    // A snippet that types: the link is made only once the role is chosen and the button pressed.
    await home.locator('#embed-role').selectOption('writer');
    await home.locator('#embed-make').click();
    const code = home.locator('#embed-code');
    await home.waitForFunction(() => /ptyhub\.connect\(/.test(document.getElementById('embed-code').textContent), null, { timeout: WAIT });
    const snippet = await code.textContent();
    assert.match(snippet, new RegExp(`/session/${id}\\?token=`));
    assert.match(snippet, /<title>embedded<\/title>/);
    await home.locator('#embed-copy').click();
    await home.locator('#embed-copy', { hasText: 'Copied' }).waitFor({ timeout: WAIT });
    assert.equal(await home.evaluate(() => navigator.clipboard.readText()), snippet);
    await shot(home, 'home-embed');
    // Reopened, it shows the same link: no second share link for nothing.
    await home.locator('#embed-close').click();
    await home.locator(`.session[data-id="${id}"] .embed-btn`).click();
    await home.waitForFunction((s) => document.getElementById('embed-code').textContent === s, snippet, { timeout: WAIT });
    const shares = await (await fetch(new URL(`api/sessions/${id}/share`, daemon.url), { headers: { authorization: `Bearer ${TOKEN}` } })).json();
    assert.equal(shares.length, 1);
    assert.equal(shares[0].role, 'writer');
    assert.notEqual(shares[0].expiresAt, null, 'it expires (8 hours unless chosen)');
    assert.deepEqual(home.errors, []);

    // The snippet as a page of another site, as someone would paste it.
    site.pages['/embed.html'] = snippet;
    const embedded = await newPage(browser);
    await embedded.goto(`${site.origin}/embed.html`);
    await embedded.waitForFunction(() => document.title === 'open', null, { timeout: WAIT });
    const rows = embedded.locator('.xterm-rows');
    await rows.filter({ hasText: '$' }).waitFor({ timeout: WAIT });
    await embedded.locator('.xterm-helper-textarea').focus();
    await embedded.keyboard.type('echo embedded-$((3+4))\n');
    await embedded.waitForFunction(() => /^embedded-7$/m.test(document.querySelector('.xterm-rows').innerText), null, { timeout: WAIT });
    await shot(embedded, 'embed-snippet-page');
    assert.deepEqual(embedded.errors, []);
  });
});
