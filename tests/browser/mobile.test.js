// The terminal page on a phone-sized screen (375×667, touch): the key bar, Ctrl+C from it, the chat panel.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WAIT, launchBrowser, newId, newPage, openSession, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

describe('phone-sized screen', () => {
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

  it('shows the key bar, and Ctrl from it interrupts sleep', async () => {
    // Scale factor 1: headless Chromium's software GL leaves xterm's WebGL canvas out of
    // screenshots at other scales (the page itself draws fine), and the screenshot must be looked at.
    const p = await newPage(browser, daemon.url, { viewport: { width: 375, height: 667 }, isMobile: true, hasTouch: true, deviceScaleFactor: 1 });
    await openSession(p, daemon.url, newId(), 'shell', { name: 'phone' });
    await waitForScreen(p, /^\$ $/m);

    // Every key is on screen, below the terminal, and nothing overflows sideways.
    const layout = await p.evaluate(() => {
      const box = (el) => el.getBoundingClientRect();
      return {
        keys: [...document.querySelectorAll('#keybar .key')].map((k) => ({ label: k.textContent, ...box(k).toJSON() })),
        terminalBottom: box(document.getElementById('frame')).bottom,
        barBottom: box(document.querySelector('.bar')).bottom,
        scrollWidth: document.documentElement.scrollWidth,
        cols: window.ptyhub.term.cols,
      };
    });
    assert.deepEqual(layout.keys.map((k) => k.label), ['Esc', 'Tab', 'Ctrl', 'Alt', '←', '↑', '↓', '→', '|', '~', '/']);
    for (const k of layout.keys) {
      assert.ok(k.left >= 0 && k.right <= 375, `key ${k.label} inside the screen (${k.left}..${k.right})`);
      assert.ok(k.top >= layout.terminalBottom - 1 && k.bottom <= 667, `key ${k.label} under the terminal`);
      assert.ok(k.height >= 36 && k.width >= 28, `key ${k.label} big enough to hit (${k.width}×${k.height})`);
    }
    assert.ok(layout.scrollWidth <= 375, `no sideways scrolling (${layout.scrollWidth})`);
    assert.ok(layout.cols >= 40, `a usable width (${layout.cols} columns)`);

    await typeInTerminal(p, 'sleep 300; echo not-interrupted\n');
    await waitForScreen(p, /^\$ sleep 300; echo not-interrupted$/m);
    await p.locator('#keybar .key[data-key="Ctrl"]').tap();
    assert.equal(await p.locator('#keybar .key[data-key="Ctrl"]').getAttribute('aria-pressed'), 'true');
    // The terminal kept the focus (a soft keyboard would have stayed open): type the C.
    assert.equal(await p.evaluate(() => document.activeElement === window.ptyhub.term.textarea), true);
    await p.keyboard.type('c');
    await waitForScreen(p, /^\$ sleep 300; echo not-interrupted\n\^C\n\$ $/m, 10000);
    assert.equal(await p.locator('#keybar .key[data-key="Ctrl"]').getAttribute('aria-pressed'), 'false');

    // Arrows from the key bar: up recalls the last command.
    await p.locator('#keybar .key[data-key="↑"]').tap();
    await waitForScreen(p, /^\$ sleep 300; echo not-interrupted\n\^C\n\$ sleep 300; echo not-interrupted$/m);
    await p.locator('#keybar .key[data-key="Ctrl"]').tap();
    await p.keyboard.type('u');
    await typeInTerminal(p, 'echo ok-from-phone\n');
    await waitForScreen(p, /^ok-from-phone$/m);
    await shot(p, 'mobile-375');

    // The chat panel covers the terminal on a phone, and closes back to it.
    await p.locator('#chat-toggle').tap();
    const chat = await p.evaluate(() => document.getElementById('chat').getBoundingClientRect().toJSON());
    assert.ok(chat.width >= 370, `chat uses the width (${chat.width})`);
    await p.locator('.chat-text').fill('typing from a phone');
    await p.locator('.chat-form button[type=submit]').tap();
    await p.locator('.chat-msg.mine', { hasText: 'typing from a phone' }).waitFor({ timeout: WAIT });
    await shot(p, 'mobile-chat');
    await p.locator('.chat-close').tap();
    assert.equal(await p.locator('#chat').isHidden(), true);
    assert.deepEqual(p.errors, []);
  });
});
