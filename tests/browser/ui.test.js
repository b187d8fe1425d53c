// Sizes that suit everyone, honest states and preferences: a phone that follows, taking control of the size, a daemon that stops and comes back, keys held through a YOLO restart, font size and theme kept, search, the new-output pill, DPR 2 and 3.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SIZES, WAIT, guestPage, launchBrowser, newId, newPage, openSession, ownerName, screenText, settled, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

const READER = `
[assistants.reader]
name = "Reader"
command = ["bash", "-c", "trap 'sleep 1.5; exit 0' HUP TERM; echo old-up; while read -r l; do echo old-got:$l; done"]
yolo = ["bash", "-c", "echo new-up; while read -r l; do echo new-got:$l; done"]
`;

const PHONE = { viewport: { width: 375, height: 667 }, isMobile: true, hasTouch: true, deviceScaleFactor: 1 };

/** The terminal's size as the page shows it. */
const termSize = (p) => p.evaluate(() => ({ cols: window.ptyhub.term.cols, rows: window.ptyhub.term.rows }));

/**
 * Drags a finger across the middle of the terminal by (dx, dy) px, in steps, as a person would
 * to see the rest of a bigger session; resolves to where the view is panned then.
 */
async function drag(page, dx, dy) {
  const box = await page.evaluate(() => document.getElementById('terminal').getBoundingClientRect().toJSON());
  const x = box.left + box.width / 2 - dx / 2;
  const y = box.top + box.height / 2 - dy / 2;
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Input.dispatchTouchEvent', { type: 'touchStart', touchPoints: [{ x, y }] });
  for (let i = 1; i <= 10; i++) await cdp.send('Input.dispatchTouchEvent', { type: 'touchMove', touchPoints: [{ x: x + (dx * i) / 10, y: y + (dy * i) / 10 }] });
  await cdp.send('Input.dispatchTouchEvent', { type: 'touchEnd', touchPoints: [] });
  await cdp.detach();
  return page.evaluate(() => {
    const t = document.getElementById('terminal');
    return { left: t.scrollLeft, top: t.scrollTop, tall: t.scrollHeight > t.clientHeight, page: scrollX + scrollY };
  });
}

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

  it('a phone held either way never shrinks the session, reads at a readable size, and is told by name whose window sizes it; a writer can take control', async () => {
    const id = newId();
    // Every page holds the daemon token: each is its owner, named by its user name.
    const owner = await ownerName(daemon);
    const desk = await newPage(browser, daemon.url);
    await openSession(desk, daemon.url, id, 'shell');
    await waitForScreen(desk, /^\$ $/m);
    await settled(desk);
    const deskSize = await termSize(desk);
    assert.ok(deskSize.cols > 120, `a wide desktop session (${deskSize.cols} columns)`);

    for (const [held, options] of [['portrait', SIZES.portrait], ['landscape', SIZES.landscape]]) {
      const phone = await newPage(browser, daemon.url, options);
      await openSession(phone, daemon.url, id);
      await waitForScreen(phone, /^\$ $/m);
      await typeInTerminal(phone, `echo from-the-phone-${held}\n`);
      await waitForScreen(desk, new RegExp(`^from-the-phone-${held}$`, 'm'));
      assert.equal(await phone.evaluate(() => window.ptyhub.size.mode), 'follow');
      assert.equal(await phone.evaluate(() => window.ptyhub.presence.people.find((p) => p.you)?.device), 'phone');
      assert.deepEqual(await termSize(desk), deskSize, `the ${held} phone did not shrink the desktop`);
      assert.deepEqual(await termSize(phone), deskSize, 'the phone shows the session at its size');
      // Readable: the text is scaled no smaller than 10 px, and the rest is reached by panning.
      await phone.locator('#size-hint', { hasText: `sized by ${owner}’s window; this phone follows it` }).waitFor({ timeout: WAIT });
      const view = await phone.evaluate(() => {
        const host = document.getElementById('terminal');
        return {
          text: window.ptyhub.size.scale * window.ptyhub.term.options.fontSize,
          panned: document.getElementById('frame').classList.contains('panned'),
          wide: host.scrollWidth > host.clientWidth,
        };
      });
      assert.ok(view.text >= 10, `text at least 10 px (${view.text})`);
      assert.ok(view.panned && view.wide, `the rest is reached by panning (${JSON.stringify(view)})`);
      // A finger dragged across the terminal pans it (xterm keeps the other drags for its scrollback).
      // A finger dragged across the terminal pans it, up and down too where the session is
      // taller than the phone (not xterm's empty scrollback), and the page itself stays put.
      const across = await drag(phone, -200, 0);
      assert.ok(across.left >= 100 && across.page === 0, `a drag across pans the view (${JSON.stringify(across)})`);
      if (held === 'landscape') assert.ok(across.tall, 'held sideways, the session is taller than the phone');
      if (across.tall) {
        const up = await drag(phone, 0, -150);
        assert.ok(up.top >= 60 && up.page === 0, `a drag up pans the view down (${JSON.stringify(up)})`);
      }
      await shot(phone, `phone-${held}-panned`);
      await phone.evaluate(() => document.getElementById('terminal').scrollTo(0, 0));
      await shot(phone, `phone-${held}-follows-readable`, { readme: held === 'portrait' });
      // The settings say the same as the hint.
      await phone.locator('#prefs-toggle').tap();
      assert.equal(await phone.locator('#prefs input[name="size-mode"][value="follow"]').isChecked(), true);
      assert.equal(await phone.locator('#prefs input[name="view-mode"][value="fit"]').isChecked(), true);
      // The font size the person chose, panned over: full size.
      await phone.locator('#prefs input[name="view-mode"][value="pan"]').check();
      await phone.waitForFunction(() => window.ptyhub.size.scale === 1, null, { timeout: WAIT });
      await shot(phone, `phone-${held}-own-font-size`);
      await phone.locator('#prefs input[name="view-mode"][value="fit"]').check();
      await phone.keyboard.press('Escape');
      await phone.locator('#prefs').waitFor({ state: 'hidden', timeout: WAIT });
      assert.deepEqual(phone.errors, []);
      if (held === 'landscape') {
        await phone.context().close();
        continue;
      }

      // The phone asks to size the session after all: everyone gets its size, and the desktop
      // is told whose window it is.
      await phone.locator('#size-hint .size-hint-action', { hasText: 'Size it to my window' }).tap();
      await desk.waitForFunction((w) => window.ptyhub.term.cols < w, deskSize.cols, { timeout: WAIT });
      await desk.locator('#size-hint', { hasText: `sized by ${owner}’s window: it is smaller than this window` }).waitFor({ timeout: WAIT });
      await shot(desk, 'desktop-take-control-offer');
      // The desktop takes control: its size again, and the phone is told its size no longer counts.
      await desk.locator('#size-hint .size-hint-action', { hasText: 'Take control of the size' }).click();
      await desk.waitForFunction((w) => window.ptyhub.term.cols === w, deskSize.cols, { timeout: WAIT });
      await phone.waitForFunction((w) => window.ptyhub.term.cols === w, deskSize.cols, { timeout: WAIT });
      await phone.locator('#size-hint', { hasText: `sized by ${owner}’s window: this phone’s size does not count until you size it again` }).waitFor({ timeout: WAIT });
      await shot(phone, 'phone-after-take-control');
      // Back to following from the preferences panel, which shows what is in force.
      await phone.locator('#prefs-toggle').tap();
      assert.equal(await phone.locator('#prefs input[name="size-mode"][value="mine"]').isChecked(), true);
      await phone.locator('#prefs input[value="follow"]').check();
      await shot(phone, 'phone-prefs');
      assert.deepEqual(phone.errors, []);
      await phone.context().close();
    }
    assert.deepEqual(desk.errors, []);
    await desk.context().close();
  });

  it('presence: names, roles and devices in the viewer list, "is typing" on the other page, names and an activity dot on the home page', async () => {
    const id = newId();
    // Alice holds the daemon token: she is its owner, shown by its user name. Pat, on a phone,
    // came with a share link: a guest, shown by the name Pat chose, marked as a guest.
    const owner = await ownerName(daemon);
    const alice = await newPage(browser, daemon.url);
    await openSession(alice, daemon.url, id, 'shell');
    await waitForScreen(alice, /^\$ $/m);
    await alice.click('#chat-toggle');
    await alice.locator('.chat-text').fill('hello');
    await alice.keyboard.press('Enter');
    await alice.click('.chat-close');
    const phone = await guestPage(browser, daemon, id, 'Pat', PHONE);
    // The phone sees Alice by her user name, itself as the guest Pat on a phone.
    await phone.waitForFunction(() => window.ptyhub.presence.people.length === 2 && window.ptyhub.presence.people[1].name === 'Pat', null, { timeout: WAIT });
    const people = await phone.evaluate(() => window.ptyhub.presence.people);
    assert.deepEqual(
      people.map((p) => [p.name, p.guest, p.role, p.device, p.you]),
      [[owner, false, 'writer', 'desktop', false], ['Pat', true, 'writer', 'phone', true]],
    );
    await phone.locator('#viewers').tap();
    await phone.locator('#people .person', { hasText: owner }).waitFor({ timeout: WAIT });
    await phone.locator('#people .person.you .guest-mark').waitFor({ timeout: WAIT });
    await shot(phone, 'presence-list-phone');
    await phone.locator('#viewers').tap();

    // Alice types: the desktop page of another viewer says so.
    const bob = await newPage(browser, daemon.url);
    await openSession(bob, daemon.url, id);
    await bob.waitForFunction(() => window.ptyhub.presence.people.length === 3, null, { timeout: WAIT });
    await typeInTerminal(alice, 'echo hi');
    await bob.locator('#typing', { hasText: `${owner} is typing` }).waitFor({ timeout: WAIT });
    await bob.locator('#viewers').click();
    await bob.locator('#people .person.typing', { hasText: owner }).waitFor({ timeout: WAIT });
    await shot(bob, 'presence-typing');
    await bob.locator('#viewers').click();
    await typeInTerminal(alice, '\n');

    // The home page names them, and its dot lights while the program writes.
    await typeInTerminal(alice, 'for i in $(seq 1 400); do echo tick-$i; sleep 0.1; done\n');
    const home = await newPage(browser, daemon.url);
    const row = home.locator(`.session[data-id="${id}"]`);
    await row.locator('.session-viewers', { hasText: `${owner}, Pat (guest), ${owner}` }).waitFor({ timeout: WAIT });
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
  it('says ptyhub stopped (not that the program ended), retries every few seconds, then shows the gone session\'s last screen with its recording', async () => {
    // The recordings outlive the daemon, as they do in a real restart.
    const recordings = mkdtempSync(join(tmpdir(), 'ptyhub-recordings-'));
    const config = `[recording]\ndir = ${JSON.stringify(recordings)}\n`;
    const first = await startDaemon({ config });
    const browser = await launchBrowser();
    try {
      const id = newId();
      const pages = {};
      for (const [size, options] of Object.entries(SIZES)) {
        const p = await newPage(browser, first.url, options);
        await openSession(p, first.url, id, size === 'desktop' ? 'shell' : undefined);
        pages[size] = p;
      }
      const p = pages.desktop;
      await typeInTerminal(p, 'echo before-restart-$((6*7))\n');
      for (const q of Object.values(pages)) await waitForScreen(q, /^before-restart-42$/m);
      // The page's own timings: no test shortcut.
      await p.evaluate(() => {
        window.waits = [];
        const on = window.ptyhub.conn.on;
        const report = on.state;
        on.state = (s) => {
          if (s.state === 'waiting') window.waits.push(s.retryAt - Date.now());
          report(s);
        };
      });
      await first.stop();
      await p.locator('#banner', { hasText: 'ptyhub stopped' }).waitFor({ timeout: WAIT });
      assert.equal(await p.locator('#exit-dialog').isVisible(), false, 'no "program ended" dialog');
      assert.equal(await p.evaluate(() => window.ptyhub.state.exit), null);
      await shot(p, 'daemon-stopped');
      // Down for a while: the retries stay at most 2.5 s apart while the page is in view.
      await p.waitForFunction(() => window.waits.length >= 4, null, { timeout: WAIT });
      const waits = await p.evaluate(() => window.waits);
      assert.ok(Math.max(...waits) <= 2500, `retries at most 2.5 s apart (${waits.join(', ')})`);
      const port = new URL(first.url).port;
      const second = await startDaemon({ listen: `127.0.0.1:${port}`, config });
      const back = Date.now();
      try {
        await p.locator('#fatal', { hasText: 'ptyhub was restarted' }).waitFor({ timeout: WAIT });
        const took = Date.now() - back;
        assert.ok(took < 5000, `the page knew within a few seconds of ptyhub's return (${took} ms)`);
        for (const [size, q] of Object.entries(pages)) {
          await q.locator('#fatal', { hasText: 'ptyhub was restarted' }).waitFor({ timeout: WAIT });
          // The last screen stays in view, and the recording is offered.
          assert.equal(await q.locator('#fatal').evaluate((el) => el.classList.contains('fatal-over')), true);
          assert.equal(await q.locator('#terminal').isVisible(), true);
          assert.match(await screenText(q), /^before-restart-42$/m);
          assert.match(await q.locator('#fatal').textContent(), /last screen is still shown/);
          await q.locator('#fatal-replay').waitFor({ state: 'visible', timeout: WAIT });
          assert.match(await q.locator('#fatal-replay').getAttribute('href'), new RegExp(`/replay/${id}$`));
          assert.equal(await q.locator('#keybar').isVisible(), false);
          assert.equal(await q.locator('#share').isVisible(), false);
          await shot(q, `daemon-restarted-session-gone-${size}`);
        }
        assert.equal(await p.locator('#fatal-home').isVisible(), true);
        // The recording plays.
        const replay = await p.locator('#fatal-replay').getAttribute('href');
        const r = await newPage(browser, second.url);
        await r.goto(new URL(replay, second.url).href);
        await r.locator('#title').waitFor({ timeout: WAIT });
        await r.context().close();
        const phone = await newPage(browser, null, PHONE);
        // A page opened afresh on a phone, with nothing to show: the fatal box fits.
        await phone.goto(`${second.url}?token=browser-test-token-0123456789abcdef`);
        await phone.goto(p.url());
        await phone.locator('#fatal').waitFor({ state: 'visible', timeout: WAIT });
        await shot(phone, 'session-gone-phone');
        await p.locator('#fatal-home').click();
        await p.waitForURL(second.url, { timeout: WAIT });
        for (const q of Object.values(pages)) assert.deepEqual(q.errors.filter((e) => !/WebSocket|ERR_|net::|404/.test(e)), []);
      } finally {
        await second.stop();
      }
    } finally {
      await browser.close();
      await first.stop();
      rmSync(recordings, { recursive: true, force: true });
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
