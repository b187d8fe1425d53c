// The finish of the terminal page at desktop and phone sizes: a dark theme darkens the whole page, Escape closes every popover and gives the keys back, the chat panel leaves the terminal whole, "is typing" stays while the person types, /favicon.ico, no Share for an ended session.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { SIZES, WAIT, launchBrowser, newId, newPage, openSession, ownerName, press, screenText, settled, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

/** The luma (0–255) of an element's computed background colour. */
function luma(page, selector) {
  return page.evaluate((sel) => {
    const el = document.querySelector(sel);
    const m = /rgba?\((\d+), (\d+), (\d+)/.exec(getComputedStyle(el).backgroundColor);
    return m ? 0.299 * m[1] + 0.587 * m[2] + 0.114 * m[3] : -1;
  }, selector);
}

/** Whether the terminal's hidden input has the focus (the keys go to the program). */
const termFocused = (p) => p.evaluate(() => document.activeElement === window.ptyhub.term.textarea);

describe('the finish of the terminal page', () => {
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

  it('serves /favicon.ico', async () => {
    const res = await fetch(new URL('favicon.ico', daemon.url));
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^image\/(x-icon|vnd\.microsoft\.icon)/);
    const bytes = new Uint8Array(await res.arrayBuffer());
    assert.deepEqual([...bytes.slice(0, 4)], [0, 0, 1, 0], 'an ICO file');
  });

  for (const [size, options] of Object.entries(SIZES)) {
    it(`a dark theme darkens the bars, panels and dialogs too; a light one lightens them on a dark system (${size})`, async () => {
      const p = await newPage(browser, daemon.url, { ...options, colorScheme: 'light' });
      await p.addInitScript(() => (window.ptyhubRenderer = 'dom'));
      await openSession(p, daemon.url, newId(), 'shell');
      await waitForScreen(p, /^\$ $/m);
      assert.ok((await luma(p, '.bar')) > 200, 'light to start with');
      await press(p, '#prefs-toggle');
      await p.locator('#theme-select').selectOption('dark');
      for (const sel of ['.bar', '#prefs', 'body']) assert.ok((await luma(p, sel)) < 60, `${sel} is dark`);
      if (size !== 'desktop') assert.ok((await luma(p, '#keybar')) < 60, 'the key bar is dark');
      await shot(p, `dark-theme-prefs-${size}`);
      await p.keyboard.press('Escape');
      await press(p, '#viewers');
      assert.ok((await luma(p, '#people')) < 60, 'the viewer list is dark');
      await p.keyboard.press('Escape');
      await press(p, '#share');
      await p.locator('#share-dialog[open]').waitFor({ timeout: WAIT });
      assert.ok((await luma(p, '#share-dialog')) < 60, 'the share dialog is dark');
      await shot(p, `dark-theme-share-${size}`);
      await p.keyboard.press('Escape');
      await press(p, '#chat-toggle');
      assert.ok((await luma(p, '#chat')) < 60, 'the chat panel is dark');
      await p.keyboard.press('Escape');
      // Kept across a reload, before the first paint of the page's own scripts is done.
      await p.reload();
      await p.waitForFunction(() => window.ptyhub?.state?.ready, null, { timeout: WAIT });
      assert.ok((await luma(p, '.bar')) < 60, 'still dark after a reload');
      // Solarized light on a dark system: the page goes light.
      await p.emulateMedia({ colorScheme: 'dark' });
      await press(p, '#prefs-toggle');
      await p.locator('#theme-select').selectOption('solarized-light');
      assert.ok((await luma(p, '.bar')) > 200, 'a light theme lightens the bar');
      await p.locator('#theme-select').selectOption('system');
      assert.ok((await luma(p, '.bar')) < 60, '"follow the system" follows the dark system');
      await p.evaluate(() => localStorage.clear());
      assert.deepEqual(p.errors, []);
      await p.context().close();
    });

    it(`Escape closes every popover and gives the keys back to the terminal; with none open it is the program's (${size})`, async () => {
      const p = await newPage(browser, daemon.url, options);
      await openSession(p, daemon.url, newId(), 'shell');
      await waitForScreen(p, /^\$ $/m);
      for (const [button, panel] of [
        ['#prefs-toggle', '#prefs'],
        ['#viewers', '#people'],
        ['#search-toggle', '#search'],
        ['#chat-toggle', '#chat'],
      ]) {
        await press(p, button);
        await p.locator(panel).waitFor({ state: 'visible', timeout: WAIT });
        await p.keyboard.press('Escape');
        await p.locator(panel).waitFor({ state: 'hidden', timeout: WAIT });
        assert.equal(await termFocused(p), true, `the keys are the terminal's after ${panel} closed`);
      }
      // The Share dialog and the rename form too.
      await press(p, '#share');
      await p.locator('#share-dialog[open]').waitFor({ timeout: WAIT });
      await p.keyboard.press('Escape');
      await p.locator('#share-dialog').waitFor({ state: 'hidden', timeout: WAIT });
      await p.waitForFunction(() => document.activeElement === window.ptyhub.term.textarea, null, { timeout: WAIT });
      await press(p, '#name');
      await p.locator('#rename').waitFor({ state: 'visible', timeout: WAIT });
      await p.keyboard.press('Escape');
      await p.locator('#rename').waitFor({ state: 'hidden', timeout: WAIT });
      await p.waitForFunction(() => document.activeElement === window.ptyhub.term.textarea, null, { timeout: WAIT });
      // Two at once: one Escape closes both.
      await press(p, '#viewers');
      await press(p, '#search-toggle');
      await p.keyboard.press('Escape');
      assert.equal(await p.locator('#people').isHidden(), true);
      assert.equal(await p.locator('#search').isHidden(), true);
      // Nothing open: Escape reaches the program.
      await typeInTerminal(p, "read -rsn1 k; printf 'got:%q\\n' \"$k\"\n");
      await waitForScreen(p, /^\$ read -rsn1 k/m);
      await p.keyboard.press('Escape');
      await waitForScreen(p, /^got:\$'\\E'$/m);
      assert.deepEqual(p.errors, []);
      await p.context().close();
    });
  }

  it('the chat panel sits beside the terminal, which is sized to what stays visible (desktop); on a phone it covers it while open', async () => {
    const p = await newPage(browser, daemon.url, SIZES.desktop);
    await openSession(p, daemon.url, newId(), 'shell');
    await waitForScreen(p, /^\$ $/m);
    await settled(p);
    const before = await p.evaluate(() => window.ptyhub.term.cols);
    await typeInTerminal(p, 'printf "%*s|\\n" $((COLUMNS-1)) right-edge\n');
    await waitForScreen(p, /right-edge\|$/m);
    await p.locator('#chat-toggle').click();
    await p.locator('#chat').waitFor({ timeout: WAIT });
    await p.waitForFunction((n) => window.ptyhub.term.cols < n, before, { timeout: WAIT });
    await settled(p);
    const box = await p.evaluate(() => ({
      screen: window.ptyhub.term.element.querySelector('.xterm-screen').getBoundingClientRect().right,
      chat: document.getElementById('chat').getBoundingClientRect().left,
    }));
    assert.ok(box.screen <= box.chat + 0.5, `the terminal ends where the chat begins (${box.screen} ≤ ${box.chat})`);
    await typeInTerminal(p, 'clear; printf "%*s|\\n" $((COLUMNS-1)) right-edge\n');
    await waitForScreen(p, /^ +right-edge\|$/m);
    await shot(p, 'chat-beside-terminal');
    await p.keyboard.press('Escape');
    await p.waitForFunction((n) => window.ptyhub.term.cols === n, before, { timeout: WAIT });
    for (const size of ['portrait', 'landscape']) {
      const phone = await newPage(browser, daemon.url, SIZES[size]);
      await openSession(phone, daemon.url, newId(), 'shell');
      await waitForScreen(phone, /^\$ $/m);
      await phone.locator('#chat-toggle').tap();
      const chat = await phone.evaluate(() => document.getElementById('chat').getBoundingClientRect().toJSON());
      assert.ok(chat.width >= SIZES[size].viewport.width - 1, `the chat covers the phone's width (${chat.width})`);
      await shot(phone, `chat-${size}`);
      await phone.context().close();
    }
    assert.deepEqual(p.errors, []);
    await p.context().close();
  });

  it('"is typing" stays up while the person types on', async () => {
    const id = newId();
    // Every page holds the daemon token: Alice is its owner, shown by its user name.
    const owner = await ownerName(daemon);
    const alice = await newPage(browser, daemon.url);
    await openSession(alice, daemon.url, id, 'shell');
    await waitForScreen(alice, /^\$ $/m);
    const bob = await newPage(browser, daemon.url, SIZES.portrait);
    await openSession(bob, daemon.url, id);
    const carol = await newPage(browser, daemon.url, SIZES.desktop);
    await openSession(carol, daemon.url, id);
    for (const p of [bob, carol]) await p.waitForFunction(() => window.ptyhub.presence.people.length === 3, null, { timeout: WAIT });
    await alice.locator('.xterm-helper-textarea').focus();
    // The others' pages (a phone's, a desktop's) are sampled while Alice types a key every 250 ms for 7 s.
    const samples = [];
    const start = Date.now();
    while (Date.now() - start < 7000) {
      await alice.keyboard.type('x');
      await new Promise((r) => setTimeout(r, 250));
      if (Date.now() - start > 1000) samples.push((await bob.locator('#typing').isVisible()) && (await carol.locator('#typing').isVisible()));
    }
    assert.ok(samples.length > 15);
    assert.deepEqual(samples.filter((v) => !v), [], '"Alice is typing" never dropped while she typed');
    assert.equal(await bob.locator('#typing').textContent(), `${owner} is typing…`);
    await shot(bob, 'typing-phone');
    // Stopped: it goes.
    await bob.locator('#typing').waitFor({ state: 'hidden', timeout: 6000 });
    for (const p of [alice, bob, carol]) {
      assert.deepEqual(p.errors, []);
      await p.context().close();
    }
  });

  for (const [size, options] of Object.entries(SIZES)) {
    it(`Share is not offered once the session has ended, nor the key bar (${size})`, async () => {
      const p = await newPage(browser, daemon.url, options);
      await openSession(p, daemon.url, newId(), 'shell');
      await waitForScreen(p, /^\$ $/m);
      assert.equal(await p.locator('#share').isVisible(), true);
      await typeInTerminal(p, 'exit 3\n');
      await p.locator('#exit-dialog[open]').waitFor({ timeout: WAIT });
      await press(p, '#exit-stay');
      assert.equal(await p.locator('#share').isVisible(), false);
      assert.equal(await p.locator('#keybar').isVisible(), false);
      assert.match(await screenText(p), /exit 3/);
      await shot(p, `ended-no-share-${size}`);
      assert.deepEqual(p.errors, []);
      await p.context().close();
    });
  }
});
