// Sizes that suit everyone, honest states and preferences: a phone that follows, taking control of the size, a daemon that stops and comes back, keys held through a YOLO restart, font size and theme kept, search, the new-output pill, DPR 2 and 3.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WAIT, launchBrowser, newId, newPage, openSession, screenText, settled, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

const READER = `
[assistants.reader]
name = "Reader"
command = ["bash", "-c", "trap 'sleep 1.5; exit 0' TERM; echo old-up; while read -r l; do echo old-got:$l; done"]
yolo = ["bash", "-c", "echo new-up; while read -r l; do echo new-got:$l; done"]
`;

const PHONE = { viewport: { width: 375, height: 667 }, isMobile: true, hasTouch: true, deviceScaleFactor: 1 };

/** The terminal's size as the page shows it. */
const termSize = (p) => p.evaluate(() => ({ cols: window.ptyhub.term.cols, rows: window.ptyhub.term.rows }));

describe('sizes, states and preferences', () => {
  let daemon;
  let browser;

  before(async () => {
    daemon = await startDaemon({ config: READER });
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await daemon?.stop();
  });

  it('a phone follows the desktop size and scales to fit; a writer can take control of the size', async () => {
    const id = newId();
    const desk = await newPage(browser, daemon.url);
    await openSession(desk, daemon.url, id, 'shell');
    await waitForScreen(desk, /^\$ $/m);
    await settled(desk);
    const deskSize = await termSize(desk);

    const phone = await newPage(browser, daemon.url, PHONE);
    await openSession(phone, daemon.url, id);
    await waitForScreen(phone, /^\$ $/m);
    await typeInTerminal(phone, 'echo from-the-phone\n');
    await waitForScreen(desk, /^from-the-phone$/m);
    assert.equal(await phone.evaluate(() => window.ptyhub.size.mode), 'follow');
    assert.deepEqual(await termSize(desk), deskSize, 'the phone did not shrink the desktop');
    assert.deepEqual(await termSize(phone), deskSize, 'the phone shows the session at its size');
    // Scaled to fit the phone's width, the whole screen in view.
    await phone.locator('#size-hint', { hasText: 'Scaled to fit' }).waitFor({ timeout: WAIT });
    const fits = await phone.evaluate(() => {
      const host = document.getElementById('terminal').getBoundingClientRect();
      const screen = window.ptyhub.term.element.getBoundingClientRect();
      return { scale: window.ptyhub.size.scale, right: screen.right, hostRight: host.right + 1 };
    });
    assert.ok(fits.scale < 1, `scaled (${fits.scale})`);
    assert.ok(fits.right <= fits.hostRight, `not cropped (${fits.right} ≤ ${fits.hostRight})`);
    await shot(phone, 'phone-follows-scaled');

    // The phone asks to size the session after all: everyone gets its size.
    await phone.locator('#size-hint .size-hint-action', { hasText: 'Size it to my window' }).tap();
    await desk.waitForFunction((w) => window.ptyhub.term.cols < w, deskSize.cols, { timeout: WAIT });
    await desk.locator('#size-hint', { hasText: "another viewer's window is smaller" }).waitFor({ timeout: WAIT });
    await shot(desk, 'desktop-take-control-offer');
    // The desktop takes control: its size again, and the phone follows (scaled).
    await desk.locator('#size-hint .size-hint-action', { hasText: 'Take control of the size' }).click();
    await desk.waitForFunction((w) => window.ptyhub.term.cols === w, deskSize.cols, { timeout: WAIT });
    await phone.waitForFunction((w) => window.ptyhub.term.cols === w, deskSize.cols, { timeout: WAIT });
    await phone.locator('#size-hint', { hasText: 'Someone took control' }).waitFor({ timeout: WAIT });
    await shot(phone, 'phone-after-take-control');
    // Back to following from the preferences panel.
    await phone.locator('#prefs-toggle').tap();
    await phone.locator('#prefs input[value="follow"]').check();
    await shot(phone, 'phone-prefs');
    assert.deepEqual(desk.errors, []);
    assert.deepEqual(phone.errors, []);
    await desk.context().close();
    await phone.context().close();
  });

  it('presence: names, roles and devices in the viewer list, "is typing" on the other page, names and an activity dot on the home page', async () => {
    const id = newId();
    const alice = await newPage(browser, daemon.url);
    await openSession(alice, daemon.url, id, 'shell');
    await waitForScreen(alice, /^\$ $/m);
    await alice.click('#chat-toggle');
    await alice.locator('.chat-name').fill('Alice');
    await alice.locator('.chat-text').fill('hello');
    await alice.keyboard.press('Enter');
    await alice.click('.chat-close');
    const phone = await newPage(browser, daemon.url, PHONE);
    await openSession(phone, daemon.url, id);
    // The phone sees Alice by name, itself as "viewer 2" on a phone.
    await phone.waitForFunction(() => window.ptyhub.presence.people.length === 2, null, { timeout: WAIT });
    const people = await phone.evaluate(() => window.ptyhub.presence.people);
    assert.deepEqual(
      people.map((p) => [p.name, p.role, p.device, p.you]),
      [['Alice', 'writer', 'desktop', false], [null, 'writer', 'phone', true]],
    );
    await phone.locator('#viewers').tap();
    await phone.locator('#people .person', { hasText: 'Alice' }).waitFor({ timeout: WAIT });
    await shot(phone, 'presence-list-phone');
    await phone.locator('#viewers').tap();

    // Alice types: the desktop page of another viewer says so.
    const bob = await newPage(browser, daemon.url);
    await openSession(bob, daemon.url, id);
    await bob.waitForFunction(() => window.ptyhub.presence.people.length === 3, null, { timeout: WAIT });
    await typeInTerminal(alice, 'echo hi');
    await bob.locator('#typing', { hasText: 'Alice is typing' }).waitFor({ timeout: WAIT });
    await bob.locator('#viewers').click();
    await bob.locator('#people .person.typing', { hasText: 'Alice' }).waitFor({ timeout: WAIT });
    await shot(bob, 'presence-typing');
    await bob.locator('#viewers').click();
    await typeInTerminal(alice, '\n');

    // The home page names them, and its dot lights while the program writes.
    await typeInTerminal(alice, 'for i in $(seq 1 400); do echo tick-$i; sleep 0.1; done\n');
    const home = await newPage(browser, daemon.url);
    const row = home.locator(`.session[data-id="${id}"]`);
    await row.locator('.session-viewers', { hasText: 'Alice, viewer 2, viewer 3' }).waitFor({ timeout: WAIT });
    await row.locator('.activity.active').waitFor({ timeout: WAIT });
    await shot(home, 'home-presence');
    await typeInTerminal(alice, '\x03');
    for (const p of [alice, phone, bob, home]) {
      assert.deepEqual(p.errors, []);
      await p.context().close();
    }
  });

  it('keys typed during a YOLO restart go to the new program, with "restarting…" shown', async () => {
    const p = await newPage(browser, daemon.url);
    await openSession(p, daemon.url, newId(), 'reader');
    await waitForScreen(p, /^old-up$/m);
    await p.locator('#yolo').click();
    await p.locator('#restart-note').waitFor({ state: 'visible', timeout: WAIT });
    await typeInTerminal(p, 'held-keys\n');
    await shot(p, 'yolo-restarting');
    await waitForScreen(p, /^new-got:held-keys$/m);
    assert.doesNotMatch(await screenText(p), /old-got:/);
    await p.locator('#restart-note').waitFor({ state: 'hidden', timeout: WAIT });
    assert.deepEqual(p.errors, []);
    await p.context().close();
  });

  it('font size and theme are kept across a reload; search finds a word in the scrollback; the pill brings back the live bottom', async () => {
    const p = await newPage(browser, daemon.url);
    const id = newId();
    await openSession(p, daemon.url, id, 'shell');
    await waitForScreen(p, /^\$ $/m);
    const before = await p.evaluate(() => window.ptyhub.term.options.fontSize);
    await p.locator('.xterm-helper-textarea').focus();
    await p.keyboard.press('Control+=');
    await p.keyboard.press('Control+=');
    await p.waitForFunction((n) => window.ptyhub.term.options.fontSize === n + 2, before, { timeout: WAIT });
    await p.locator('#prefs-toggle').click();
    await p.locator('#theme-select').selectOption('solarized-dark');
    await p.locator('#font-smaller').click();
    await p.waitForFunction((n) => window.ptyhub.term.options.fontSize === n + 1, before, { timeout: WAIT });
    await shot(p, 'prefs-solarized');
    await p.reload();
    await p.waitForFunction(() => window.ptyhub?.state?.ready === true, null, { timeout: WAIT });
    assert.equal(await p.evaluate(() => window.ptyhub.term.options.fontSize), before + 1);
    assert.equal(await p.evaluate(() => window.ptyhub.term.options.theme.background), '#002b36');
    assert.equal(await p.evaluate(() => document.fonts.check('14px "JetBrains Mono"')), true, 'the bundled font is loaded');

    // A word far up in the scrollback.
    await typeInTerminal(p, 'echo needle-$((6*7)); seq 1 300\n');
    await waitForScreen(p, /^300$/m);
    await p.keyboard.press('Control+Shift+F');
    await p.locator('#search-input').waitFor({ state: 'visible', timeout: WAIT });
    await p.locator('#search-input').fill('needle-42');
    await p.locator('#search .search-count', { hasText: /of 1$/ }).waitFor({ timeout: WAIT });
    // The match was scrolled into view: the reader is off the live bottom now.
    assert.ok(await p.evaluate(() => window.ptyhub.term.buffer.active.viewportY < window.ptyhub.term.buffer.active.baseY));
    await shot(p, 'search-found');
    await p.keyboard.press('Escape');
    await p.locator('#search').waitFor({ state: 'hidden', timeout: WAIT });

    // Scrolled up, new output (typed on another page: typing here would scroll down) shows the
    // pill; a click goes back down.
    await p.evaluate(() => window.ptyhub.term.scrollToTop());
    const other = await newPage(browser, daemon.url);
    await openSession(other, daemon.url, id);
    await typeInTerminal(other, 'echo more-output\n');
    await waitForScreen(p, /^more-output$/m);
    await p.locator('#new-output').waitFor({ state: 'visible', timeout: WAIT });
    await other.context().close();
    await shot(p, 'new-output-pill');
    await p.locator('#new-output').click();
    await p.locator('#new-output').waitFor({ state: 'hidden', timeout: WAIT });
    assert.ok(await p.evaluate(() => window.ptyhub.term.buffer.active.viewportY === window.ptyhub.term.buffer.active.baseY));
    // Ctrl+0: the default size again.
    await p.locator('.xterm-helper-textarea').focus();
    await p.keyboard.press('Control+0');
    await p.waitForFunction((n) => window.ptyhub.term.options.fontSize === n, before, { timeout: WAIT });
    await p.evaluate(() => localStorage.clear());
    assert.deepEqual(p.errors, []);
    await p.context().close();
  });

  for (const [dpr, renderer] of [
    [2, 'webgl'],
    [3, 'webgl'],
    [2, 'dom'],
    [3, 'dom'],
  ]) {
    it(`at device pixel ratio ${dpr} the terminal fills its box and is not cropped (${renderer} renderer)`, async () => {
      const p = await newPage(browser, daemon.url, { viewport: { width: 900, height: 600 }, deviceScaleFactor: dpr });
      // Headless Chromium's software GL composites the WebGL canvas at the wrong scale in
      // screenshots at DPR > 1 (its canvas itself is right: device-pixel backing, CSS-pixel
      // size); the DOM renderer's screenshots show what a person sees.
      if (renderer === 'dom') await p.addInitScript(() => (window.ptyhubRenderer = 'dom'));
      await openSession(p, daemon.url, newId(), 'shell');
      await waitForScreen(p, /^\$ $/m);
      await settled(p);
      await typeInTerminal(p, 'seq 1 100\n');
      await waitForScreen(p, /^100$/m);
      const m = await p.evaluate(() => {
        const host = document.getElementById('terminal').getBoundingClientRect();
        const screen = window.ptyhub.term.element.querySelector('.xterm-screen').getBoundingClientRect();
        const cell = window.ptyhub.term.element.querySelector('.xterm-screen').offsetWidth / window.ptyhub.term.cols;
        return { host: host.toJSON(), screen: screen.toJSON(), cell, dpr: devicePixelRatio };
      });
      assert.equal(m.dpr, dpr);
      assert.ok(m.screen.right <= m.host.right + 0.5 && m.screen.bottom <= m.host.bottom + 0.5, `inside its box: ${JSON.stringify(m)}`);
      // Fills it: less than one cell (plus the scrollbar's room) left over on each side.
      assert.ok(m.host.right - m.screen.right < 2 * m.cell + 16, `fills the width: ${JSON.stringify(m)}`);
      assert.ok(m.host.bottom - m.screen.bottom < (m.screen.height / (await p.evaluate(() => window.ptyhub.term.rows))) + 1, `fills the height: ${JSON.stringify(m)}`);
      await shot(p, `dpr-${dpr}-${renderer}`);
      assert.deepEqual(p.errors, []);
      await p.context().close();
    });
  }
});

