// The replay page in a real browser: a real shell's recording with a chat marker plays, seeks to the marker and shows the screen of that moment, changes speed, copies text, fits a phone; the pages link to it.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WAIT, eventually, launchBrowser, newId, newPage, openSession, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

/** The player's screen as text, one line per row. */
const replayScreen = (page) =>
  page.evaluate(() => [...document.querySelectorAll('#player .ap-term-text .ap-line')].map((l) => l.textContent.replace(/\s+$/, '')).join('\n'));

/** Waits until the player's screen passes `test`; the last screen is in the error. */
async function waitForReplay(page, test, what) {
  let last = '';
  await eventually(
    async () => {
      last = await replayScreen(page);
      return test(last);
    },
    { what: `${what}; the player shows:\n${last}` },
  ).catch((e) => {
    throw new Error(`${e.message}\n(last screen:\n${last})`);
  });
}

/** What the shell printed before the chat message, and after it. */
const BEFORE = /^ONE-2$/m;
const AFTER = /^TWO-4$/m;
const atMarker = (s) => BEFORE.test(s) && !AFTER.test(s);

describe('replay page', () => {
  let daemon;
  let browser;
  const id = newId();

  before(async () => {
    daemon = await startDaemon(); // recordings go to its temp dir
    browser = await launchBrowser();
    // A real bash prints known text, someone chats (a marker), then the screen is cleared and
    // something else printed: at the marker only the first text is on screen.
    const term = await newPage(browser, daemon.url);
    await openSession(term, daemon.url, id, 'shell', { name: 'replayed' });
    await waitForScreen(term, /^\$ $/m);
    await typeInTerminal(term, 'echo ONE-$((1+1))\n');
    await waitForScreen(term, BEFORE);
    await term.click('#chat-toggle');
    await term.locator('.chat-text').fill('checkpoint here');
    await term.keyboard.press('Enter');
    await term.locator('.chat-msg.mine', { hasText: 'checkpoint here' }).waitFor({ timeout: WAIT });
    await term.click('.chat-close');
    await typeInTerminal(term, 'clear; echo TWO-$((2+2))\n');
    await waitForScreen(term, AFTER);
    // The terminal page links to the replay.
    assert.match(await term.locator('#replay-link').getAttribute('href'), new RegExp(`^/replay/${id}$`));
    // The recorder writes a moment behind the session.
    await eventually(
      () => term.evaluate(async (u) => (await (await fetch(u, { cache: 'no-store' })).text()).includes('TWO-4'), `/api/sessions/${id}/recording`),
      { what: 'the recording to hold the last output' },
    );
    await term.close();
  });

  after(async () => {
    await browser?.close();
    await daemon?.stop();
  });

  it('is linked from the session list', async () => {
    const home = await newPage(browser, daemon.url);
    const link = home.locator(`.session[data-id="${id}"] .replay-btn`);
    await link.waitFor({ timeout: WAIT });
    await link.click();
    await home.waitForURL(new RegExp(`/replay/${id}$`), { timeout: WAIT });
    await home.locator('#controls').waitFor({ state: 'visible', timeout: WAIT });
    assert.deepEqual(home.errors, []);
    await home.close();
  });

  it('plays, seeks to the chat marker and shows that moment, changes speed, copies text', async () => {
    const page = await newPage(browser, daemon.url);
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
    await page.goto(`${daemon.url}replay/${id}`);
    await page.locator('#controls').waitFor({ state: 'visible', timeout: WAIT });
    assert.equal(await page.locator('#title').textContent(), 'replayed');
    assert.match(await page.locator('#download').getAttribute('href'), new RegExp(`/api/sessions/${id}/recording$`));
    // The chat message is a marker, on the seek bar and in the list.
    const marker = page.locator('.replay-marker', { hasText: ': checkpoint here' });
    await marker.waitFor({ timeout: WAIT });
    assert.ok((await page.locator('#player .ap-marker-container').count()) >= 1, 'a marker on the seek bar');

    // Play from the start (the player's own button); it gets to the end and shows the last screen.
    await page.locator('#player .ap-playback-button').click();
    await waitForReplay(page, (s) => AFTER.test(s), 'the last screen after playing');
    assert.ok(await page.evaluate(() => window.ptyhubReplay.getCurrentTime() > 0));

    // The marker: the screen as it was when the chat line was written, before the clear.
    await marker.click();
    await waitForReplay(page, atMarker, 'the screen at the marker');
    // The whole page in view: bar, player, speed and the marker list.
    await page.evaluate(() => scrollTo(0, 0));
    const box = await page.locator('#player').boundingBox();
    assert.ok(box.y + box.height <= 760, `the player ends at ${box.y + box.height}px, below the window`);
    await shot(page, 'replay-desktop');

    // Copy text: what is on screen now.
    await page.click('#copy');
    await page.locator('#copy', { hasText: 'Copied' }).waitFor({ timeout: WAIT });
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    assert.match(copied, BEFORE);
    assert.doesNotMatch(copied, AFTER);

    // 8×: a new player at the same moment, which plays on to the end.
    const at = await page.evaluate(() => window.ptyhubReplay.getCurrentTime());
    await page.click('[data-speed="8"]');
    assert.equal(await page.locator('[data-speed="8"]').getAttribute('aria-pressed'), 'true');
    assert.equal(await page.locator('[data-speed="1"]').getAttribute('aria-pressed'), 'false');
    await eventually(async () => Math.abs((await page.evaluate(() => window.ptyhubReplay.getCurrentTime())) - at) < 0.5, {
      what: 'the new player at the same moment',
    });
    await waitForReplay(page, atMarker, 'the screen at the marker at 8×');
    assert.equal(await page.locator('#player .ap-player').count(), 1, 'one player');
    await page.evaluate(() => window.ptyhubReplay.play());
    await waitForReplay(page, (s) => AFTER.test(s), 'the last screen at 8×');
    assert.deepEqual(page.errors, []);
    await page.close();
  });

  it('fits a phone', async () => {
    const page = await newPage(browser, daemon.url, { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    await page.goto(`${daemon.url}replay/${id}`);
    await page.locator('#controls').waitFor({ state: 'visible', timeout: WAIT });
    await page.locator('.replay-marker', { hasText: ': checkpoint here' }).tap();
    await waitForReplay(page, atMarker, 'the screen at the marker on a phone');
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than the phone`);
    const player = await page.locator('#player .ap-player').boundingBox();
    assert.ok(player && player.width <= 390, `the player is ${player?.width}px wide`);
    await shot(page, 'replay-phone');
    assert.deepEqual(page.errors, []);
    await page.close();
  });
});