describe('addresses with nothing there', () => {
  it('get the 404 page in the UI\'s style, not JSON, on a desktop and a phone', async () => {
    const daemon = await startDaemon();
    const browser = await launchBrowser();
    try {
      for (const [name, options] of [['desktop', {}], ['phone', PHONE]]) {
        const p = await newPage(browser, daemon.url, options);
        for (const path of ['no/such/page', 'session/not-a-uuid']) {
          const res = await p.goto(`${daemon.url}${path}`);
          assert.equal(res.status(), path.startsWith('session') ? 400 : 404);
          await p.locator('h1', { hasText: 'There is nothing at this address' }).waitFor({ timeout: WAIT });
          assert.doesNotMatch(await p.locator('body').innerText(), /[{}]/);
        }
        await shot(p, `not-found-${name}`);
        await p.locator('a', { hasText: 'Go to the sessions' }).click();
        await p.waitForURL(daemon.url, { timeout: WAIT });
        await p.context().close();
      }
    } finally {
      await browser.close();
      await daemon.stop();
    }
  });
});

describe('when ptyhub stops and comes back', () => {
  it('says ptyhub stopped (not that the program ended), then that it restarted and the session is gone', async () => {
    const first = await startDaemon();
    const browser = await launchBrowser();
    try {
      const p = await newPage(browser, first.url);
      await p.addInitScript(() => {
        window.ptyhubTimings = { firstRetryMs: 300, maxRetryMs: 1000 };
      });
      await openSession(p, first.url, newId(), 'shell');
      await waitForScreen(p, /^\$ $/m);
      await first.stop();
      await p.locator('#banner', { hasText: 'ptyhub stopped' }).waitFor({ timeout: WAIT });
      assert.equal(await p.locator('#exit-dialog').isVisible(), false, 'no "program ended" dialog');
      assert.equal(await p.evaluate(() => window.ptyhub.state.exit), null);
      await shot(p, 'daemon-stopped');
      const port = new URL(first.url).port;
      const second = await startDaemon({ listen: `127.0.0.1:${port}` });
      try {
        await p.locator('#fatal', { hasText: 'ptyhub was restarted' }).waitFor({ timeout: WAIT });
        assert.equal(await p.locator('#fatal-home').isVisible(), true);
        await shot(p, 'daemon-restarted-session-gone');
        const phone = await newPage(browser, null, PHONE);
        // Same page on a phone: the fatal box fits.
        await phone.goto(`${second.url}?token=browser-test-token-0123456789abcdef`);
        await phone.goto(p.url());
        await phone.locator('#fatal').waitFor({ state: 'visible', timeout: WAIT });
        await shot(phone, 'session-gone-phone');
        await p.locator('#fatal-home').click();
        await p.waitForURL(second.url, { timeout: WAIT });
        assert.deepEqual(p.errors.filter((e) => !/WebSocket|ERR_|net::|404/.test(e)), []);
      } finally {
        await second.stop();
      }
    } finally {
      await browser.close();
      await first.stop();
    }
  });
});

describe('new states at device pixel ratio 2', () => {
  it('preferences, search, the viewer list and the restart banner, on a desktop and a phone', async () => {
    const daemon = await startDaemon();
    const browser = await launchBrowser();
    try {
      for (const [name, options] of [
        ['desktop', { viewport: { width: 1200, height: 760 }, deviceScaleFactor: 2 }],
        ['phone', { ...PHONE, deviceScaleFactor: 2 }],
      ]) {
        const p = await newPage(browser, daemon.url, options);
        // The DOM renderer: headless GL screenshots at DPR 2 are scaled wrong (see above).
        await p.addInitScript(() => (window.ptyhubRenderer = 'dom'));
        await openSession(p, daemon.url, newId(), 'shell');
        await waitForScreen(p, /^\$ $/m);
        await typeInTerminal(p, 'echo needle; seq 1 50\n');
        await waitForScreen(p, /^50$/m);
        await p.locator('#prefs-toggle').click();
        await p.locator('#prefs').waitFor({ timeout: WAIT });
        await shot(p, `dpr2-${name}-prefs`);
        await p.locator('#prefs-toggle').click();
        await p.locator('#search-toggle').click();
        await p.locator('#search-input').fill('needle');
        await p.locator('#search .search-count', { hasText: /of/ }).waitFor({ timeout: WAIT });
        await shot(p, `dpr2-${name}-search`);
        await p.keyboard.press('Escape');
        await p.locator('#viewers').click();
        await p.locator('#people .person.you').waitFor({ timeout: WAIT });
        await shot(p, `dpr2-${name}-people`);
        await p.locator('#viewers').click();
        await p.locator('#share').click();
        await p.locator('#share-make').click();
        await p.locator('#share-dialog .qr').waitFor({ timeout: WAIT });
        await shot(p, `dpr2-${name}-share`);
        await p.locator('#share-close').click();
        assert.deepEqual(p.errors, []);
        await p.context().close();
      }
      // ptyhub going away, as a phone at DPR 2 sees it.
      const p = await newPage(browser, daemon.url, { ...PHONE, deviceScaleFactor: 2 });
      await p.addInitScript(() => (window.ptyhubRenderer = 'dom'));
      await openSession(p, daemon.url, newId(), 'shell');
      await waitForScreen(p, /^\$ $/m);
      await daemon.stop();
      await p.locator('#banner', { hasText: 'ptyhub stopped' }).waitFor({ timeout: WAIT });
      await shot(p, 'dpr2-phone-daemon-stopped');
    } finally {
      await browser.close();
      await daemon.stop();
    }
  });
});
